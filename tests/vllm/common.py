"""Shared pieces of the vLLM conformance suite (tests/vllm/): a check counter, hotswap-worker
processes on loopback, tiny checkpoints, the gloo byte pump (gloo_peer.py) and vLLM's trainer
engines wired to it.

Everything here runs in the python named by HOTSWAP_VLLM_PYTHON (one with vLLM 0.33 or 0.34 from
PyPI); nothing imports hotswap's own Python package, which is built against another torch.
"""

import atexit
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

import requests
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# vLLM's pack_tensors warns for every tensor larger than the buffer; the tests do that on purpose.
warnings.filterwarnings("ignore", message=r"Tensor '.*' has size \d+ bytes, which exceeds")

import vllm  # noqa: E402
from vllm.distributed.weight_transfer import sparse_nccl_engine  # noqa: E402
from vllm.distributed.weight_transfer.base import (  # noqa: E402
    ParamMeta,
    WeightSource,
    layerwise_groups,
)
from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient  # noqa: E402
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo  # noqa: E402
from vllm.distributed.weight_transfer.nccl_engine import (  # noqa: E402
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors  # noqa: E402

VLLM_VERSION = vllm.__version__
# Feature tests rather than version numbers: what the installed vLLM's own dataclasses carry.
HAS_LOAD_PLAN = "use_load_plan" in {f.name for f in dataclasses.fields(NCCLWeightTransferInitInfo)}
HAS_SRC = "src" in {f.name for f in dataclasses.fields(NCCLWeightTransferUpdateInfo)}
ONLY_034 = (f"0.34-only (vLLM {VLLM_VERSION}'s init/update infos carry no use_load_plan, "
            "metadata or src)")


# ---------------------------------------------------------------------------------------------
# Checks: one line each, then "N passed, N failed".

class Checks:
    def __init__(self, title):
        self.title = title
        self.passed = self.failed = self.skipped = 0
        print(f"== {title} (vLLM {VLLM_VERSION})", flush=True)

    def run(self, name, fn, *args, **kwargs):
        """Runs fn; an exception (AssertionError included) is a failure, named with its text."""
        started = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except SkipCheck as s:
            self.skip(name, str(s))
            return None
        except Exception as e:  # noqa: BLE001
            self.failed += 1
            text = str(e) or type(e).__name__
            if not isinstance(e, AssertionError):
                text = f"{type(e).__name__}: {text}"
            print(f"FAIL {name}: {one_line(text, 600)}", flush=True)
            if os.environ.get("HOTSWAP_VLLM_TEST_TRACE"):
                traceback.print_exc()
            return None
        self.passed += 1
        print(f"PASS {name} ({time.monotonic() - started:.1f} s)", flush=True)
        return result

    def guard(self, fn, *args, **kwargs):
        """Runs a whole section; only an escaping exception is reported (as one failure)."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            self.failed += 1
            print(f"FAIL (stopped early) {type(e).__name__}: {one_line(e, 800)}", flush=True)
            if os.environ.get("HOTSWAP_VLLM_TEST_TRACE"):
                traceback.print_exc()
            return None

    def check(self, name, condition, detail=""):
        def fn():
            assert condition, detail
        return self.run(name, fn)

    def skip(self, name, why):
        self.skipped += 1
        print(f"SKIP {name}: {why}", flush=True)

    def info(self, text):
        print(f"INFO {one_line(text, 800)}", flush=True)

    def finish(self):
        if self.skipped:
            print(f"{self.skipped} skipped", flush=True)
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0


class SkipCheck(Exception):
    pass


def one_line(text, limit):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------------------------
# HTTP helpers

def error_message(resp):
    """The error text of a refused call, whichever of vLLM's shapes it came in: {"error":
    {"message"}} (OpenAI / exception handlers), {"error": "..."} (/pause), {"detail": "..."}."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in body:
            return str(body["detail"])
        if "message" in body:
            return str(body["message"])
    return resp.text


def expect_ok(resp, what=""):
    assert 200 <= resp.status_code < 300, (
        f"{what} HTTP {resp.status_code}: {one_line(resp.text, 400)}")
    return resp


