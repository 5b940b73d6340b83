#!/usr/bin/env python3
"""Golden vectors from vLLM itself: the chunk plans and packed bytes of vLLM's own packing code
(`packed_tensor.pack_tensors`, the NCCL rule) for a mixed-dtype parameter list at several buffer
sizes, and `base.layerwise_groups` on the name lists hotswap's tests use.

Run from a virtual environment outside the repository that has vLLM (CI never needs it):
    python3 -m venv /opt/hotswap-vllm-venv && /opt/hotswap-vllm-venv/bin/pip install vllm
    /opt/hotswap-vllm-venv/bin/python tests/golden/make_vllm_golden.py
Writes tests/golden/vllm/packing.json and tests/golden/vllm/layerwise_groups.json.
"""

import json
import os

import torch
import vllm
from vllm.distributed.weight_transfer.base import layerwise_groups
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

HERE = os.path.dirname(os.path.abspath(__file__))


def params():
    def make(n, dtype, shape=None):
        t = (torch.arange(n, dtype=torch.float32) * 0.37 - 1).to(dtype)
        return t.reshape(shape) if shape is not None else t
    return [
        ("a.bf16", make(3, torch.bfloat16)),
        ("b.f32", make(6, torch.float32, (2, 3))),
        ("c.bool", make(1, torch.bool)),
        ("d.i64", make(5, torch.int64)),
        ("e.empty", make(0, torch.float16)),
        ("f.f16", make(7, torch.float16)),
        ("g.scalar", torch.tensor(2.5, dtype=torch.float64)),
        ("h.u8", make(9, torch.uint8)),
        ("i.i32", make(4, torch.int32, (2, 2))),
        ("j.big.bf16", make(40, torch.bfloat16, (4, 10))),
        ("k.i8", make(3, torch.int8)),
        ("l.empty", make(0, torch.float32, (0, 4))),
    ]


def main():
    tensors = params()
    described = [{"name": n, "dtype": str(t.dtype).split(".")[-1], "shape": list(t.shape),
                  "bytes_hex": t.contiguous().view(-1).view(torch.uint8).numpy().tobytes().hex()}
                 for n, t in tensors]
    plans = {}
    for buffer in [1, 7, 16, 40, 64, 100, 1000, 1 << 20]:
        it = iter(tensors)
        chunks = []
        while True:
            chunk = pack_tensors(it, post_iter_func=lambda item: item[1], buffer_size_bytes=buffer)
            if chunk is None:
                break
            chunks.append({"names": chunk.names, "tensor_sizes": chunk.tensor_sizes,
                           "bytes_hex": chunk.packed_tensor.numpy().tobytes().hex()})
        plans[str(buffer)] = chunks
    with open(os.path.join(HERE, "vllm", "packing.json"), "w") as f:
        json.dump({"made_by": {"vllm": vllm.__version__, "torch": torch.__version__},
                   "params": described, "plans": plans}, f, indent=1)

    llama = ["model.embed_tokens.weight"]
    for i in range(3):
        llama += [f"model.layers.{i}.{w}" for w in ("input_layernorm.weight",
                  "self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.down_proj.weight")]
    llama += ["model.norm.weight", "lm_head.weight"]
    vlm = ["model.language_model.embed_tokens.weight", "visual.patch_embed.proj.weight",
           "visual.blocks.1.attn.qkv.weight", "model.language_model.layers.0.self_attn.q_proj.weight",
           "visual.blocks.0.attn.qkv.weight", "model.language_model.layers.1.self_attn.q_proj.weight",
           "visual.merger.mlp.0.weight", "model.language_model.norm.weight", "lm_head.weight"]
    moe = ["model.embed_tokens.weight"] + [
        f"model.layers.{l}.mlp.experts.{e}.{w}" for l in range(2) for e in range(3) for w in ("w1", "w2")]
    pp = ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
          "model.layers.1.mlp.up_proj.weight", "model.norm.weight", "lm_head.weight",
          "model.layers.3.mlp.up_proj.weight", "model.layers.2.mlp.up_proj.weight"]
    unordered = ["h.10.w", "h.2.w", "h.2.b", "h.1.w", "h.10.b"]
    cases = {"llama": llama, "vision_language": vlm, "moe": moe, "pipeline_post_first": pp,
             "unordered_stacks": unordered, "no_index": ["a.weight", "b.weight"], "empty": []}
    with open(os.path.join(HERE, "vllm", "layerwise_groups.json"), "w") as f:
        json.dump({"made_by": {"vllm": vllm.__version__},
                   "cases": {k: {"names": v, "groups": layerwise_groups(v)} for k, v in cases.items()}},
                  f, indent=1)
    print("vLLM golden vectors written")


if __name__ == "__main__":
    main()
