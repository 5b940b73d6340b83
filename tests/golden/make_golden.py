#!/usr/bin/env python3
"""Makes the golden test vectors that hold hotswap's model_loader against implementations
nobody here wrote: Hugging Face `transformers` (logits, greedy continuations) and the
`safetensors` package (file bytes).

Run it from a virtual environment OUTSIDE the repository, never in CI:

    python3 -m venv /opt/hotswap-golden-venv
    /opt/hotswap-golden-venv/bin/pip install torch transformers safetensors numpy
    /opt/hotswap-golden-venv/bin/python tests/golden/make_golden.py

It rewrites tests/golden/model_loader/<fixture>/ (config.json, model.safetensors, golden.json)
and tests/golden/safetensors/; `make_golden.py qwen3_moe_f32 ...` rewrites only those fixtures. Versions used are recorded in each golden.json.
"""

import json
import math
import os
import shutil
import sys

import safetensors
import safetensors.torch
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [3, 17, 42, 5, 99, 64, 7, 120, 1, 33, 8, 77]
CONTINUATION = 8
# A mixture of experts must pick every token's experts by a clear margin in router logits, or
# rounding (bfloat16 above all) may legitimately pick another expert and another output.
MIN_ROUTER_MARGIN = 0.05

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
             rms_norm_eps=1e-5)

FIXTURES = {
    "llama_f32": ("LlamaConfig", "LlamaForCausalLM", torch.float32, {}),
    "llama_bf16": ("LlamaConfig", "LlamaForCausalLM", torch.bfloat16, {}),
    "llama3_rope_tied_f32": ("LlamaConfig", "LlamaForCausalLM", torch.float32, dict(
        tie_word_embeddings=True, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "mistral_window_f32": ("MistralConfig", "MistralForCausalLM", torch.float32,
                           dict(sliding_window=6)),
    "qwen2_f32": ("Qwen2Config", "Qwen2ForCausalLM", torch.float32, {}),
    "qwen2_bf16": ("Qwen2Config", "Qwen2ForCausalLM", torch.bfloat16, {}),
    "qwen3_f32": ("Qwen3Config", "Qwen3ForCausalLM", torch.float32, dict(head_dim=32)),
    "qwen3_bf16": ("Qwen3Config", "Qwen3ForCausalLM", torch.bfloat16, dict(head_dim=32)),
    # Mixture of experts: 8 experts, 2 per token. Qwen3-MoE's float32 fixture normalizes the
    # top-k weights and keeps layer 1 dense (mlp_only_layers); its bfloat16 one does neither.
    "qwen3_moe_f32": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", torch.float32, dict(
        head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
        norm_topk_prob=True, mlp_only_layers=[1])),
    "qwen3_moe_bf16": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", torch.bfloat16, dict(
        head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
        norm_topk_prob=False)),
    "mixtral_window_f32": ("MixtralConfig", "MixtralForCausalLM", torch.float32, dict(
        num_local_experts=8, num_experts_per_tok=2, sliding_window=6)),
    "mixtral_bf16": ("MixtralConfig", "MixtralForCausalLM", torch.bfloat16, dict(
        num_local_experts=8, num_experts_per_tok=2)),
}


