"""ReplicaActor: the Ray actor behind one replica of a WorkerGroup.

It starts `hotswap-worker` on the node Ray placed it on, bound to that node's address with the
group's CURVE keys (the secret one through a pipe) and its API key on the HTTP routes, waits
for the ready line and reports the worker to the group's ledger. When the worker exits without
being asked to, the actor reports the exit and exits itself, so that Ray's actor restarts
(`max_restarts`) start a new one: the restarted actor runs this constructor again, in the same
bundle, and takes the same ports where it lands on the same node. The worker dies with the actor
(PR_SET_PDEATHSIG, and Ray kills an exiting actor's child processes), so a killed actor or a
driver that went away leaves no worker behind.
"""

import dataclasses
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
import warnings

import ray

from ..client import HotswapWeightSyncClient
from ..worker_process import WorkerProcess, free_port
from .connection import GroupKeys


@dataclasses.dataclass(frozen=True)
class ReplicaSpec:
    """Everything one replica's actor needs, identical across its restarts."""

    group: str
    replica: int
    replicas: int
    model: str
    binary: str
    tensor_parallel_size: int
    weight_transfer_config: dict
    worker_args: tuple
    uses_gpu: bool
    http: bool
    keys: GroupKeys
    ready_timeout: float
    env: dict


def _port_of(address):
    """The port of tcp://HOST:PORT or http://HOST:PORT."""
    return int(address.rsplit(":", 1)[1])