def expect_refused(resp, text=None, status=None, what=""):
    """A non-2xx reply (exactly `status` if given) whose error message contains `text`."""
    got = resp.status_code
    msg = error_message(resp)
    if status is not None:
        assert got == status, f"{what} want HTTP {status}, got {got}: {one_line(resp.text, 400)}"
    else:
        assert not 200 <= got < 300, (
            f"{what} want a refusal, got HTTP {got}: {one_line(resp.text, 300)}")
    if text is not None:
        assert text.lower() in msg.lower(), f"{what} HTTP {got}, message {msg!r} lacks {text!r}"
    return resp


def http_error_of(fn, *args, **kwargs):
    """Runs a HTTPVLLMWeightSyncClient call that must fail; returns the requests.Response."""
    try:
        fn(*args, **kwargs)
    except requests.HTTPError as e:
        return e.response
    raise AssertionError(f"{getattr(fn, '__name__', fn)} succeeded; it must be refused")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Checkpoints

def scratch(prefix):
    """A temporary directory, removed when the test exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def make_model(tool, out, seed=1, layers=2, hidden=64, intermediate=96, heads=4, kv_heads=2,
               vocab=128, dtype=None):
    args = [tool, "--arch", "qwen2", "--layers", str(layers), "--hidden-size", str(hidden),
            "--intermediate-size", str(intermediate), "--heads", str(heads), "--kv-heads",
            str(kv_heads), "--vocab", str(vocab), "--seed", str(seed), "--out", out]
    if dtype:
        args += ["--dtype", dtype]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return out


def load_checkpoint(directory):
    """name -> tensor, in vLLM's layerwise order (its own `layerwise_groups`)."""
    from safetensors.torch import load_file
    tensors = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(directory, name)))
    # Hugging Face module order (embeddings, layers, norm, head), then vLLM's own grouping.
    names = sorted(tensors, key=lambda n: (0 if "embed" in n else 2 if n.startswith("lm_head")
                                           else 1, n))
    order = [n for group in layerwise_groups(names) for n in group]
    return {n: tensors[n] for n in order}


def stepped(tensors, step):
    """A deterministic simulated training step: every floating tensor + step * a fixed pattern."""
    out = {}
    for i, (name, t) in enumerate(tensors.items()):
        if t.is_floating_point():
            g = torch.Generator().manual_seed(1000 + i)
            delta = torch.randn(t.shape, generator=g, dtype=torch.float32) * step
            out[name] = (t.float() + delta).to(t.dtype).contiguous()
        else:
            out[name] = t.clone()
    return out


def sha256_of(t):
    data = t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data).hexdigest()


def module_of(tensors):
    """An nn.Module whose named_parameters() are exactly `tensors` (dotted names as submodules),
    so that vLLM's own compute_tensor_digests can hash them."""
    root = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, torch.nn.Parameter(t.clone(), requires_grad=False))
    return root


def vllm_digests(tensors):
    from vllm.model_executor.model_loader.weight_checksum import compute_tensor_digests
    return compute_tensor_digests(module_of(tensors))


class TensorSource(WeightSource):
    """A WeightSource over a dict, with optional ownership (vLLM's ParamMeta.owners)."""

    def __init__(self, tensors, owners=None):
        self.tensors = tensors
        self._owners = owners or {}

    @functools.cached_property
    def metadata(self):
        return [ParamMeta(n, t.dtype, tuple(t.shape), owners=self._owners.get(n))
                for n, t in self.tensors.items()]

    def iter_full(self):
        yield from self.tensors.items()


# ---------------------------------------------------------------------------------------------
# hotswap-worker processes