def init_weights(model, seed):
    """Weights with real spread, so that logits are far from uniform and greedy choices are
    decided by clear margins rather than by rounding."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / math.sqrt(fan_in)))


def greedy_steps(model, ids):
    """The greedy continuation of `ids`: each step's token, its logprob and its margin over the
    runner-up (how far rounding is from picking another token)."""
    with torch.no_grad():
        generated = model.generate(input_ids=ids, max_new_tokens=CONTINUATION, do_sample=False,
                                   output_scores=True, return_dict_in_generate=True,
                                   pad_token_id=0, eos_token_id=None)
    tokens = generated.sequences[0, ids.shape[1]:].tolist()
    steps = []
    for token, scores in zip(tokens, generated.scores):
        row = scores[0].float()
        top2 = torch.topk(row, 2).values
        steps.append({"token": token,
                      "logprob": torch.log_softmax(row, -1)[token].item(),
                      "margin": (top2[0] - top2[1]).item()})
    return steps


def router_margin(logits, k):
    top = torch.topk(logits.float(), k + 1, -1).values
    return (top[:, k - 1] - top[:, k]).min().item()


def make_fixture(name, config_cls, model_cls, dtype, extra, seed):
    out = os.path.join(HERE, "model_loader", name)
    shutil.rmtree(out, ignore_errors=True)
    config = getattr(transformers, config_cls)(**SMALL, **extra)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    init_weights(model, seed)
    model = model.to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    for extra_file in ("generation_config.json",):
        path = os.path.join(out, extra_file)
        if os.path.exists(path):
            os.remove(path)

    ids = torch.tensor([PROMPT])
    router_margins = []
    for layer in getattr(model.model, "layers", []):
        router = getattr(layer.mlp, "gate", None)
        if isinstance(router, torch.nn.Module) and hasattr(router, "top_k"):
            router.register_forward_hook(lambda mod, inp, out: router_margins.append(
                router_margin(out[0], mod.top_k)))
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    steps = greedy_steps(model, ids)
    tokens = [step["token"] for step in steps]
    if router_margins and min(router_margins) < MIN_ROUTER_MARGIN:
        return None  # a near-tie in routing: the caller draws other weights
    golden = {
        "made_by": {"transformers": transformers.__version__, "torch": torch.__version__},
        "seed": seed,
        "architecture": model_cls,
        "dtype": str(dtype).split(".")[-1],
        "prompt": PROMPT,
        "logits": [[round(v, 6) for v in row] for row in logits.tolist()],
        "greedy": steps,
    }
    if router_margins:
        # The smallest gap, in router logits, between a token's last chosen expert and the first
        # one left out, over every layer and step: how far rounding is from a reroute.
        golden["router_margin"] = min(router_margins)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(f"{name}: greedy {tokens}")
    return golden


def make_safetensors_vectors():
    out = os.path.join(HERE, "safetensors")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    base = torch.arange(-6, 6, dtype=torch.float64).reshape(3, 4) / 4
    tensors = {
        "f64": base.clone(),
        "f32": base.to(torch.float32),
        "f16": base.to(torch.float16),
        "bf16": base.to(torch.bfloat16),
        "i64": torch.arange(-3, 3, dtype=torch.int64),
        "i32": torch.arange(-3, 3, dtype=torch.int32).reshape(2, 3),
        "i16": torch.arange(-2, 2, dtype=torch.int16),
        "i8": torch.arange(-4, 4, dtype=torch.int8),
        "u8": torch.arange(0, 250, 50, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }
    metadata = {"format": "pt"}
    safetensors.torch.save_file(tensors, os.path.join(out, "common_dtypes.safetensors"),
                                metadata=metadata)
    with_fp8 = dict(tensors)
    with_fp8["f8_e4m3"] = base.to(torch.float8_e4m3fn)
    with_fp8["f8_e5m2"] = base.to(torch.float8_e5m2)
    safetensors.torch.save_file(with_fp8, os.path.join(out, "with_float8.safetensors"))
    described = {name: {"dtype": str(t.dtype).split(".")[-1], "shape": list(t.shape),
                        "values": t.to(torch.float64).reshape(-1).tolist(),
                        "bytes_hex": t.reshape(-1).view(torch.uint8).numpy().tobytes().hex()
                        if t.numel() else ""}
                 for name, t in with_fp8.items()}
    with open(os.path.join(out, "tensors.json"), "w") as f:
        json.dump({"made_by": {"safetensors": safetensors.__version__,
                               "torch": torch.__version__},
                   "metadata": metadata, "tensors": described}, f, indent=1)
    print("safetensors vectors written")


if __name__ == "__main__":
    # With fixture names as arguments, only those are rewritten (each keeps its seed).
    only = set(sys.argv[1:])
    for i, (name, (config_cls, model_cls, dtype, extra)) in enumerate(FIXTURES.items()):
        if not only or name in only:
            # Seeds step by 1000 until the routing is clear (dense models take the first).
            seed = 1234 + i
            while make_fixture(name, config_cls, model_cls, dtype, extra, seed) is None:
                seed += 1000
    if not only:
        make_safetensors_vectors()
