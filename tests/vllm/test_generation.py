#!/usr/bin/env python3
"""vllm-0.34.md §5 (pause modes and the 503 while paused in abort/wait, keep queueing;
/abort_requests on in-flight completions) and §7 (return_weight_versions on /v1/completions,
whole and streamed) against a hotswap-worker, updated through vLLM's HTTPVLLMWeightSyncClient
on the disk plane.

    test_generation.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL
"""

import json
import sys
import threading
import time

import requests

from common import (
    Worker,
    expect_ok,
    expect_refused,
    make_model,
    run_guarded,
    run_suite,
    scratch,
)

PAUSED = "Generation is paused. Please retry after it resumes."
# Tokens for a request that must still be running when the test acts on it (a few HTTP calls):
# about LONG_SECONDS of this worker's decoding, measured at the start (see measure_long).
LONG = 400
LONG_SECONDS = 5.0


def completion(w, max_tokens=8, **extra):
    body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **extra}
    return w.post("/v1/completions", body, timeout=120)


class Stream:
    """A streamed /v1/completions read on its own thread."""

    def __init__(self, w, max_tokens=None, headers=None, **extra):
        max_tokens = LONG if max_tokens is None else max_tokens
        self.w = w
        body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True, **extra}
        self.chunks = []
        self.status = None
        self.error = None
        self.first = threading.Event()
        self.done = threading.Event()

        def read():
            try:
                with requests.post(w.base + "/v1/completions", json=body, stream=True,
                                   timeout=120, headers=headers or {}) as r:
                    self.status = r.status_code
                    if r.status_code != 200:
                        self.error = r.text
                        return
                    for line in r.iter_lines(decode_unicode=True):
                        if not line or not line.startswith("data: "):
                            continue
                        data = line[len("data: "):]
                        if data == "[DONE]":
                            break
                        self.chunks.append(json.loads(data))
                        self.first.set()
            except Exception as e:  # noqa: BLE001
                self.error = f"{type(e).__name__}: {e}"
            finally:
                self.first.set()
                self.done.set()

        threading.Thread(target=read, daemon=True).start()

    def wait_first(self, timeout=60):
        assert self.first.wait(timeout), "no first chunk"
        assert self.chunks, f"stream ended without a chunk: HTTP {self.status} {self.error}"
        return self.chunks[0]

    def stop(self):
        """Aborts this stream if a failed check left it running (so it skews nothing after)."""
        if self.done.is_set() or not self.chunks:
            return
        rid = self.chunks[0].get("id")
        self.w.post("/abort_requests", {"request_ids": [f"{rid}-0"]} if rid else {})
        self.done.wait(60)

    def wait(self, timeout=300):
        assert self.done.wait(timeout), "the stream did not end"
        assert self.error is None, f"stream failed: HTTP {self.status} {self.error}"
        return self

    def choice_chunks(self, index=0):
        return [ch for chunk in self.chunks for ch in chunk.get("choices", [])
                if ch.get("index") == index]

    def finish_reason(self):
        reasons = [ch["finish_reason"] for ch in self.choice_chunks() if ch.get("finish_reason")]
        return reasons[-1] if reasons else None

    def tokens(self):
        ids = [t for ch in self.choice_chunks() for t in (ch.get("token_ids") or [])]
        return len(ids)


def spans_ok(spans, total, versions=None):
    assert isinstance(spans, list) and spans, f"weight_versions {spans!r}"
    for s in spans:
        assert set(s) == {"version", "start", "end"}, f"span {s!r}: want {{version, start, end}}"
    assert spans[0]["start"] == 0 and spans[-1]["end"] == total, (spans, total)
    for a, b in zip(spans, spans[1:]):
        assert a["end"] == b["start"] and a["start"] < a["end"], spans
    if versions is not None:
        assert [s["version"] for s in spans] == versions, (spans, versions)


def update(w, ckpt, version):
    w.client.start_weight_update()
    w.client.update_weights({"path": ckpt})
    w.client.finish_weight_update(weight_version=version)


def measure_long(c, w):
    """Sets LONG to about LONG_SECONDS of this worker's decoding (within [64, 4000])."""
    global LONG
    started = time.monotonic()
    expect_ok(completion(w, 64), "a 64-token completion")
    rate = 64 / max(time.monotonic() - started, 1e-3)
    LONG = int(min(4000, max(64, rate * LONG_SECONDS)))
    c.info(f"decoding at about {rate:.0f} tokens/s: long requests get {LONG} tokens")


