"""WorkerProcess: a hotswap-worker started from Python on loopback, for examples, tests and
single-host jobs. The worker dies with the process that started it (PR_SET_PDEATHSIG), and
leaving the `with` block stops it, on every exit path."""

import ctypes
import random
import signal
import socket
import subprocess
import threading


# Looked up here, in the parent: between fork and exec only the call itself runs (loading a
# library in the child of a threaded trainer could deadlock on the loader's lock).
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_PR_SET_PDEATHSIG = 1


def free_port(host="127.0.0.1"):
    """A TCP port free on `host` right now: for a gloo or nccl rendezvous (master_port).

    Picked at random below the kernel's ephemeral range, as hotswap's C++ pick_free_port does:
    there only someone asking for that very number can take it before the rendezvous binds it,
    while in the range any bind(0) or outgoing connection of any process may land on it."""
    lowest, first_ephemeral = 10000, 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    below_ephemeral = first_ephemeral - lowest >= 1000
    for _ in range(200):
        port = random.randrange(lowest, first_ephemeral) if below_ephemeral else 0
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"found no free TCP port on {host} in 200 tries")


def _die_with_parent():
    # Runs in the child between fork and exec: SIGTERM it when the parent dies, so a trainer
    # killed with SIGKILL leaves no worker behind.
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class WorkerProcess:
    """Starts `binary --model MODEL --control tcp://127.0.0.1:*` with the given backend and
    extra arguments, and waits (at most `timeout` seconds) for its ready line, which names the
    control endpoint it bound.

        with WorkerProcess("hotswap-worker", "/ckpt", backend="shm") as worker:
            client = hotswap.ZmqWeightSyncClient(worker.endpoint)
    """

    def __init__(self, binary, model, backend, *extra_args, timeout=60.0):
        self.binary = binary
        self.args = [binary, "--model", str(model), "--control", "tcp://127.0.0.1:*",
                     "--weight-transfer-config", f'{{"backend": "{backend}"}}', *extra_args]
        self.timeout = timeout
        self.endpoint = None
        self.process = None
        self.log = []

    def start(self):
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=_die_with_parent)
        ready = threading.Event()

        def read():
            for line in self.process.stdout:
                self.log.append(line.rstrip("\n"))
                if "ready: control " in line and not ready.is_set():
                    self.endpoint = line.split("control ", 1)[1].split(";", 1)[0]
                    ready.set()
            ready.set()  # the worker exited before it was ready

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(self.timeout) or self.endpoint is None:
            self.stop()
            raise RuntimeError(f"{self.binary} did not become ready within {self.timeout} s:\n"
                               + "\n".join(self.log[-20:]))
        return self

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
