#!/usr/bin/env python3
"""vllm-0.34.md §1-§3 against a hotswap-worker on the gloo plane, driven by vLLM's own
NCCLTrainerWeightTransferEngine (trainer_init, send_weights: payloads, rank_offset, src, metadata
reuse), HTTPVLLMWeightSyncClient, pack_tensors (chunk boundaries) and compute_tensor_digests (what
the worker must serve afterwards). Only the bytes go through gloo_peer.py (see there why).

    test_gloo_dense.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL
"""

import sys

import requests

from common import (
    HAS_LOAD_PLAN,
    HAS_SRC,
    ONLY_034,
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    RecordingClient,
    SkipCheck,
    TensorSource,
    assert_serves,
    concurrently,
    expect_ok,
    expect_refused,
    pack_tensors,
    run_on_gloo_plane,
    run_suite,
    stepped,
    wire_dense_trainer,
)
from vllm.distributed.weight_transfer.nccl_common import build_worker_init_payload


def dtype_name(t):
    return str(t.dtype).split(".")[-1]


class Suite:
    def __init__(self, checks, worker, peer, base_tensors):
        self.c = checks
        self.w = worker
        self.peer = peer
        self.base = base_tensors
        self.step = 0
        self.session = None
        self.engine = None
        self.restore = None
        self.refused = False  # a refused update was just sent

    def next_tensors(self):
        self.step += 1
        return stepped(self.base, 0.01 * self.step)

    def trainer(self, source, ranks=1, **init_kwargs):
        """vLLM's trainer_init against the worker, its group on a fresh peer session."""
        if self.restore:
            self.restore()
        workers = 1
        self.session, port = self.peer.host(world_size=ranks + workers, ranks=ranks)
        self.restore = wire_dense_trainer(self.peer, self.session)
        init = NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=port,
                                   world_size=ranks + workers, rank=0, **init_kwargs)
        client = RecordingClient(self.w.base)
        engine = NCCLTrainerWeightTransferEngine.trainer_init(init, client=client, source=source)
        self.engine = engine
        return engine, client

    def raw_init(self, payload_of_port, ranks=1):
        """POSTs an init payload while the peer stands at the rendezvous (a worker may refuse
        before or after joining: vLLM refuses after); returns the HTTP response."""
        session, port = self.peer.host(world_size=ranks + 1, ranks=ranks, timeout=15)
        resp = self.w.post("/init_weight_transfer_engine", {"init_info": payload_of_port(port)},
                           timeout=90)
        return session, resp

    def round_after_refusal(self):
        """vLLM's next send_weights after a refused update (whose session vLLM ended)."""
        if self.engine is None:
            raise SkipCheck("needs a trainer_init above")
        if not self.refused:
            raise SkipCheck("the refusal above did not run")
        self.refused = False
        self.engine.source.tensors.update(self.next_tensors())
        # The out-of-band update before this one was not the trainer's: make it send full
        # metadata, not empty lists (which would reuse whatever the worker saw last).
        self.engine._sent_meta = None
        try:
            self.engine.send_weights()
        except requests.HTTPError as e:
            if e.request is not None and e.request.url.endswith("/start_weight_update"):
                self.w.post("/finish_weight_update", timeout=60)  # clean up for what follows
                raise AssertionError("start_weight_update after the refused update: HTTP "
                                     f"{e.response.status_code} {e.response.text[:300]} "
                                     "(the refusal left the session open)") from e
            raise
        assert_serves(self.w, self.engine.source.tensors, "in the round after the refusal")

    def round_by_hand(self, names, tensors, packed, buffer_size, src=0, extra=None):
        """start / update (raw payload, concurrent with the peer's broadcast) / finish."""
        info = {"names": names, "dtype_names": [dtype_name(tensors[n]) for n in names],
                "shapes": [list(tensors[n].shape) for n in names]}
        if src:
            info["src"] = src
        info.update(extra or {})
        self.w.client.start_weight_update()
        join = concurrently(self.w.client.update_weights, info)
        if packed:
            it = ((n, tensors[n]) for n in names)
            chunks = []
            while (chunk := pack_tensors(it, lambda item: item[1], buffer_size)) is not None:
                chunks.append(chunk.packed_tensor)
            self.peer.broadcast(self.session, src, chunks)
        else:
            self.peer.broadcast(self.session, src, [tensors[n] for n in names])
        _, err = join(120)
        if err:
            raise err
        self.w.client.finish_weight_update()


def run(checks, worker_bin, make_tool):
    run_on_gloo_plane(checks, worker_bin, make_tool, "gloo", 1, Suite, body)


