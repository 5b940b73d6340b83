"""WorkerGroup: data-parallel replicas of hotswap-worker placed, watched and restarted by Ray.

One placement group with one bundle per replica (its tensor-parallel ranks' resources, on one
node: vLLM's rule), replicas spread or packed across nodes; one ReplicaActor per bundle starts
that replica's worker as data-parallel rank i of N (bundle order, as vLLM numbers its Ray
data-parallel engines). A worker that dies is reported to the group's ledger and restarted
through Ray's actor restarts; `replaced(connection)` names the replicas a trainer must take into
its next init_weight_transfer_engine.
"""

import os
import time
import uuid

import ray
from ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                            PlacementGroupSchedulingStrategy)

from ..client import DEFAULT_TIMEOUT_S
from .connection import GroupConnection, GroupKeys
from .group_ledger import GroupLedger
from .placement import actor_options, bundle_for, release, reserve
from .replica_actor import ReplicaActor, ReplicaSpec

# Flags the group sets itself for every replica; refused in worker_args, as hotswap-launch does.
GROUP_FLAGS = ("--control", "--data-parallel-rank", "--data-parallel-size",
               "--tensor-parallel-size", "--tensor-parallel-rank", "--device",
               "--curve-secret-key-file", "--curve-authorized-keys", "--curve-allow-any-client",
               "--http-host", "--http-port", "--api-key", "--weight-transfer-config", "--model")

# The group's own actors drive workers and never load the trainer SDK (hotswap/__init__.py).
CLIENT_ONLY = {"env_vars": {"HOTSWAP_CLIENT_ONLY": "1"}}


