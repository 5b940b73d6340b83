"""WorkerProcess: a hotswap-worker started from Python, on loopback for examples, tests and
single-host jobs, or on a node's address for hotswap.ray's replicas. The worker dies with the
thread that started it (PR_SET_PDEATHSIG), and leaving the `with` block stops it, on every exit
path."""

import ctypes
import json
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
    """Starts `binary --model MODEL --control tcp://HOST:PORT` with the given backend (a name, or
    a whole weight-transfer config as a dict) and extra arguments, and waits (at most `timeout`
    seconds) for its ready line, which names the control endpoint it bound (`endpoint`) and,
    with --http-port, its HTTP address (`http_url`).

        with WorkerProcess("hotswap-worker", "/ckpt", backend="shm") as worker:
            client = hotswap.ZmqWeightSyncClient(worker.endpoint)

    `port=None` binds a free port. `on_exit(returncode)` is called, from the thread that reads
    the worker's output, when the worker exits without `stop()` having been asked for: how
    hotswap.ray's replica actors notice a worker that died. `pass_fds` stay open in the worker
    (a key handed over through a pipe). `log` keeps (at least) the last `log_lines` lines of the
    worker's output."""

    def __init__(self, binary, model, backend, *extra_args, timeout=60.0, host="127.0.0.1",
                 port=None, on_exit=None, env=None, pass_fds=(), log_lines=2000):
        config = backend if isinstance(backend, dict) else {"backend": backend}
        self.binary = binary
        self.args = [binary, "--model", str(model),
                     "--control", f"tcp://{host}:{'*' if port is None else int(port)}",
                     "--weight-transfer-config", json.dumps(config), *extra_args]
        self.timeout = timeout
        self.env = env
        self.pass_fds = tuple(pass_fds)
        self.on_exit = on_exit
        self.endpoint = None
        self.http_url = None
        self.process = None
        self.log = []  # a list, trimmed to the last log_lines lines now and then
        self._log_lines = log_lines
        self._stopping = False

    @property
    def pid(self):
        return None if self.process is None else self.process.pid

    def tail(self, lines=20):
        """The last `lines` lines the worker printed, as one string."""
        return "\n".join(self.log[-lines:])

    def start(self):
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=self.env,
                                        pass_fds=self.pass_fds, preexec_fn=_die_with_parent)
        ready = threading.Event()

        def read():
            for line in self.process.stdout:
                self.log.append(line.rstrip("\n"))
                if len(self.log) > 2 * self._log_lines:
                    del self.log[:-self._log_lines]
                if "ready: control " in line and not ready.is_set():
                    fields = line.rstrip("\n").split("control ", 1)[1].split("; ")
                    self.endpoint = fields[0]
                    self.http_url = next((f[len("http "):] for f in fields
                                          if f.startswith("http ")), None)
                    ready.set()
            ready.set()  # the worker exited before it was ready
            returncode = self.process.wait()
            on_exit = self.on_exit  # once: stop() may clear it meanwhile
            if on_exit is not None and not self._stopping:
                on_exit(returncode)

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(self.timeout) or self.endpoint is None:
            self.stop()
            raise RuntimeError(f"{self.binary} did not become ready within {self.timeout} s:\n"
                               + self.tail())
        return self

    def stop(self):
        """SIGTERM (a worker's clean stop), then SIGKILL after 15 s; the exit status, or None
        when the worker was never started."""
        self._stopping = True
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