def body(c, s):
    w = s.w

    # ---- §1: the stock trainer's init payload, use_load_plan false -------------------------
    def stock_unpacked():
        source = TensorSource(s.next_tensors())
        engine, client = s.trainer(source, packed=False)
        payload = client.calls[0][1]
        if HAS_LOAD_PLAN:
            assert payload.get("use_load_plan") is False and "metadata" not in payload, payload
        assert payload["rank_offset"] == 1, payload
        engine.send_weights()
        kinds = [k for k, _ in client.calls]
        assert kinds == ["init", "start", "update", "finish"], kinds
        assert_serves(w, source.tensors)
        c.info(f"stock init payload: {payload}")
    c.run("§1 stock vLLM trainer init (use_load_plan: false) accepted; unpacked round lands",
          stock_unpacked)

    def empty_uid_is_absent():
        def payload(port):
            p = build_worker_init_payload(NCCLTrainerInitInfo(
                master_address="127.0.0.1", master_port=port, world_size=2, rank=0))
            p["nccl_unique_id_b64"] = ""
            return p
        session, resp = s.raw_init(payload)
        expect_ok(resp, "init with nccl_unique_id_b64 \"\"")
        s.peer.wait_group(session, 30)
    c.run("§1 nccl_unique_id_b64 \"\" counts as absent (TCP rendezvous used)", empty_uid_is_absent)

    c.run("§5 start_draft_weight_update without a draft model -> 500 \"Draft model weight "
          "update requested, but no draft model is configured.\" (gloo, which supports drafts)",
          lambda: expect_refused(w.post("/start_draft_weight_update", timeout=60),
                                 "Draft model weight update requested, but no draft model is "
                                 "configured.", status=500))

    # ---- packed: chunk boundaries by vLLM's pack_tensors, metadata reuse -------------------
    def packed_rounds():
        source = TensorSource(s.next_tensors())
        # 1000 B: most tensors share chunks cut mid-layer; the embedding (32 KiB) is oversize.
        engine, client = s.trainer(source, packed=True, packed_buffer_size_bytes=1000,
                                   packed_num_buffers=3)
        engine.send_weights()
        assert_serves(w, source.tensors, "after the first packed round")
        # Same metadata: vLLM's trainer sends empty lists, to reuse the worker's copy.
        source.tensors.update(s.next_tensors())
        engine.send_weights()
        updates = [info for k, info in client.calls if k == "update"]
        assert updates[-1]["names"] == [], updates[-1]
        assert_serves(w, source.tensors, "after the reuse round (empty names)")
    c.run("§1 packed rounds cut by vLLM's pack_tensors (1000 B buffer, oversize tensor), "
          "then an empty-names round reusing the metadata", packed_rounds)

    # ---- §2: src validated against rank_offset ----------------------------------------------
    def src_refused(src):
        if not HAS_SRC:
            raise SkipCheck(ONLY_034)
        if s.engine is None:
            raise SkipCheck("needs a trainer_init above")
        t = s.base
        name = "model.norm.weight"
        s.w.client.start_weight_update()
        info = {"names": [name], "dtype_names": [dtype_name(t[name])],
                "shapes": [list(t[name].shape)], "src": src}
        resp = w.post("/update_weights", {"update_info": info}, timeout=60)
        s.refused = True
        expect_refused(resp, f"NCCL update src must be a sender rank in [0, 1), got {src}")
    c.run("§2 update src=1 with rank_offset 1 refused, before any broadcast", src_refused, 1)
    c.run("§2 a refused update ends the session (vLLM): the next vLLM round works",
          s.round_after_refusal)
    c.run("§2 update src=-1 refused", src_refused, -1)
    c.run("§2 a refused update ends the session (vLLM): the next vLLM round works",
          s.round_after_refusal)

    # ---- §1: use_load_plan ------------------------------------------------------------------
    def load_plan_without_metadata(metadata):
        if not HAS_LOAD_PLAN:
            raise SkipCheck(ONLY_034)

        def payload(port):
            p = build_worker_init_payload(NCCLTrainerInitInfo(
                master_address="127.0.0.1", master_port=port, world_size=2, rank=0),
                use_load_plan=True)
            if metadata is not None:
                p["metadata"] = metadata
            return p
        _, resp = s.raw_init(payload)
        expect_refused(resp, "use_load_plan needs the trainer's metadata in the init info")
    c.run("§1 use_load_plan without metadata refused", load_plan_without_metadata, None)
    c.run("§1 use_load_plan with metadata [] refused (vLLM: empty counts as missing)",
          load_plan_without_metadata, [])

    plan_ok = {}

    def load_plan_accepted():
        if not HAS_LOAD_PLAN:
            raise SkipCheck(ONLY_034)
        source = TensorSource(s.next_tensors())
        engine, client = s.trainer(source, packed=True, packed_buffer_size_bytes=4096,
                                   use_load_plan=True)
        payload = client.calls[0][1]
        meta = payload.get("metadata")
        assert payload.get("use_load_plan") is True and isinstance(meta, list), payload
        assert len(meta) == len(source.tensors), (len(meta), len(source.tensors))
        name, dtype, shape = meta[0]
        assert isinstance(name, str) and isinstance(dtype, str) and isinstance(shape, list), meta[0]
        engine.send_weights()
        assert_serves(w, source.tensors)
        plan_ok["yes"] = True
        c.info(f"metadata entry format: {meta[0]}")
    c.run("§1 use_load_plan: true + metadata (vLLM's trainer_init) accepted; round lands",
          load_plan_accepted)

    def subset_accepted():
        if not HAS_LOAD_PLAN:
            raise SkipCheck(ONLY_034)
        if not plan_ok:
            raise SkipCheck("needs the use_load_plan init above")
        t = s.engine.source.tensors
        new = s.next_tensors()
        t["model.norm.weight"] = new["model.norm.weight"]
        s.round_by_hand(["model.norm.weight"], t, packed=True, buffer_size=4096)
        s.engine._sent_meta = None  # the worker's cached metadata is now this one-tensor update
        assert_serves(w, t, "after a one-tensor update")
    c.run("§1 an update carrying a subset of the init metadata accepted", subset_accepted)

    def subset_violation(kind):
        if not HAS_LOAD_PLAN:
            raise SkipCheck(ONLY_034)
        if not plan_ok:
            raise SkipCheck("needs the use_load_plan init above")
        t = s.engine.source.tensors
        if kind == "undeclared":
            info = {"names": ["model.layers.0.mlp.not_declared.weight"],
                    "dtype_names": ["float32"], "shapes": [[4]]}
            text = "was not declared in the metadata sent at init"
        else:
            name = "model.norm.weight"
            shape = list(t[name].shape)
            info = {"names": [name], "dtype_names": [dtype_name(t[name])],
                    "shapes": [[shape[0] * 2]]}
            text = "was declared at init as"
        s.w.client.start_weight_update()
        resp = w.post("/update_weights", {"update_info": info}, timeout=60)
        s.refused = True
        expect_refused(resp, text)
        expect_refused(resp, "re-init the engine to re-plan")
    c.run("§1 each update must be a subset: an undeclared name refused", subset_violation,
          "undeclared")
    c.run("§1 a refused update ends the session: the next vLLM round works",
          s.round_after_refusal)
    c.run("§1 each update must be a subset: a declared name with another shape refused",
          subset_violation, "reshaped")
    c.run("§1 a refused update ends the session: the next vLLM round works",
          s.round_after_refusal)

    # ---- §2: two broadcasting trainer ranks -------------------------------------------------
    def two_broadcasters():
        if not HAS_SRC:
            raise SkipCheck(ONLY_034 + "; 0.33's trainer refuses a first owner other than 0")
        tensors = s.next_tensors()
        owners = {n: ((1,) if n.startswith("model.layers.1.") else (0,)) for n in tensors}
        source = TensorSource(tensors, owners)
        engine, client = s.trainer(source, ranks=2, packed=True, packed_buffer_size_bytes=2048)
        payload = client.calls[0][1]
        assert payload["rank_offset"] == 2 and payload["world_size"] == 3, payload
        engine.send_weights()
        calls = client.calls[1:]
        kinds = [k for k, _ in calls]
        assert kinds == ["start", "update", "update", "finish"], kinds
        first, second = calls[1][1], calls[2][1]
        assert "src" not in first and second.get("src") == 1, (first.keys(), second.get("src"))
        assert all(n.startswith("model.layers.1.") for n in second["names"]), second["names"]
        assert_serves(w, tensors, "after a two-broadcaster round")
        # Unchanged metadata: empty names per broadcaster; the worker reuses each src's own.
        tensors.update(s.next_tensors())
        engine.send_weights()
        calls = client.calls[5:]
        updates = [info for k, info in calls if k == "update"]
        assert [u["names"] for u in updates] == [[], []], updates
        assert updates[1].get("src") == 1, updates
        assert_serves(w, tensors, "after the reuse round of two broadcasters")
    c.run("§2 two broadcasters (ParamMeta.owners): rank_offset 2, one update per broadcaster "
          "(src 1 carried, src 0 dropped), empty-names reuse keyed by src", two_broadcasters)


def main():
    run_suite(sys.argv, "vLLM trainer engine -> hotswap-worker, gloo (§1, §2)", run)


if __name__ == "__main__":
    main()
