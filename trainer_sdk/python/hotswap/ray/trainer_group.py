"""TrainerGroup: trainer ranks as Ray actors, for the many-sender layout (trainer_ranks=N).

Each rank is an actor in one placement group (one bundle per rank) that builds the user's
trainer object as `trainer_class(context, *args, **kwargs)`; the TrainerContext says the rank,
the number of ranks, and the rendezvous every rank agrees on: rank 0's node address as
master_address and a port free there.

    class Trainer:
        def __init__(self, context, connection):
            self.context, self.client = context, connection.client()
            info = context.init_info("gloo", connection.inference_world_size())
            self.engine = hotswap.WeightTransferTrainerFactory.trainer_init(
                info, client=self.client, source=self.model)
        def step(self, n):
            ...  # train
            self.engine.push(weight_version=f"step-{n}", verify=True)

    trainers = TrainerGroup(Trainer, ranks=2, args=(workers.connection(),))
    trainers.run("step", 1)
"""

import dataclasses
import os
import subprocess
import sys
import time

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..client import DEFAULT_TIMEOUT_S
from ..worker_process import free_port
from .placement import actor_options, bundle_for, release, reserve

_INIT_INFOS = {"gloo": "GlooTrainerInitInfo", "nccl": "NcclTrainerInitInfo",
               "sparse_gloo": "SparseGlooTrainerInitInfo",
               "sparse_nccl": "SparseNcclTrainerInitInfo"}


@dataclasses.dataclass(frozen=True)
class TrainerContext:
    """Where one trainer rank stands: its rank among `trainer_ranks`, its node, and the group's
    rendezvous (`master_address`: rank 0's node address; `master_port`: free there)."""

    rank: int
    trainer_ranks: int
    master_address: str
    master_port: int
    node_id: str
    node_ip: str

    def init_info(self, backend, inference_world_size, master_port=None, **options):
        """The trainer init info of a broadcasting backend for this rank: world_size is every
        trainer rank plus `inference_world_size` (GroupConnection.inference_world_size()).
        `master_port` replaces the group's first one, for a new rendezvous (TrainerGroup's
        free_port()); `options` go to the init info (timeout=, device=, ...)."""
        import hotswap

        if backend not in _INIT_INFOS:
            raise ValueError(f"TrainerContext.init_info takes {sorted(_INIT_INFOS)}, not "
                             f"{backend!r} (shm and ipc stay on one host; disk needs no "
                             "rendezvous)")
        if self.trainer_ranks > 1:
            if backend.startswith("sparse_"):
                raise ValueError(f"{backend} takes one broadcasting trainer rank; this group has "
                                 f"{self.trainer_ranks} (gloo and nccl take several)")
            options["trainer_ranks"] = self.trainer_ranks
        return getattr(hotswap, _INIT_INFOS[backend])(
            self.master_address, self.master_port if master_port is None else master_port,
            self.trainer_ranks + inference_world_size, rank=self.rank, **options)


# Removes a trainer rank's shared memory once its process is gone, however it went. A trainer's
# shm engines and arenas name their segments /hotswap-<pid>-... (shm_trainer_engine.cpp,
# shared_weight_arena.cpp) and unlink them when they close; a rank killed with its driver never
# closes them, and the workers that would sweep them are killed at the same moment. Ray kills a
# dead worker's child processes too, so the janitor leaves the rank's process tree (a second
# fork, a session of its own) and waits on a pidfd of the rank's process.
_JANITOR = """
import glob, os, select, sys, time
rank = int(sys.argv[1])
if os.fork():
    os._exit(0)
os.setsid()
try:
    select.select([os.pidfd_open(rank)], [], [])  # readable once the rank's process is gone
except OSError:  # a kernel without pidfds, or the rank is gone already
    while os.path.exists(f"/proc/{rank}"):
        time.sleep(1)
for path in glob.glob(f"/dev/shm/hotswap-{rank}-*"):
    try:
        os.unlink(path)
    except OSError:
        pass
"""


class TrainerRank:
    """The actor behind one trainer rank: it holds the user's trainer object."""

    def __init__(self):
        self.trainer = None
        subprocess.run([sys.executable, "-c", _JANITOR, str(os.getpid())], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=60)

    def where(self):
        # The node's address as Ray knows it (its raylet's), as ReplicaActor binds workers to.
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def free_port(self):
        return free_port(ray.util.get_node_ip_address())

    def setup(self, trainer_class, context, args, kwargs):
        self.trainer = trainer_class(context, *args, **kwargs)

    def call(self, method, args, kwargs):
        return getattr(self.trainer, method)(*args, **kwargs)

    def close(self):
        """The trainer's own shutdown()/close(), if it has one (its engines close there: shm
        segments unlinked, groups left)."""
        for name in ("shutdown", "close"):
            if self.trainer is not None and hasattr(self.trainer, name):
                getattr(self.trainer, name)()
                return


class TrainerGroup:
    """`ranks` actors, each with `resources_per_rank` (default {"CPU": 1}), placed "pack" (as
    few nodes as possible) or "spread", each building `trainer_class(context, *args,
    **kwargs)`. run() calls a method on every rank at once."""

    def __init__(self, trainer_class, ranks=1, *, args=(), kwargs=None, resources_per_rank=None,
                 placement="pack", placement_timeout=60.0, fail_fast=True,
                 setup_timeout=DEFAULT_TIMEOUT_S):
        if not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"ranks must be a positive int, not {ranks!r}")
        self.ranks = ranks
        self._actors = []
        self._closed = False
        bundle = bundle_for(dict(resources_per_rank or {"CPU": 1}), 1)
        self._placement_group = reserve(f"TrainerGroup of {ranks} rank(s)", [bundle] * ranks,
                                        placement, placement_timeout, fail_fast)
        try:
            remote_rank = ray.remote(TrainerRank)
            self._actors = [remote_rank.options(
                **actor_options(bundle), max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._placement_group, placement_group_bundle_index=r)).remote()
                for r in range(ranks)]
            where = ray.get([a.where.remote() for a in self._actors], timeout=setup_timeout)
            self.master_address = where[0][1]
            master_port = ray.get(self._actors[0].free_port.remote(), timeout=60)
            self.contexts = [TrainerContext(r, ranks, self.master_address, master_port, *where[r])
                             for r in range(ranks)]
            kwargs = dict(kwargs or {})
            self._wait([a.setup.remote(trainer_class, c, tuple(args), kwargs)
                        for a, c in zip(self._actors, self.contexts)], setup_timeout)
        except BaseException:
            self.shutdown()
            raise

    def free_port(self):
        """A port free now on rank 0's node: the master_port of a new rendezvous (a new
        init_weight_transfer_engine after replicas were replaced)."""
        return ray.get(self._actors[0].free_port.remote(), timeout=60)

    def run(self, method, *args, timeout=None, **kwargs):
        """trainer.method(*args, **kwargs) on every rank at once; their results by rank. The
        first rank to fail raises at once (its exception's own kind), without waiting for the
        others, whose calls end by their own timeouts."""
        return self._wait([a.call.remote(method, args, kwargs) for a in self._actors], timeout)

    @staticmethod
    def _wait(refs, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = list(refs)
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                raise TimeoutError(f"{len(pending)} trainer rank(s) did not answer within "
                                   f"{timeout:g} s")
            ray.get(done[0])  # raises the rank's own exception
        return ray.get(refs)

    def shutdown(self, timeout=60.0):
        """Each trainer's shutdown()/close(), then the actors and the placement group go.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        release(self._actors, self._placement_group, lambda a: a.close.remote(), timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