class Worker:
    def __init__(self, binary, model, backend=None, timeout=20, extra=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [binary, "--model", model, "--control", "tcp://127.0.0.1:*",
                "--http-port", str(self.port), "--timeout", str(timeout),
                "--served-model-name", "tiny", *extra]
        if backend:
            args += ["--weight-transfer-config", json.dumps({"backend": backend})]
        self.args = args
        self.lines = []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if "hotswap-worker ready" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(90) or not self._was_ready():
            out = "\n".join(self.lines[-20:])
            self.close()
            raise RuntimeError(f"hotswap-worker did not start ({' '.join(args)}):\n{out}")
        self.client = HTTPVLLMWeightSyncClient(self.base, timeout=max(60, 3 * timeout))

    def _was_ready(self):
        return any("hotswap-worker ready" in line for line in self.lines)

    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        return requests.get(self.base + path, **kw)

    def post(self, path, json_body=None, **kw):
        kw.setdefault("timeout", 60)
        if json_body is not None:
            kw["json"] = json_body
        return requests.post(self.base + path, **kw)

    def checksums(self):
        r = expect_ok(self.post("/weight_checker", {"action": "checksum", "format": "checkpoint"}),
                      "weight_checker checksum")
        return r.json()["checksums"]

    def version(self):
        return expect_ok(self.get("/weight_info")).json().get("weight_version")

    def tail(self, n=15):
        return "\n".join(self.lines[-n:])

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def assert_serves(worker, tensors, what="the worker"):
    """The worker's checkpoint-format digests equal vLLM's compute_tensor_digests of `tensors`."""
    theirs = worker.checksums()
    ours = vllm_digests(tensors)
    bad = [n for n in tensors if theirs.get(n) != ours[n]]
    assert not bad, f"{what} does not serve the sent tensors: {len(bad)} differ, e.g. {bad[:3]}"


# ---------------------------------------------------------------------------------------------
# The gloo byte pump (gloo_peer.py, run with a torch of the worker's store protocol)

def linked_torch_version(binary):
    """major.minor of the libtorch `binary` links, from ldd; None when it cannot be told."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        m = re.search(r"=>\s*(\S*lib(?:torch_cpu|torch|c10)\.so\S*)", line)
        if not m:
            continue
        path = os.path.realpath(m.group(1))
        v = re.search(r"\.so\.(\d+\.\d+)", path)
        if v:
            return v.group(1)
        version_py = os.path.join(os.path.dirname(os.path.dirname(path)), "version.py")
        try:
            text = open(version_py).read()
        except OSError:
            continue
        v = re.search(r"__version__\s*=\s*['\"](\d+\.\d+)", text)
        if v:
            return v.group(1)
    return None


def torch_version_of(python):
    try:
        out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else None


def find_peer_python(worker_binary):
    """(python, why) for gloo_peer.py, or (None, why not)."""
    forced = os.environ.get("HOTSWAP_GLOO_PEER_PYTHON")
    if forced:
        return forced, "HOTSWAP_GLOO_PEER_PYTHON"
    want = linked_torch_version(worker_binary)
    if want is None:
        return None, ("cannot tell which libtorch hotswap-worker links (ldd); set "
                      "HOTSWAP_GLOO_PEER_PYTHON to a python whose torch is that one")
    seen = []
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3", shutil.which("python3")]):
        if not python:
            continue
        v = torch_version_of(python)
        seen.append(f"{python}: {v}")
        if v and (v == want or v.startswith(want + ".") or v.startswith(want + "a")
                  or v.startswith(want + "+")):
            return python, f"torch {v} matches the worker's libtorch {want}"
    return None, (f"no python with torch {want} (the worker's libtorch) for the gloo peer "
                  f"({'; '.join(seen)}); set HOTSWAP_GLOO_PEER_PYTHON")


class GlooPeer:
    def __init__(self, python):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the vLLM venv's paths must not leak into another python
        self.proc = subprocess.Popen([python, os.path.join(HERE, "gloo_peer.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.replies = {}
        self.events = {}
        self.other = []
        self.cond = threading.Condition()
        self.ids = itertools.count(1)
        self.tmp = tempfile.mkdtemp(prefix="hotswap-gloo-peer-")
        threading.Thread(target=self._read, daemon=True).start()
        started = self._wait(lambda: self.events.get("started"), 120, "start")
        self.torch_version = started["torch"]

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                if line.startswith("@@ "):
                    msg = json.loads(line[3:])
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    elif msg.get("event") == "group":
                        self.events[("group", msg["session"])] = msg
                    else:
                        self.events[msg.get("event")] = msg
                else:
                    self.other.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.events["exited"] = True
            self.cond.notify_all()

    def _wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred()
                if got:
                    return got
                if self.events.get("exited"):
                    raise RuntimeError(f"gloo peer exited during {what}: {self.other[-10:]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"gloo peer: no {what} within {timeout} s")
                self.cond.wait(left)

    def call(self, op, timeout=120, **kw):
        rid = next(self.ids)
        self.proc.stdin.write(json.dumps({"id": rid, "op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        reply = self._wait(lambda: self.replies.pop(rid, None), timeout, op)
        if not reply.get("ok"):
            raise RuntimeError(f"gloo peer {op}: {reply.get('error')}")
        return reply

    def host(self, world_size, ranks=1, timeout=30):
        """A fresh group: returns (session, port); ranks 0..ranks-1 join in the background."""
        r = self.call("host", world_size=world_size, ranks=ranks, timeout=timeout)
        return r["session"], r["port"]

    def wait_group(self, session, timeout=60):
        msg = self._wait(lambda: self.events.get(("group", session)), timeout, "group formation")
        if not msg["ok"]:
            raise RuntimeError(f"gloo group did not form: {msg['error']}")

    def group_state(self, session):
        with self.cond:
            msg = self.events.get(("group", session))
        return None if msg is None else msg["ok"]

    def broadcast(self, session, src, tensors, timeout=120):
        items = []
        for t in tensors:
            t = t.detach().contiguous().cpu()
            path = os.path.join(self.tmp, f"b{next(self.ids)}.bin")
            with open(path, "wb") as f:
                f.write(t.view(-1).view(torch.uint8).numpy().tobytes())
            items.append({"file": path, "dtype": str(t.dtype).split(".")[-1],
                          "numel": t.numel()})
        try:
            self.call("bcast", timeout=timeout, session=session, src=src, items=items)
        finally:
            for item in items:
                os.unlink(item["file"])

    def close_session(self, session):
        try:
            self.call("close", timeout=10, session=session)
        except Exception:  # noqa: BLE001
            pass

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


class PeerGroup:
    """Stands in for vLLM's PyNcclCommunicator on the trainer: broadcasts go through the peer."""

    def __init__(self, peer, session, rank=0):
        self.peer, self.session, self.rank = peer, session, rank
        self.device = torch.device("cpu")
        self.disabled = False

    def broadcast(self, tensor, src=0, stream=None):
        self.peer.broadcast(self.session, src, [tensor])

    def destroy(self):
        self.peer.close_session(self.session)


class RecordingClient(HTTPVLLMWeightSyncClient):
    """vLLM's HTTP client, unchanged, with a log of what it was asked to send."""

    def __init__(self, base_url, timeout=120):
        super().__init__(base_url, timeout=timeout)
        self.calls = []

    def init_weight_transfer_engine(self, init_info):
        self.calls.append(("init", json.loads(json.dumps(init_info))))
        return super().init_weight_transfer_engine(init_info)

    def start_weight_update(self):
        self.calls.append(("start", None))
        return super().start_weight_update()

    def update_weights(self, update_info):
        self.calls.append(("update", json.loads(json.dumps(update_info))))
        return super().update_weights(update_info)

    def finish_weight_update(self, weight_version=None):
        self.calls.append(("finish", weight_version))
        return super().finish_weight_update(weight_version)

    def shutdown_weight_transfer_engine(self):
        self.calls.append(("shutdown", None))
        return super().shutdown_weight_transfer_engine()


def wire_dense_trainer(peer, session):
    """Points vLLM's NCCLTrainerWeightTransferEngine at the gloo peer for the data plane only.

    `_open_trainer_endpoint` waits for the peer's group instead of forming a NCCL one, and
    `_broadcast` moves, through the peer, exactly what vLLM's producer would: each tensor
    (unpacked) or each chunk cut by vLLM's own `pack_tensors` (packed). Everything else — the
    checks, payloads, rank_offset, the start/update/finish order, src, metadata reuse — is
    vLLM's code, unchanged. Returns a restore function."""
    cls = NCCLTrainerWeightTransferEngine
    names = ("_open_trainer_endpoint", "_broadcast")
    saved = {k: cls.__dict__[k] for k in names if k in cls.__dict__}

    def open_endpoint(self, init_info):
        peer.wait_group(session, timeout=90)
        self.model_update_group = PeerGroup(peer, session, getattr(self, "_group_rank", 0))

    def broadcast(self, *args):
        if args and isinstance(args[0], WeightSource):  # vLLM 0.33: _broadcast(source, meta)
            meta, src = args[1], 0
        else:
            meta, src = args
        tensors = self.source.tensors
        pairs = ((m.name, tensors[m.name]) for m in meta)
        if self.packed:
            chunks = []
            while True:
                chunk = pack_tensors(pairs, lambda item: item[1], self.packed_buffer_size_bytes)
                if chunk is None:
                    break
                chunks.append(chunk.packed_tensor)
            peer.broadcast(session, src, chunks)
        else:
            peer.broadcast(session, src, [t for _, t in pairs])

    cls._open_trainer_endpoint = open_endpoint
    cls._broadcast = broadcast

    def restore():
        for k in names:
            if k in saved:
                setattr(cls, k, saved[k])
    return restore


def wire_sparse_trainer(peer, session):
    """vLLM's SparseNCCLTrainerWeightTransferEngine with its endpoint on the gloo peer; its own
    `_broadcast_chunk` then broadcasts int32 indices and values per patch through it."""
    saved_open = sparse_nccl_engine.open_trainer_endpoint
    saved_stream = torch.cuda.current_stream

    def open_endpoint(init_info, rank=0):
        peer.wait_group(session, timeout=90)
        return PeerGroup(peer, session, rank)

    sparse_nccl_engine.open_trainer_endpoint = open_endpoint
    torch.cuda.current_stream = lambda *a, **k: None  # no GPU here; the peer ignores streams

    def restore():
        sparse_nccl_engine.open_trainer_endpoint = saved_open
        torch.cuda.current_stream = saved_stream
    return restore


def concurrently(fn, *args, **kwargs):
    """Runs fn in a thread; returns a function that joins it and returns (result, exception)."""
    box = {}

    def target():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def join(timeout=None):
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} still running after {timeout} s")
        return box.get("result"), box.get("error")
    return join


