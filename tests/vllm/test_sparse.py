#!/usr/bin/env python3
"""vllm-0.34.md §1 (sparse refuses use_load_plan) and §4 against a hotswap-worker on the
sparse_gloo plane, driven by vLLM's own SparseNCCLTrainerWeightTransferEngine (trainer_init,
send_weights: the update payload and two broadcasts per patch, int32 indices then values) and
HTTPVLLMWeightSyncClient; what the worker serves is judged with vLLM's compute_tensor_digests.

    test_sparse.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL
"""

import sys
import time

import requests
import torch

from common import (
    HAS_LOAD_PLAN,
    ONLY_034,
    RecordingClient,
    SkipCheck,
    assert_serves,
    error_message,
    expect_refused,
    run_on_gloo_plane,
    run_suite,
    wire_sparse_trainer,
)
from vllm.distributed.weight_transfer.nccl_common import build_worker_init_payload
from vllm.distributed.weight_transfer.sparse_nccl_engine import (
    SparseNCCLTrainerInitInfo,
    SparseNCCLTrainerWeightTransferEngine,
    SparseWeightPatch,
)


def patch_of(tensors, name, indices, values):
    t = tensors[name]
    return SparseWeightPatch(name=name, indices=torch.tensor(indices, dtype=torch.int32),
                             values=torch.tensor(values, dtype=t.dtype),
                             full_shape=tuple(t.shape))


def apply(tensors, patches):
    out = dict(tensors)
    for p in patches:
        flat = out[p.name].clone().view(-1)
        flat[p.indices.long()] = p.values.to(flat.dtype)
        out[p.name] = flat.view(out[p.name].shape)
    return out


class Suite:
    def __init__(self, checks, worker, peer, tensors):
        self.c, self.w, self.peer = checks, worker, peer
        self.served = tensors  # what the worker serves now
        self.engine = None
        self.client = None
        self.restore = None

    def trainer(self):
        if self.restore:
            self.restore()
        session, port = self.peer.host(world_size=2, ranks=1)
        self.restore = wire_sparse_trainer(self.peer, session)
        init = SparseNCCLTrainerInitInfo(master_address="127.0.0.1", master_port=port,
                                         world_size=2, rank=0)
        self.client = RecordingClient(self.w.base)
        self.engine = SparseNCCLTrainerWeightTransferEngine.trainer_init(init, client=self.client)
        return self.engine

    def refused_round(self, patches, text):
        """vLLM's send_weights with patches the worker must refuse after receiving them; the
        worker keeps serving what it served."""
        if self.engine is None:
            raise SkipCheck("needs the sparse trainer_init above")
        try:
            self.engine.send_weights(patches)
        except requests.HTTPError as e:
            resp = e.response
        else:
            raise AssertionError("the worker accepted the patches")
        expect_refused(resp, text)
        # The session ended with the error (vLLM); close it if the worker kept it open.
        self.w.post("/finish_weight_update", timeout=60)
        assert_serves(self.w, self.served, "after the refused patches (nothing may change)")


def run(checks, worker_bin, make_tool):
    run_on_gloo_plane(checks, worker_bin, make_tool, "sparse_gloo", 3, Suite, body)


