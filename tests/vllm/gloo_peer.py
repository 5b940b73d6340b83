#!/usr/bin/env python3
"""The trainer ranks of a gloo weight-transfer group, as a byte pump for the vLLM conformance tests.

Runs with a python whose torch speaks the worker's c10d store protocol: the torch hotswap-worker
was built against (vLLM's own python where its torch is the build's; the store's queries differ
between torch versions: torch 2 renumbered them). The test process (vLLM's
python) decides what goes on the wire, with vLLM's own code (payloads, chunk boundaries); this
process only hosts the store, joins the group as trainer ranks 0..k-1 and broadcasts the bytes it
is handed, in order.

Protocol: one JSON object a line on stdin; replies on stdout as lines "@@ {json}".
    {"id": n, "op": "host", "world_size": W, "ranks": k, "timeout": s}
        -> {"id": n, "ok": true, "session": S, "port": P}; rank 0 hosts a TCPStore on a port it
        binds itself; ranks 0..k-1 then join a ProcessGroupGloo of W ranks in the background and
        do vLLM's warm-up all-reduce (one float32); when that is over (or failed) an event
        {"event": "group", "session": S, "ok": bool, "error": str} follows.
    {"id": n, "op": "bcast", "session": S, "src": r, "items": [{"file", "dtype", "numel"}, ...]}
        -> one broadcast per item, in order, rooted at group rank r: rank r sends the file's raw
        bytes as a 1-D tensor of `dtype` (numel elements), every other peer rank receives and
        drops them. A count-0 item is skipped, as NCCL skips a count-0 broadcast. Reply
        {"id": n, "ok": true} once all are done, or {"id": n, "ok": false, "error": ...}.
    {"id": n, "op": "close", "session": S}
Exits at end of input.
"""

import datetime
import json
import os
import sys
import threading
import traceback

import torch
import torch.distributed as dist

_out_lock = threading.Lock()


def say(obj):
    with _out_lock:
        sys.stdout.write("@@ " + json.dumps(obj) + "\n")
        sys.stdout.flush()


def make_group(store, rank, world_size, timeout):
    """ProcessGroupGloo on loopback (the worker binds the address that routes to its master)."""
    try:
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        try:
            opts._threads = 2
        except Exception:
            pass
        return dist.ProcessGroupGloo(store, rank, world_size, opts)
    except (AttributeError, TypeError):
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)


class Session:
    def __init__(self, sid, world_size, nranks, timeout_s):
        self.sid = sid
        self.world_size = world_size
        self.nranks = nranks
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.master = dist.TCPStore("127.0.0.1", 0, world_size, True, self.timeout,
                                    wait_for_workers=False)
        self.port = self.master.port
        self.groups = [None] * nranks
        self.ready = threading.Event()
        self.error = None

    def form(self):
        errors = []

        def join(rank):
            try:
                store = self.master if rank == 0 else dist.TCPStore(
                    "127.0.0.1", self.port, self.world_size, False, self.timeout)
                self.groups[rank] = make_group(store, rank, self.world_size, self.timeout)
            except Exception as e:  # noqa: BLE001
                errors.append(f"rank {rank}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=join, args=(r,), daemon=True)
                   for r in range(self.nranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not errors:
            try:
                works = []
                for g in self.groups:
                    opts = dist.AllreduceOptions()
                    works.append(g.allreduce([torch.zeros(1, dtype=torch.float32)], opts))
                for w in works:
                    w.wait()
            except Exception as e:  # noqa: BLE001
                errors.append(f"warm-up all-reduce: {type(e).__name__}: {e}")
        self.error = "; ".join(errors) or None
        self.ready.set()
        say({"event": "group", "session": self.sid, "ok": self.error is None,
             "error": self.error or ""})

    def broadcast(self, src, items):
        if not self.ready.is_set() or self.error:
            raise RuntimeError("the group is not formed: " + (self.error or "still forming"))
        for item in items:
            dtype = getattr(torch, item["dtype"])
            numel = int(item["numel"])
            if numel == 0:
                # NCCL returns at once for a count-0 collective (nothing crosses the wire), so a
                # vLLM trainer's empty broadcast is no exchange at all; gloo would still pair up.
                continue
            works = []
            for rank, g in enumerate(self.groups):
                if rank == src:
                    with open(item["file"], "rb") as f:
                        data = bytearray(f.read())
                    t = (torch.frombuffer(data, dtype=dtype).clone() if numel
                         else torch.empty(0, dtype=dtype))
                    assert t.numel() == numel, (t.numel(), numel)
                else:
                    t = torch.empty(numel, dtype=dtype)
                opts = dist.BroadcastOptions()
                opts.rootRank = src
                opts.rootTensor = 0
                works.append(g.broadcast([t], opts))
            for w in works:
                w.wait()


def main():
    sessions = {}
    next_sid = 0
    say({"event": "started", "torch": torch.__version__, "pid": os.getpid()})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        rid = req.get("id")
        try:
            op = req["op"]
            if op == "host":
                next_sid += 1
                s = Session(next_sid, int(req["world_size"]), int(req["ranks"]),
                            float(req.get("timeout", 60)))
                sessions[s.sid] = s
                say({"id": rid, "ok": True, "session": s.sid, "port": s.port})
                threading.Thread(target=s.form, daemon=True).start()
            elif op == "bcast":
                sessions[req["session"]].broadcast(int(req["src"]), req["items"])
                say({"id": rid, "ok": True})
            elif op == "close":
                sessions.pop(req["session"], None)
                say({"id": rid, "ok": True})
            else:
                raise ValueError("unknown op " + op)
        except Exception as e:  # noqa: BLE001
            say({"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}",
                 "trace": traceback.format_exc()[-2000:]})
    os._exit(0)  # daemon threads may still sit in a rendezvous that nobody completes


if __name__ == "__main__":
    main()