class ReplicaActor:
    def __init__(self, spec, ledger_name):
        self.spec = spec
        # By name, not by handle: an actor restarted by Ray gets its constructor's arguments
        # again, and a handle among them would be an object-store argument that may be gone.
        self.ledger = ray.get_actor(ledger_name)
        ledger = self.ledger
        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        # The node's address as Ray knows it: in an actor, the --node-ip-address its raylet
        # started it with (ray.nodes()' NodeManagerAddress), never a guess from the network
        # interfaces. The worker binds there, so nodes started at 127.0.0.1 keep it on loopback.
        self.node_ip = ray.util.get_node_ip_address()
        self.incarnation = uuid.uuid4().hex
        with warnings.catch_warnings():  # Ray 2.60 warns about its own use of actor_id there
            warnings.simplefilter("ignore", DeprecationWarning)
            self.restarted = context.was_current_actor_reconstructed
        # Ray narrows CUDA_VISIBLE_DEVICES to the actor's GPUs: the worker's ranks use cuda:0..T-1
        # of them, which are the node's GPUs gpu_ids.
        self.gpu_ids = list(ray.get_gpu_ids()) if spec.uses_gpu else []
        self.devices = ([f"cuda:{r}" for r in range(spec.tensor_parallel_size)]
                        if spec.uses_gpu else ["cpu"])
        self._exit_reported = threading.Lock()
        previous = ray.get(ledger.previous.remote(spec.replica), timeout=60)
        same_node = previous is not None and previous["node_id"] == self.node_id
        try:
            self.worker = self._start(previous if same_node else None)
        except RuntimeError:
            if not same_node:
                raise
            self.worker = self._start(None)  # the old ports were taken meanwhile
        self.started_at = time.time()
        ray.get(ledger.ready.remote(self.info()), timeout=60)
        # From here on, a worker that exits on its own takes this actor with it (for Ray to
        # restart); one that died while this was being set up is seen at once.
        self.worker.on_exit = self._worker_exited
        if self.worker.process.poll() is not None:
            self._worker_exited(self.worker.process.returncode)

    def _start(self, previous):
        spec = self.spec
        binary = shutil.which(spec.binary) or spec.binary
        if not os.access(binary, os.X_OK):
            raise FileNotFoundError(f"replica {spec.replica}: no {spec.binary!r} to run on node "
                                    f"{self.node_ip} ({self.node_id[:8]}): install hotswap there "
                                    "or pass WorkerGroup(binary=...) a path every node has")
        port = _port_of(previous["endpoint"]) if previous else None
        # The workers' secret key reaches the worker through a pipe (/dev/fd/N), never a file;
        # the authorized directory holds the client's public key only, in a directory of this
        # user's (0700), removed once the worker has read it.
        authorized = tempfile.mkdtemp(prefix=f"hotswap-keys-{spec.group}-{spec.replica}-")
        key_read, key_write = os.pipe()
        try:
            with open(os.path.join(authorized, "trainer.key"), "w") as f:
                f.write(spec.keys.client_public)
            os.write(key_write, spec.keys.server_secret.encode())
            os.close(key_write)
            key_write = None
            args = ["--data-parallel-rank", str(spec.replica),
                    "--data-parallel-size", str(spec.replicas),
                    "--tensor-parallel-size", str(spec.tensor_parallel_size),
                    "--device", "cuda:0" if spec.uses_gpu else "cpu",
                    "--curve-secret-key-file", f"/dev/fd/{key_read}",
                    "--curve-authorized-keys", authorized]
            env = dict(os.environ, **spec.env)
            if spec.http:
                http_port = _port_of(previous["http_url"]) if previous and \
                    previous.get("http_url") else None
                args += ["--http-host", self.node_ip,
                         "--http-port", str(http_port or free_port(self.node_ip))]
                env["VLLM_API_KEY"] = spec.keys.api_key  # not on the command line: ps shows that
            worker = WorkerProcess(binary, spec.model, spec.weight_transfer_config, *args,
                                   *spec.worker_args, timeout=spec.ready_timeout,
                                   host=self.node_ip, port=port, env=env, pass_fds=(key_read,))
            try:
                return worker.start()
            except RuntimeError as error:
                raise RuntimeError(f"replica {spec.replica} on node {self.node_ip} "
                                   f"({self.node_id[:8]}): {error}") from None
        finally:
            os.close(key_read)
            if key_write is not None:
                os.close(key_write)
            shutil.rmtree(authorized, ignore_errors=True)

    def _worker_exited(self, returncode):
        # Runs on the thread reading the worker's output (or the constructor, for a worker that
        # died while it was being set up: whichever comes first reports). Reporting first, so
        # that the group can say why the replica was replaced; then an exit Ray counts as a
        # failure (an intentional ray.actor.exit_actor() would not be restarted).
        if not self._exit_reported.acquire(blocking=False):
            return
        try:
            ray.get(self.ledger.exited.remote(self.spec.replica, self.incarnation, returncode,
                                              self.worker.tail(40)), timeout=30)
        except Exception:  # the ledger is gone: the group is being torn down
            pass
        print(f"hotswap.ray: replica {self.spec.replica}'s worker (pid {self.worker.pid}) exited "
              f"with {returncode}; its actor exits for Ray to restart it", flush=True)
        os._exit(1)

    def info(self):
        return {"replica": self.spec.replica, "incarnation": self.incarnation,
                "restarted": self.restarted, "node_id": self.node_id, "node_ip": self.node_ip,
                "endpoint": self.worker.endpoint, "http_url": self.worker.http_url,
                "pid": self.worker.pid, "devices": self.devices, "gpu_ids": self.gpu_ids,
                "data_parallel_rank": self.spec.replica,
                "data_parallel_size": self.spec.replicas,
                "tensor_parallel_size": self.spec.tensor_parallel_size,
                "started_at": self.started_at}

    def health(self, timeout=5.0):
        """info() and the worker's own `health` answer (status ok, dirty or failed)."""
        result = self.info()
        try:
            client = HotswapWeightSyncClient(self.worker.endpoint, timeout=timeout,
                                             curve=self.spec.keys.client_curve())
            result["health"] = client.call("health")
            result["status"] = result["health"].get("status", "unknown")
        except Exception as error:  # noqa: BLE001  (any failure to answer is "unreachable")
            result["status"] = "unreachable"
            result["error"] = f"{type(error).__name__}: {error}"
        return result

    def log_tail(self, lines=100):
        return self.worker.tail(lines)

    def kill_worker(self):
        """A fault drill: SIGKILL the worker (its ranks die with it), as a crash would; this
        actor then reports the exit and is restarted. The killed pid."""
        pid = self.worker.pid
        os.kill(pid, signal.SIGKILL)
        # Reaped before this returns, so that whoever asks next sees it gone; the thread reading
        # its output takes this actor down in a moment.
        self.worker.process.wait(timeout=30)
        return pid

    def serving(self):
        """Whether the worker process is still running (a worker just killed may not have
        been reported to the ledger yet)."""
        return self.worker.process.poll() is None

    def stop(self):
        """Stops the worker (SIGTERM: it stops its ranks and sweeps shared memory of trainers that
        are gone) without this counting as a failure; its exit status."""
        self.worker.on_exit = None
        return self.worker.stop()