def body(c, s):
    w, t = s.w, s.served

    def stock_init():
        s.trainer()
        payload = s.client.calls[0][1]
        if HAS_LOAD_PLAN:
            assert payload.get("use_load_plan") is False, payload
        assert payload.get("packed") is False and payload["rank_offset"] == 1, payload
        c.info(f"stock sparse init payload: {payload}")
    c.run("§1 stock vLLM sparse trainer init (use_load_plan: false) accepted", stock_init)

    def patches_land():
        if s.engine is None:
            raise SkipCheck("needs the sparse trainer_init above")
        patches = [
            # q_proj and gate_proj live inside fused runtime parameters (qkv, gate_up):
            # indices address the full checkpoint tensor, whatever the runtime layout.
            patch_of(t, "model.layers.0.self_attn.q_proj.weight", [0, 7, 4095], [1.5, -2.0, 3.25]),
            patch_of(t, "model.layers.1.mlp.gate_proj.weight", [100, 3, 6143], [0.5, 0.25, -1.0]),
            patch_of(t, "model.embed_tokens.weight", [64 * 5 + 1], [9.0]),
        ]
        s.engine.send_weights(patches)
        kinds = [k for k, _ in s.client.calls[1:]]
        assert kinds == ["start", "update", "finish"], kinds
        info = s.client.calls[2][1]
        assert set(info) == {"names", "dtype_names", "shapes", "num_updates_list"}, info
        assert info["shapes"][0] == list(t["model.layers.0.self_attn.q_proj.weight"].shape), info
        assert info["num_updates_list"] == [3, 3, 1], info
        s.served = apply(s.served, patches)
        assert_serves(w, s.served, "after the sparse round")
    c.run("§4 patches in full-checkpoint coordinates (fused q/gate included) land; payload "
          "{names, dtype_names, shapes, num_updates_list}", patches_land)

    def empty_patch_rides_along():
        if s.engine is None:
            raise SkipCheck("needs the sparse trainer_init above")
        patches = [patch_of(t, "model.norm.weight", [], []),
                   patch_of(t, "model.layers.0.input_layernorm.weight", [2], [7.0])]
        s.engine.send_weights(patches)
        s.served = apply(s.served, patches)
        assert_serves(w, s.served, "after a round with an empty patch")
    c.run("§4 a patch with 0 entries rides along (its count-0 broadcasts are no-ops, as in NCCL)",
          empty_patch_rides_along)

    name = "model.layers.1.self_attn.o_proj.weight"
    c.run("§4 a NaN value refused after the transfer; weights unchanged", s.refused_round,
          [patch_of(t, name, [1, 2], [float("nan"), 1.0])], "NaN")
    c.run("§4 an out-of-range index (== numel) refused; weights unchanged", s.refused_round,
          [patch_of(t, name, [0, t[name].numel()], [1.0, 2.0])], "out-of-range")
    c.run("§4 a duplicate index refused; weights unchanged", s.refused_round,
          [patch_of(t, name, [5, 5], [1.0, 2.0])], "duplicate")

    def refuses_load_plan():
        if not HAS_LOAD_PLAN:
            raise SkipCheck(ONLY_034)
        session, port = s.peer.host(world_size=2, ranks=1, timeout=15)
        init = SparseNCCLTrainerInitInfo(master_address="127.0.0.1", master_port=port,
                                         world_size=2, rank=0)
        payload = build_worker_init_payload(
            init, use_load_plan=True,
            metadata=[[n, str(x.dtype).split(".")[-1], list(x.shape)] for n, x in t.items()])
        resp = w.post("/init_weight_transfer_engine", {"init_info": payload}, timeout=90)
        expect_refused(resp, "use_load_plan is supported by the dense NCCL backend")
    c.run("§1/§4 sparse_gloo refuses use_load_plan: true", refuses_load_plan)

    def works_after_refusal():
        s.trainer()
        patches = [patch_of(t, "model.norm.weight", [3], [4.0])]
        s.engine.send_weights(patches)
        s.served = apply(s.served, patches)
        assert_serves(w, s.served, "after re-init and a round")
    c.run("§4 after the refused init a stock init and round work", works_after_refusal)

    def wrong_full_shape():
        # Same element count, other shape: only the shape says it is not the checkpoint tensor.
        name = "model.layers.0.mlp.gate_proj.weight"
        rows, cols = t[name].shape
        w.client.start_weight_update()
        info = {"names": [name], "dtype_names": ["float32"], "shapes": [[cols, rows]],
                "num_updates_list": [1]}
        started = time.monotonic()
        resp = w.post("/update_weights", {"update_info": info}, timeout=90)
        took = time.monotonic() - started
        w.post("/finish_weight_update", timeout=60)
        expect_refused(resp)
        msg = error_message(resp).lower()
        assert "timed out" not in msg and "timeout" not in msg, (
            f"refused only after waiting for data ({took:.1f} s): {msg}")
        c.info(f"shape refusal after {took:.1f} s: {error_message(resp)}")
        assert_serves(w, s.served, "after the refused shape")
    c.run("§4 shapes must be the full checkpoint shape: a transposed shape refused (no data "
          "sent)", wrong_full_shape)


def main():
    run_suite(sys.argv, "vLLM sparse trainer engine -> hotswap-worker, sparse_gloo (§1, §4)", run)


if __name__ == "__main__":
    main()