class WorkerGroup:
    """`replicas` hotswap-workers of `model` (a checkpoint directory every node sees), each of
    `tensor_parallel_size` ranks with `resources_per_rank` each ({"GPU": 1}, or {"CPU": n} for
    the CPU planes), placed "spread" (distinct nodes where possible) or "pack" (strict_spread
    and strict_pack refuse otherwise). `http=True` serves vLLM's HTTP routes on each node's
    address behind the group's API key. `max_restarts` is Ray's, per replica (-1: always).

    Raises PlacementError within `placement_timeout` seconds (at once when the cluster as it is
    can never hold the group; `fail_fast=False` waits instead, for a cluster that autoscales),
    RuntimeError naming the replica and its log when a worker does not become ready within
    `ready_timeout`; nothing of the group is left behind then.
    """

    def __init__(self, model, replicas, tensor_parallel_size=1, weight_transfer_config=None,
                 worker_args=(), resources_per_rank=None, placement="spread", http=False,
                 binary="hotswap-worker", max_restarts=3, ready_timeout=DEFAULT_TIMEOUT_S,
                 placement_timeout=60.0, fail_fast=True, env=None, name=None):
        if not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be a positive int, not {replicas!r}")
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be a positive int, not "
                             f"{tensor_parallel_size!r}")
        worker_args = tuple(str(a) for a in worker_args)
        refused = [a for a in worker_args if a.split("=", 1)[0] in GROUP_FLAGS]
        if refused:
            raise ValueError(f"worker_args {refused} set what the group sets for every replica "
                             f"(its address, ranks, devices, keys, model); leave them out")
        if os.sep in binary:  # a path, the same on every node: not relative to an actor's cwd
            binary = os.path.abspath(binary)
        resources_per_rank = dict(resources_per_rank or {"GPU": 1})
        if weight_transfer_config is None:
            weight_transfer_config = {"backend": "nccl" if resources_per_rank.get("GPU")
                                      else "gloo"}
        self.name = name or f"hotswap-{uuid.uuid4().hex[:8]}"
        self.replicas = replicas
        self.tensor_parallel_size = tensor_parallel_size
        self.keys = GroupKeys.generate()
        self.ready_timeout = ready_timeout
        self._actors = []
        self._ledger = None
        self._placement_group = None
        self._closed = False
        bundle = bundle_for(resources_per_rank, tensor_parallel_size)
        self._placement_group = reserve(
            f"WorkerGroup {self.name} ({replicas} replica(s) x {tensor_parallel_size} rank(s))",
            [bundle] * replicas, placement, placement_timeout, fail_fast)
        try:
            # The ledger lives on the driver's node: the group ends with the driver anyway, and
            # a worker node that dies then takes only its replicas with it.
            ledger_name = f"{self.name}-ledger"
            self._ledger = ray.remote(num_cpus=0, max_restarts=0)(GroupLedger).options(
                name=ledger_name, runtime_env=CLIENT_ONLY,
                scheduling_strategy=NodeAffinitySchedulingStrategy(
                    ray.get_runtime_context().get_node_id(), soft=False)).remote(replicas)
            remote_replica = ray.remote(ReplicaActor)
            for i in range(replicas):
                spec = ReplicaSpec(self.name, i, replicas, str(model), binary,
                                   tensor_parallel_size, dict(weight_transfer_config),
                                   worker_args, bool(resources_per_rank.get("GPU")), http,
                                   self.keys, ready_timeout, dict(env or {}))
                self._actors.append(remote_replica.options(
                    **actor_options(bundle), max_restarts=max_restarts, max_task_retries=0,
                    runtime_env=CLIENT_ONLY,
                    name=f"{self.name}-replica-{i}",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self._placement_group, placement_group_bundle_index=i)).remote(
                            spec, ledger_name))
            # Past the actors' own ready_timeout (and a retry on other ports), so that a worker
            # that never became ready is reported by its actor, with its log.
            self._gather(lambda a: a.info.remote(), 2 * ready_timeout + 60, "become ready")
        except BaseException:
            self.shutdown()
            raise

    def _gather(self, call, timeout, doing):
        """call(actor) on every replica's actor; their answers, or RuntimeError naming the
        first replica that failed (its worker's log is in Ray's error) or did not answer."""
        refs = [call(a) for a in self._actors]
        answers = []
        deadline = time.monotonic() + timeout
        for i, ref in enumerate(refs):
            try:
                answers.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(f"WorkerGroup {self.name}: replica {i} did not {doing} within "
                                   f"{timeout:g} s") from None
            except ray.exceptions.RayError as error:
                raise RuntimeError(f"WorkerGroup {self.name}: replica {i} did not {doing}: "
                                   f"{error}") from None
        return answers

    def _ledger_call(self, method):
        try:
            return ray.get(getattr(self._ledger, method).remote(), timeout=60)
        except ray.exceptions.RayError as error:
            raise RuntimeError(f"WorkerGroup {self.name}: its ledger (an actor on the driver's "
                               f"node) did not answer {method}(): {error}") from None

    # --- What a trainer needs -------------------------------------------------------------

    def infos(self):
        """Each replica's worker as it last became ready: node, endpoint, HTTP URL, pid, devices
        (cuda:0..T-1, or cpu) and gpu_ids (the node's), data-parallel rank, incarnation; None
        for a replica being restarted."""
        return self._ledger_call("snapshot")["current"]

    def endpoints(self):
        """Every replica's control endpoint, in data-parallel rank order (a replica being
        restarted raises: wait_ready() first)."""
        return list(self.connection().endpoints)

    def connection(self):
        """A GroupConnection to every replica as it is now: plain data for any trainer rank,
        with the workers it reaches (replaced(connection) tells when they change)."""
        infos = self.infos()
        down = [i for i, info in enumerate(infos) if info is None]
        if down:
            raise RuntimeError(f"WorkerGroup {self.name}: replica(s) {down} are being restarted; "
                               "wait_ready() first")
        return GroupConnection(tuple(i["endpoint"] for i in infos),
                               tuple(i["http_url"] for i in infos),
                               tuple(i["incarnation"] for i in infos), self.tensor_parallel_size,
                               self.keys.client_curve(), self.keys.api_key)

    def client(self, kind="cpp", timeout=DEFAULT_TIMEOUT_S):
        """The fan-out client over every replica: "cpp" (hotswap.FanOutClient) or "python"
        (hotswap.HotswapFanOutClient)."""
        return self.connection().client(kind, timeout)

    def get_world_size(self, include_dp=True):
        """vLLM's get_world_size for the group as one engine: tensor-parallel ranks, times the
        replicas with include_dp."""
        return self.tensor_parallel_size * (self.replicas if include_dp else 1)

    # --- Failures -------------------------------------------------------------------------

    def replaced(self, connection):
        """Replicas whose worker is not the one `connection` reached (restarted, or being
        restarted): they left the trainer's transfer group, so its next
        init_weight_transfer_engine must be with a new connection() and take them in."""
        infos = self.infos()
        return [i for i, info in enumerate(infos)
                if info is None or info["incarnation"] != connection.incarnations[i]]

    def wait_ready(self, timeout=None, connection=None):
        """Waits until every replica serves (a restarted one included); returns
        replaced(connection), or [] without one. RuntimeError names a replica whose actor is
        dead for good (restarts used up, or its worker failed to start again); TimeoutError
        one still restarting at the timeout."""
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            snapshot = self._ledger_call("snapshot")
            down = [i for i, info in enumerate(snapshot["current"]) if info is None]
            # A worker killed a moment ago may not be in the ledger yet: ask each actor.
            up = [i for i in range(self.replicas) if i not in down]
            serving = [self._actors[i].serving.remote() for i in up]
            for i, ref in zip(up, serving):
                try:
                    if not ray.get(ref, timeout=10):
                        down.append(i)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                    down.append(i)  # restarting, or gone for good: the probe below tells
            for i in down:
                try:  # restarting: ActorUnavailableError (or a wait); gone for good: ActorDiedError
                    ray.get(self._actors[i].info.remote(), timeout=0.5)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                    pass
                except ray.exceptions.ActorDiedError as error:
                    exits = snapshot["exits"][i]
                    last = (f"; its worker last exited with {exits[-1]['returncode']}"
                            if exits else "")
                    raise RuntimeError(f"WorkerGroup {self.name}: replica {i} is gone for good "
                                       f"after {len(exits)} restart(s){last}: {error}") from None
            if not down:
                return [] if connection is None else self.replaced(connection)
            if time.monotonic() > deadline:
                raise TimeoutError(f"WorkerGroup {self.name}: replica(s) {down} did not serve "
                                   f"again within {timeout:g} s")
            time.sleep(0.2)

    def health(self, timeout=5.0):
        """Per replica: its info, `status` (the worker's health status ok/dirty/failed, or
        "restarting", "unreachable", "dead") and `restarts` (worker exits seen so far)."""
        snapshot = self._ledger_call("snapshot")
        refs = [a.health.remote(timeout) for a in self._actors]
        out = []
        for i, ref in enumerate(refs):
            try:
                report = ray.get(ref, timeout=timeout + 5)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                report = {"replica": i, "status": "restarting"}
            except ray.exceptions.RayActorError as error:
                report = {"replica": i, "status": "dead", "error": str(error).splitlines()[0]}
            report["restarts"] = len(snapshot["exits"][i])
            out.append(report)
        return out

    def kill_worker(self, replica):
        """A fault drill: kills replica `replica`'s worker with SIGKILL on its node, as a crash
        would, to rehearse a trainer's recovery (the group reports it and Ray restarts it).
        Returns the killed pid."""
        info = self.infos()[replica]
        if info is None:
            raise RuntimeError(f"WorkerGroup {self.name}: replica {replica} is being restarted")
        try:
            ray.get(self._actors[replica].kill_worker.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            pass  # the actor saw its worker die and exited before it could answer: as meant
        return info["pid"]

    def events(self):
        """Every ready and exit the replicas reported, in order (exits carry the worker's
        return code and last log lines)."""
        return self._ledger_call("history")

    def log_tail(self, replica, lines=100):
        return ray.get(self._actors[replica].log_tail.remote(lines), timeout=60)

    # --- Teardown -------------------------------------------------------------------------

    def shutdown(self, timeout=30.0):
        """Stops every worker (SIGTERM: each stops its ranks and sweeps shared memory of trainers
        that are gone), then removes the actors, the ledger and the placement group. Idempotent.
        A driver that dies without calling it leaves nothing either: Ray removes a job's actors
        and placement groups, and each worker dies with its actor."""
        if self._closed:
            return
        self._closed = True
        release(self._actors, self._placement_group, lambda a: a.stop.remote(), timeout)
        if self._ledger is not None:
            ray.kill(self._ledger, no_restart=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
