#!/usr/bin/env python3
"""vllm-0.34.md §5 (weight routes: initial version, RuntimeError -> 500, shutdown refused during
an update, draft refusal, /abort_requests input checks) and §6 (metrics) against a hotswap-worker
on the disk plane, through vLLM's own HTTPVLLMWeightSyncClient.

    test_control_plane.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL
"""

import re
import sys

from common import (
    Worker,
    error_message,
    expect_ok,
    expect_refused,
    http_error_of,
    make_model,
    run_guarded,
    run_suite,
    scratch,
)

METRIC_DURATION = "vllm:rl_weight_update_operation_duration_seconds"
METRIC_IN_FLIGHT = "vllm:rl_weight_update_operations_in_flight"
VLLM_BUCKETS = {0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, float("inf")}
VLLM_HELP = {METRIC_DURATION: "Duration of one weight-transfer operation.",
             METRIC_IN_FLIGHT: "Weight-transfer operations currently awaited."}


def parse_metrics(text):
    """[(name, {label: value}, value)], {name: TYPE}, {name: HELP}"""
    samples, types, helps = [], {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
        elif line.startswith("# HELP "):
            parts = line.split(" ", 3)
            helps[parts[2]] = parts[3] if len(parts) > 3 else ""
        elif line and not line.startswith("#"):
            m = re.match(r"^([^{\s]+)(?:\{(.*)\})?\s+(\S+)", line)
            if m:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
                samples.append((m.group(1), labels, m.group(3)))
    return samples, types, helps


def vllm_error_shape(resp, status, kind):
    """INFO text: whether the refusal's body has vLLM's exception-handler shape."""
    try:
        err = resp.json().get("error")
    except (ValueError, AttributeError):
        return "body is not a JSON object"
    want = {"type": kind, "code": status}
    if not isinstance(err, dict):
        return f"error is {type(err).__name__}, vLLM's is an object"
    missing = [k for k in ("message", "type", "param", "code") if k not in err]
    diff = {k: err.get(k) for k, v in want.items() if err.get(k) != v}
    if not missing and not diff:
        return "matches vLLM's {message, type, param, code}"
    return f"differs from vLLM's (missing {missing}, {diff} vs {want})"


def body(c, w, new_ckpt):
    client = w.client

    c.run("§5 initial weight version is \"default\" (GET /weight_info)",
          lambda: _eq(expect_ok(w.get("/weight_info")).json(), {"weight_version": "default"}))

    # ---- RuntimeError -> 500 ------------------------------------------------------------------
    c.run("setup: init_weight_transfer_engine({}) on the disk plane",
          client.init_weight_transfer_engine, {})

    def runtime_error(fn, text, *args):
        resp = http_error_of(fn, *args)
        expect_refused(resp, text, status=500)
        c.info(f"500 body ({text[:30]}...): {vllm_error_shape(resp, 500, 'InternalServerError')}")
    c.run("§5 RuntimeError -> 500: update_weights without start", runtime_error,
          client.update_weights, "start_weight_update must be called before update_weights",
          {"path": new_ckpt})
    c.run("§5 RuntimeError -> 500: finish without start", runtime_error,
          client.finish_weight_update,
          "finish_weight_update called without a matching start_weight_update")
    c.run("setup: start_weight_update", client.start_weight_update)
    c.run("§5 RuntimeError -> 500: nested start_weight_update", runtime_error,
          client.start_weight_update, "start_weight_update called while a weight update is "
          "already active")

    # ---- shutdown during an update ----------------------------------------------------------
    c.run("§5 shutdown_weight_transfer_engine refused (500) during an active update",
          runtime_error, client.shutdown_weight_transfer_engine,
          "Cannot release a trainer connection during a weight update")

    def round_completes_after_refusal():
        client.update_weights({"path": new_ckpt})
        client.finish_weight_update(weight_version="step-1")
        _eq(w.get("/weight_info").json(), {"weight_version": "step-1"})
    c.run("§5 the update the refused shutdown met still completes (version step-1)",
          round_completes_after_refusal)

    def shutdown_ok():
        resp = w.post("/shutdown_weight_transfer_engine", timeout=60)
        expect_ok(resp, "shutdown")
        _eq(resp.json(), {"message": "Weight transfer shut down"})
    c.run("§5 shutdown_weight_transfer_engine outside an update -> "
          "{\"message\": \"Weight transfer shut down\"}", shutdown_ok)

    def inference_survives_shutdown():
        r = expect_ok(w.post("/v1/completions", {"model": "tiny", "prompt": [1, 2, 3],
                                                 "max_tokens": 4, "temperature": 0,
                                                 "ignore_eos": True}), "completion")
        assert r.json()["choices"][0]["finish_reason"] == "length", r.text
        client.init_weight_transfer_engine({})
        client.start_weight_update()
        client.update_weights({"path": new_ckpt})
        client.finish_weight_update()
    c.run("§5 after shutdown inference still serves and a new init + round works",
          inference_survives_shutdown)

    def draft_refused():
        resp = w.post("/start_draft_weight_update", timeout=60)
        expect_refused(resp, status=500)
        msg = error_message(resp)
        # vLLM checks the engine first ("<Engine> does not support draft model weight updates."),
        # then the draft model; the disk plane is hotswap's own, so either is vLLM's order.
        assert ("Draft model weight update requested, but no draft model is configured." in msg
                or "does not support draft model weight updates" in msg), msg
    c.run("§5 start_draft_weight_update without a draft model -> 500 (disk plane)",
          draft_refused)

    def version_route():
        r = expect_ok(w.post("/update_weight_version", {"new_version": "v9"}))
        _eq(r.json(), {"success": True, "new_version": "v9"})
        _eq(w.get("/weight_info").json(), {"weight_version": "v9"})
    c.run("§5 update_weight_version -> {success, new_version}; /weight_info follows",
          version_route)

    # ---- /abort_requests input ---------------------------------------------------------------
    c.run("§5 /abort_requests: invalid JSON -> 400 \"Invalid JSON format\"",
          lambda: expect_refused(w.post("/abort_requests", data="{not json",
                                        headers={"Content-Type": "application/json"}),
                                 "Invalid JSON format", status=400))
    c.run("§5 /abort_requests: a non-object body -> 400 \"Request body must be a JSON object\"",
          lambda: expect_refused(w.post("/abort_requests", [1, 2]),
                                 "Request body must be a JSON object", status=400))
    c.run("§5 /abort_requests {} with nothing in flight -> {\"status\": \"aborted\", "
          "\"aborted\": 0}",
          lambda: _eq(expect_ok(w.post("/abort_requests", {})).json(),
                      {"status": "aborted", "aborted": 0}))
    c.run("§5 /abort_requests with unknown ids -> 200, aborted counts the ids sent (vLLM)",
          lambda: _eq(expect_ok(w.post("/abort_requests", {"request_ids": ["cmpl-x-0"]})).json(),
                      {"status": "aborted", "aborted": 1}))

    # ---- §6 metrics -----------------------------------------------------------------------
    samples, types, helps = parse_metrics(expect_ok(w.get("/metrics")).text)

    def histogram():
        assert types.get(METRIC_DURATION) == "histogram", (
            f"TYPE of {METRIC_DURATION} is {types.get(METRIC_DURATION)!r}")
        buckets = {}
        for name, labels, _ in samples:
            if name == METRIC_DURATION + "_bucket":
                le = labels.get("le")
                buckets.setdefault(labels.get("operation"), set()).add(
                    float("inf") if le == "+Inf" else float(le))
        assert buckets, "no bucket samples"
        for op, les in buckets.items():
            assert les == VLLM_BUCKETS, f"operation {op}: buckets {sorted(les)}"
        for suffix in ("_sum", "_count"):
            assert any(n == METRIC_DURATION + suffix for n, _, _ in samples), suffix
    c.run("§6 duration is a histogram labelled operation, buckets (0.01 0.1 1 10 30 60 120 300 "
          "600 +Inf), with _sum and _count", histogram)

    def operations():
        ops = {labels.get("operation") for n, labels, _ in samples
               if n.startswith(METRIC_DURATION)}
        want = {"init", "start", "update", "finish", "shutdown"}
        assert want <= ops, f"operations seen {sorted(o for o in ops if o)}; want {sorted(want)}"
        assert "set_version" not in ops, "vLLM 0.34 has no set_version operation"
        assert ops <= {"init", "shutdown", "start", "start_draft", "update", "finish"}, ops
        c.info(f"operations recorded: {sorted(ops)} (vLLM records start_draft too, failures "
               "included)")
    c.run("§6 operations init/start/update/finish/shutdown recorded; no set_version", operations)

    def in_flight():
        assert types.get(METRIC_IN_FLIGHT) == "gauge", types.get(METRIC_IN_FLIGHT)
        vals = [(lab.get("operation"), v) for n, lab, v in samples if n == METRIC_IN_FLIGHT]
        assert vals and all(float(v) == 0 for _, v in vals), vals
    c.run("§6 gauge vllm:rl_weight_update_operations_in_flight{operation}, 0 when idle",
          in_flight)

    c.run("§6 no vllm:rl_weight_update_operations_total",
          lambda: _eq([n for n, _, _ in samples
                       if n.startswith("vllm:rl_weight_update_operations_total")], []))

    for name, text in VLLM_HELP.items():
        c.info(f"HELP {name}: {helps.get(name)!r} (vLLM: {text!r})")

    def failures_counted():
        count = {lab.get("operation"): float(v) for n, lab, v in samples
                 if n == METRIC_DURATION + "_count"}
        # finishes: one refused (no start), two that went through
        c.info(f"finish _count {count.get('finish')} (vLLM counts failures too: 3)")
    failures_counted()


def _eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def main():
    run_suite(sys.argv, "weight routes and metrics, disk plane (§5, §6)", run)


def run(checks, worker_bin, make_tool):
    tmp = scratch("hotswap-vllm-control-")
    old = make_model(make_tool, f"{tmp}/old", seed=1)
    new = make_model(make_tool, f"{tmp}/new", seed=2)
    with Worker(worker_bin, old, backend="disk", timeout=20) as w:
        run_guarded(checks, w, body, checks, w, new)


if __name__ == "__main__":
    main()
