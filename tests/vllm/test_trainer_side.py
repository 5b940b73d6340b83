#!/usr/bin/env python3
"""vllm-0.34.md §2-§3 on vLLM's trainer side alone: the facts a hotswap worker (and hotswap's
trainer SDK, which mirrors them) rely on, read from the installed vLLM's own code, so that a vLLM
that drifts from them is noticed. No worker is involved except as an address nobody may call:
ownership errors must be raised before any call leaves the trainer.

    test_trainer_side.py [HOTSWAP_WORKER HOTSWAP_MAKE_MODEL]   (both ignored)
"""

import functools
import sys

import torch

from common import (
    HAS_SRC,
    ONLY_034,
    Checks,
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    RecordingClient,
    SkipCheck,
    TensorSource,
    pack_tensors,
)
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    Replicate,
    Shard,
    WeightSource,
    layerwise_groups,
)

NOBODY = "http://127.0.0.1:9"  # discard port: a call that leaves the trainer fails loudly


def raises(exc_type, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        assert text in str(e), f"{type(e).__name__}: {e!s} lacks {text!r}"
        return
    raise AssertionError(f"no {exc_type.__name__} ({text!r})")


def source_with(owners):
    tensors = {n: torch.zeros(4) for n in owners}
    return TensorSource(tensors, {n: o for n, o in owners.items() if o is not None})


def body(c):
    f32 = torch.float32

    # ---- ParamMeta ---------------------------------------------------------------------------
    c.run("§2 ParamMeta: mesh/placements without owners refused",
          raises, ValueError, "declares a mesh or placements without owners",
          ParamMeta, "w", f32, (4,), mesh_shape=(1,))
    c.run("§2 ParamMeta: owners must be distinct non-negative ranks",
          raises, ValueError, "owners must be distinct non-negative ranks",
          ParamMeta, "w", f32, (4,), owners=(1, 1))
    c.run("§2 ParamMeta: mesh_shape must cover the owners",
          raises, ValueError, "does not cover its 2 owners",
          ParamMeta, "w", f32, (4,), owners=(0, 1), mesh_shape=(3,))
    c.run("§2 ParamMeta: Shard(dim) within the tensor's dims",
          raises, ValueError, "shards dim 1 of a 1-D tensor",
          ParamMeta, "w", f32, (4,), owners=(0, 1), placements=(Shard(1),))

    def defaults():
        m = ParamMeta("w", f32, [4, 2], owners=[2, 3], placements=(Replicate(),))
        assert m.shape == (4, 2) and m.owners == (2, 3) and m.mesh_shape == (2,), m
        assert m.placements is None, "all-Replicate placements normalize to None"
    c.run("§2 ParamMeta: mesh_shape defaults to (len(owners),), all-Replicate -> None", defaults)

    # ---- WeightSource ------------------------------------------------------------------------
    def metadata_must_be_cached():
        try:
            class Bad(WeightSource):  # noqa: F841
                @property
                def metadata(self):
                    return []
        except TypeError as e:
            assert "functools.cached_property" in str(e), e
            return
        raise AssertionError("a property `metadata` was accepted")
    c.run("§3 WeightSource.metadata must be a functools.cached_property (TypeError otherwise)",
          metadata_must_be_cached)

    def owned_and_iter():
        s = source_with({"a": (0,), "b": (1,), "c": None})
        assert s.owned_names(1) == ["b", "c"], s.owned_names(1)
        assert s.implements_iter_full() and not s.implements_iter_local()
        assert type(s).__dict__["metadata"].__class__ is functools.cached_property
    c.run("§3 owned_names(rank), iter_full/iter_local detection", owned_and_iter)

    def groups():
        names = ["model.embed_tokens.weight", "model.layers.1.mlp.experts.7.w1",
                 "model.layers.0.a", "model.norm.weight", "model.layers.1.b", "lm_head.weight"]
        got = layerwise_groups(names)
        want = [["model.embed_tokens.weight"], ["model.layers.0.a"],
                ["model.layers.1.mlp.experts.7.w1", "model.layers.1.b"],
                ["model.norm.weight", "lm_head.weight"]]
        assert got == want, got
    c.run("§3 layerwise_groups keys on the outermost integer segment", groups)

    # ---- pack_tensors ------------------------------------------------------------------------
    def chunk_rule():
        sizes = [400, 300, 400, 2000, 100, 100]  # bytes (uint8 tensors)
        pairs = iter([(f"t{i}", torch.zeros(n, dtype=torch.uint8)) for i, n in enumerate(sizes)])
        chunks = []
        while (ch := pack_tensors(pairs, lambda item: item[1], 1000)) is not None:
            chunks.append(ch.tensor_sizes)
        # close a chunk once its total is strictly over the buffer, with the tensor that did it
        assert chunks == [[400, 300, 400], [2000], [100, 100]], chunks
    c.run("§3 pack_tensors cuts a chunk once its total exceeds the buffer (strictly)", chunk_rule)

    # ---- the broadcaster plan and its errors -------------------------------------------------
    def plan():
        if not HAS_SRC:
            raise SkipCheck(ONLY_034)
        meta = source_with({"a": (2,), "b": None, "c": (2, 3), "d": (5,)}).metadata
        ranks, slices = NCCLTrainerWeightTransferEngine._broadcast_plan(meta)
        assert ranks == [0, 2, 5], ranks
        assert [(r, [m.name for m in ms]) for r, ms in slices] == [
            (0, ["b"]), (2, ["a", "c"]), (5, ["d"])], slices
    c.run("§2 broadcasters = sorted({0} ∪ owners[0]); src = index in that list", plan)

    def ownership_error(owners, text, world_size=4):
        if not HAS_SRC:
            raise SkipCheck(ONLY_034 + "; 0.33 refuses any first owner other than 0")
        client = RecordingClient(NOBODY)
        init = NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=9,
                                   world_size=world_size, rank=0)
        raises(ValueError, text, NCCLTrainerWeightTransferEngine.trainer_init, init,
               client=client, source=source_with(owners))
        assert client.calls == [], client.calls
    c.run("§2 ownership error: rank 0 among a parameter's later owners",
          ownership_error, {"a": (1, 0)}, "rank 0 only gathers in its own turn")
    c.run("§2 ownership error: a parameter without owners beside several broadcasters",
          ownership_error, {"a": (0,), "b": (1,), "c": None}, "has no owners, so every rank")
    c.run("§2 ownership error: a rank owning parameters of two broadcasters",
          ownership_error, {"a": (0, 2), "b": (1, 2)}, "rank 2 owns parameters broadcast by ranks")
    c.run("§2 (not in the doc) world_size must leave room for workers after the broadcasters",
          ownership_error, {"a": (0,), "b": (1,)}, "leaves no inference workers", 2)


def main():
    checks = Checks("vLLM trainer side (§2, §3), no worker")
    checks.guard(body, checks)
    sys.exit(checks.finish())


if __name__ == "__main__":
    main()