def body(c, w, ckpts):
    measure_long(c, w)
    # ---- §7 before any update: version "default" ---------------------------------------------
    def whole_with_versions():
        r = expect_ok(completion(w, 8, return_weight_versions=True), "completion")
        choice = r.json()["choices"][0]
        spans_ok(choice.get("weight_versions"), 8, ["default"])
        assert choice["weight_versions"] == [{"version": "default", "start": 0, "end": 8}], choice
    c.run("§7 return_weight_versions: true -> [{\"version\": \"default\", \"start\": 0, "
          "\"end\": 8}] (fresh worker)", whole_with_versions)

    def whole_without():
        choice = expect_ok(completion(w, 8), "completion").json()["choices"][0]
        assert "weight_versions" in choice and choice["weight_versions"] is None, (
            f"weight_versions {choice.get('weight_versions', '<absent>')!r}; want null")
    c.run("§7 without return_weight_versions the field is null", whole_without)

    def streamed_with_versions():
        s = Stream(w, 16, return_weight_versions=True, return_token_ids=True).wait()
        chunks = s.choice_chunks()
        assert chunks and s.finish_reason() == "length", s.chunks[-2:]
        last = [ch for ch in chunks if ch.get("finish_reason")][-1]
        others = [ch for ch in chunks if ch is not last]
        assert all(ch.get("weight_versions") is None for ch in others), (
            "a chunk before the last carries weight_versions")
        spans_ok(last.get("weight_versions"), 16, ["default"])
    c.run("§7 streamed: only the last chunk of the choice carries weight_versions, covering the "
          "whole output", streamed_with_versions)

    def streamed_without():
        s = Stream(w, 16).wait()
        assert all(ch.get("weight_versions") is None for ch in s.choice_chunks()), s.chunks[-1]
    c.run("§7 streamed without the flag: no chunk carries weight_versions", streamed_without)

    def after_update():
        w.client.init_weight_transfer_engine({})
        update(w, ckpts[0], "step-1")
        choice = expect_ok(completion(w, 8, return_weight_versions=True)).json()["choices"][0]
        assert choice["weight_versions"] == [{"version": "step-1", "start": 0, "end": 8}], choice
    c.run("§7 after an update with weight_version step-1 the span says step-1", after_update)

    def two_spans():
        s = Stream(w, None, return_weight_versions=True, return_token_ids=True)
        try:
            s.wait_first()
            expect_ok(w.post("/pause", params={"mode": "keep"}), "pause keep")
            try:
                update(w, ckpts[1], "step-2")
            finally:
                expect_ok(w.post("/resume"), "resume")
            s.wait()
        finally:
            s.stop()
        finals = [ch for ch in s.choice_chunks() if ch.get("finish_reason")]
        assert finals, f"no chunk with a finish_reason; last: {s.chunks[-1:]}"
        assert finals[-1]["finish_reason"] == "length", finals[-1]
        spans = finals[-1].get("weight_versions")
        spans_ok(spans, LONG, ["step-1", "step-2"])
        c.info(f"spans across the kept update: {spans}")
    c.run("§7 a request kept paused across an update gets two spans [step-1, step-2)", two_spans)

    # ---- §5 pause modes -----------------------------------------------------------------------
    def paused_503(mode):
        inflight = Stream(w)
        try:
            inflight.wait_first()
            started = time.monotonic()
            r = expect_ok(w.post("/pause", params={"mode": mode}, timeout=300), f"pause {mode}")
            took = time.monotonic() - started
            assert r.json() == {"status": "paused"}, r.text
            try:
                if mode == "wait":
                    # vLLM's wait mode returns once the in-flight requests have drained (their
                    # last chunks may still be on their way to this reader).
                    assert inflight.done.wait(10), (
                        f"/pause?mode=wait returned after {took:.1f} s with a request in flight")
                assert expect_ok(w.get("/is_paused")).json() == {"is_paused": True}
                refused = completion(w, 4)
                expect_refused(refused, PAUSED, status=503)
                c.info(f"503 body ({mode}): {refused.text[:300]}")
            finally:
                expect_ok(w.post("/resume"), "resume")
            inflight.wait()
        finally:
            inflight.stop()
        want = "abort" if mode == "abort" else "length"
        assert inflight.finish_reason() == want, (
            f"the in-flight request ended with {inflight.finish_reason()!r}, want {want!r}; "
            f"last chunk {inflight.chunks[-1:]}")
        expect_ok(completion(w, 4), "a completion after /resume")
    c.run("§5 pause?mode=abort: in-flight ends with abort, new requests get 503 \"" + PAUSED +
          "\", /resume serves again", paused_503, "abort")
    c.run("§5 pause?mode=wait: in-flight drains to length, new requests get 503, /resume serves",
          paused_503, "wait")

    def keep_queues():
        expect_ok(w.post("/pause", params={"mode": "keep"}), "pause keep")
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", completion(w, 4)), daemon=True)
        try:
            t.start()
            time.sleep(1.5)
            assert "r" not in box, (
                f"answered while paused: HTTP {box['r'].status_code} {box['r'].text[:200]}")
        finally:
            expect_ok(w.post("/resume"), "resume")
        t.join(60)
        r = box.get("r")
        assert r is not None, "the queued request never came back"
        expect_ok(r, "the queued request after /resume")
        assert r.json()["choices"][0]["finish_reason"] == "length", r.text
    c.run("§5 pause?mode=keep queues a new request (no 503); it completes after /resume",
          keep_queues)

    # ---- §5 /abort_requests ------------------------------------------------------------------
    def abort_by_id():
        st = Stream(w)
        try:
            rid = st.wait_first().get("id")
            r = expect_ok(w.post("/abort_requests", {"request_ids": [f"{rid}-0"]}), "abort")
            assert r.json() == {"status": "aborted", "aborted": 1}, r.text
            st.wait()
            assert st.finish_reason() == "abort", st.finish_reason()
            assert expect_ok(w.get("/is_paused")).json() == {"is_paused": False}
        finally:
            st.stop()
    c.run("§5 /abort_requests {request_ids: [\"<completion id>-0\"]} aborts that completion "
          "(vLLM's external id: response id + \"-\" + prompt index), without pausing",
          abort_by_id)

    def abort_all():
        streams = [Stream(w), Stream(w)]
        try:
            for st in streams:
                st.wait_first()
            r = expect_ok(w.post("/abort_requests", {}), "abort all")
            assert r.json() == {"status": "aborted", "aborted": 2}, r.text
            for st in streams:
                st.wait()
                assert st.finish_reason() == "abort", st.finish_reason()
        finally:
            for st in streams:
                st.stop()
    c.run("§5 /abort_requests {} aborts every in-flight request -> aborted: 2", abort_all)

    def header_id():
        st = Stream(w, headers={"X-Request-Id": "conf-abc"})
        try:
            rid = st.wait_first().get("id")
            assert rid == "cmpl-conf-abc", f"completion id {rid!r}; vLLM: cmpl-<X-Request-Id>"
        finally:
            st.stop()
    c.run("§5 (vLLM) an X-Request-Id header names the completion: id cmpl-<X-Request-Id>",
          header_id)

    def abort_body_id():
        st = Stream(w, request_id="conf-body")
        try:
            rid = st.wait_first().get("id")
            assert rid == "cmpl-conf-body", f"completion id {rid!r}; vLLM: cmpl-<request_id>"
            expect_ok(w.post("/abort_requests", {"request_ids": [f"{rid}-0"]}), "abort")
            st.wait()
            assert st.finish_reason() == "abort", st.finish_reason()
        finally:
            st.stop()
    c.run("§5 (vLLM) a body request_id names the completion: id cmpl-<request_id>, abortable "
          "as cmpl-<request_id>-0", abort_body_id)


def main():
    run_suite(sys.argv, "completions, pause and abort, disk plane (§5, §7)", run)


def run(checks, worker_bin, make_tool):
    tmp = scratch("hotswap-vllm-gen-")
    # A little bigger than the others, so that a LONG completion is still running when acted on.
    shape = dict(layers=4, hidden=128, intermediate=256, heads=4, kv_heads=2, vocab=256)
    model = make_model(make_tool, f"{tmp}/m0", seed=1, **shape)
    ckpts = [make_model(make_tool, f"{tmp}/m{i}", seed=1 + i, **shape) for i in (1, 2)]
    # --timeout bounds a generate request too: long enough for a LONG request across a pause.
    with Worker(worker_bin, model, backend="disk", timeout=180) as w:
        run_guarded(checks, w, body, checks, w, ckpts)


if __name__ == "__main__":
    main()