def main_args(argv, n=2):
    if len(argv) < n + 1:
        sys.exit(f"usage: {argv[0]} HOTSWAP_WORKER HOTSWAP_MAKE_MODEL")
    return argv[1:n + 1]


def run_guarded(checks, w, body, *args):
    """Runs `body(*args)` under the checks; on a failure, adds the worker's last lines."""
    try:
        checks.guard(body, *args)
    finally:
        if checks.failed:
            checks.info("worker's last lines: " + w.tail(8).replace("\n", " | "))


def run_on_gloo_plane(checks, worker_bin, make_tool, backend, seed, suite, body):
    """A worker of `backend` on a fresh model, a gloo peer for the trainer's ranks, and
    `body(checks, suite(checks, worker, peer, tensors))`; whatever the suite left to restore is
    restored. Skips, saying why, where no python can host the peer."""
    peer_python, why = find_peer_python(worker_bin)
    if peer_python is None:
        checks.skip(f"{backend} data plane (all checks of this file)", why)
        return
    checks.info(f"gloo peer python: {peer_python} ({why})")
    tmp = scratch(f"hotswap-vllm-{backend}-")
    model = make_model(make_tool, f"{tmp}/m", seed=seed)
    tensors = load_checkpoint(model)
    peer = GlooPeer(peer_python)
    try:
        with Worker(worker_bin, model, backend=backend, timeout=20) as w:
            s = suite(checks, w, peer, tensors)
            try:
                run_guarded(checks, w, body, checks, s)
            finally:
                if s.restore:
                    s.restore()
    finally:
        peer.close()


def run_suite(argv, title, run):
    """The main() of every test file: `run(checks, worker_bin, make_tool)` under the checks."""
    worker_bin, make_tool = main_args(argv)
    checks = Checks(title)
    checks.guard(run, checks, worker_bin, make_tool)
    sys.exit(checks.finish())
