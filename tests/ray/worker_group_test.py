"""hotswap.ray on a simulated three-node Ray cluster (ray.cluster_utils.Cluster: three raylets on
this machine, each with resources of its own).

- Two replicas of two tensor-parallel ranks each, placed "spread", land on distinct nodes (by
  node id), bound to their node's address with the group's CURVE keys (a client without them
  gets no answer) and the group's API key on HTTP (401 without it).
- A trainer actor on the third node pushes verified gloo rounds into every replica, through the
  C++ fan-out client and the pure-Python one.
- kill -9 of one replica's worker: the group reports the exit, the actor is restarted by Ray,
  wait_ready(connection=...) names the replaced replica, and the trainer's next init and round
  verify.
- Two trainer ranks (trainer_ranks=2) as actors: master_address is rank 0's node address.
- A group that cannot be placed fails at once naming what is missing; one whose resources are
  taken fails within its placement_timeout; a worker that cannot start names its replica.
- shutdown() leaves no hotswap process or shared-memory segment (a shm trainer killed first
  included); nor does a driver killed with SIGKILL while its shm trainer holds segments.
- Everything stays on loopback: the nodes are at 127.0.0.1, and every endpoint, HTTP URL and
  node address a group reports, and a trainer group's master_address, is in 127.0.0.0/8.

Usage: worker_group_test.py WORKER MAKE_MODEL
Skips (exit 77), saying why, where Ray cannot be imported.
"""

import glob
import ipaddress
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request

# Every node of the simulated cluster is at LOOPBACK (Cluster's node_ip_address), so every
# replica and trainer rank, which bind their node's address, stays on this machine's loopback.
# ray.init replaces a loopback address it is given (the cluster's, its _node_ip_address) by
# services.get_node_ip_address() (ray/_private/services.py, resolve_ip_for_localhost), which is
# this machine's interface address, where nodes started at 127.0.0.1 do not listen; with
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 that answer is 127.0.0.1 instead, and the address is kept.
# Read once, when ray is imported: set before, and inherited by check_driver_death's driver and
# by the nodes' processes (where Ray's own node address takes precedence anyway).
LOOPBACK = "127.0.0.1"
LOOPBACK_NETWORK = ipaddress.ip_network("127.0.0.0/8")
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError as error:
    print(f"skipped: Ray cannot be imported ({error}); scripts/install-deps.sh installs it")
    sys.exit(77)

import hotswap
import hotswap.ray

TIMEOUT = 60
# Each simulated node's object store: nothing large goes through it, and three of the default
# size (30 % of memory each) would not fit a container's /dev/shm.
OBJECT_STORE = 128 << 20


class Trainer:
    """One trainer rank: every rank holds the whole checkpoint and steps it the same way, so
    that a parameter is the same whichever rank broadcasts it."""

    def __init__(self, context, model):
        import hotswap

        self.context = context
        self.tensors = hotswap.load_checkpoint(model)
        self.engine = None

    def connect(self, connection, master_port=None, kind="cpp", backend="gloo"):
        """A new transfer group with every replica of `connection` (after a replacement too)."""
        import hotswap

        self.shutdown()
        if backend == "shm":  # replicas on this rank's node
            info = hotswap.ShmTrainerInitInfo(connection.inference_world_size(), rank=0,
                                              timeout=TIMEOUT)
        else:
            info = self.context.init_info(backend, connection.inference_world_size(),
                                          master_port=master_port, timeout=TIMEOUT)
        source = hotswap.TensorListSource(list(self.tensors.items()))
        self.engine = hotswap.WeightTransferTrainerFactory.trainer_init(
            info, client=connection.client(kind, timeout=TIMEOUT), source=source)
        return self.context.node_id

    def push(self, version):
        for tensor in self.tensors.values():
            tensor += 0.01
        self.engine.push(weight_version=version, verify=True)
        return version

    def pid(self):
        return os.getpid()

    def shutdown(self):
        if self.engine is not None:
            try:
                self.engine.shutdown()
            except Exception as error:  # a replaced worker never knew the old group
                print(f"trainer rank {self.context.rank}: closing the old group: {error}")
            self.engine = None


def served_versions(workers):
    client = workers.client("python", timeout=TIMEOUT)
    return [reply["weight_version"] for reply in client.call("weight_info")]


def on_loopback(address):
    """Whether `address` (tcp://HOST:PORT, http://HOST:PORT, HOST:PORT or HOST) is in
    127.0.0.0/8."""
    if "://" in address:
        host = urllib.parse.urlsplit(address).hostname
    else:
        host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    try:
        return ipaddress.ip_address(host) in LOOPBACK_NETWORK
    except ValueError:  # a host name, or nothing: not an address on loopback
        return False


def check_loopback(group):
    """Every address `group` reports, by endpoints(), infos() and connection(), is on
    loopback."""
    connection = group.connection()
    addresses = [*group.endpoints(), *connection.endpoints, *connection.http_urls]
    for info in group.infos():
        addresses += [info["node_ip"], info["endpoint"], info["http_url"]]
    off = [a for a in addresses if a is not None and not on_loopback(a)]
    assert not off, f"WorkerGroup {group.name} reports addresses off loopback: {off}"


def check_trainers_loopback(trainers):
    """A trainer group's rendezvous (master_address) and its ranks' nodes are on loopback."""
    addresses = [trainers.master_address] + [c.master_address for c in trainers.contexts] + \
        [c.node_ip for c in trainers.contexts]
    off = [a for a in addresses if not on_loopback(a)]
    assert not off, f"TrainerGroup addresses off loopback: {off}"


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def workers_of(model):
    """pids of hotswap-worker processes serving `model` (rank processes included)."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"hotswap-worker") and model.encode() in args:
            found.append(int(cmdline.split("/")[2]))
    return found


def check_placement_failures(model, worker):
    start = time.monotonic()
    try:
        hotswap.ray.WorkerGroup(model, replicas=2, resources_per_rank={"GPU": 1}, binary=worker)
        raise AssertionError("a group needing GPUs was placed on a cluster without any")
    except hotswap.ray.PlacementError as error:
        message = str(error)
    assert time.monotonic() - start < 10, "an infeasible group took long to refuse"
    assert "2 GPU in all (the cluster has 0)" in message, message
    print(f"infeasible group refused: {message[:160]}...")

    # Feasible in principle, but the resources are taken: a bounded wait, then what is free.
    blocker = ray.util.placement_group([{"inference": 1}] * 2, strategy="SPREAD")
    ray.get(blocker.ready(), timeout=TIMEOUT)
    try:
        start = time.monotonic()
        hotswap.ray.WorkerGroup(model, replicas=1, resources_per_rank={"CPU": 1, "inference": 1},
                                binary=worker, placement_timeout=2)
        raise AssertionError("a group was placed on taken resources")
    except hotswap.ray.PlacementError as error:
        elapsed = time.monotonic() - start
        assert 2 <= elapsed < 15, elapsed
        assert "not placed within 2 s" in str(error) and "free now" in str(error), str(error)
    finally:
        ray.util.remove_placement_group(blocker)

    try:
        hotswap.ray.WorkerGroup(model, replicas=1, resources_per_rank={"CPU": 1},
                                worker_args=["--control", "tcp://0.0.0.0:5555"], binary=worker)
        raise AssertionError("worker_args setting --control were accepted")
    except ValueError as error:
        assert "--control" in str(error), str(error)

    try:
        hotswap.ray.WorkerGroup(model + "-missing", replicas=1, resources_per_rank={"CPU": 1},
                                binary=worker, max_restarts=0, ready_timeout=TIMEOUT)
        raise AssertionError("a worker without a model became ready")
    except RuntimeError as error:
        assert "replica 0" in str(error) and "did not become ready" in str(error), str(error)
    print("placement and start failures: named, bounded, nothing left reserved")


def check_security(workers):
    connection = workers.connection()
    # No secret in a repr; no key left on disk (the secret one never was: a pipe).
    shown = repr(connection) + repr(workers.keys)
    for secret in (workers.keys.server_secret, workers.keys.client_secret, connection.api_key):
        assert secret not in shown, "a repr shows a secret"
    left = glob.glob(os.path.join(tempfile.gettempdir(), f"hotswap-keys-{workers.name}-*"))
    assert not left, f"key directories left after the workers were ready: {left}"
    for endpoint in connection.endpoints:
        assert endpoint.startswith("tcp://") and "0.0.0.0" not in endpoint, endpoint
    keyless = hotswap.HotswapWeightSyncClient(connection.endpoints[0], timeout=1.5)
    try:
        keyless.call("health")
        raise AssertionError("a client without the group's CURVE keys was answered")
    except TimeoutError:
        pass
    url = connection.http_urls[0] + "/v1/models"
    try:
        urllib.request.urlopen(url, timeout=TIMEOUT)
        raise AssertionError("/v1/models answered without the group's API key")
    except urllib.error.HTTPError as error:
        assert error.code == 401, error.code
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {connection.api_key}"})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
        assert reply.status == 200
    print("control sockets need the group's CURVE keys, HTTP its API key")


def check_driver_death(address, model, worker):
    """A driver killed with SIGKILL leaves no worker and no segment behind: Ray ends its actors
    (and their children), and a trainer rank's janitor unlinks the rank's shm segments."""
    script = textwrap.dedent(f"""
        import time, ray, hotswap, hotswap.ray
        ray.init(address={address!r}, _node_ip_address={LOOPBACK!r}, log_to_driver=False)
        group = hotswap.ray.WorkerGroup({model!r}, replicas=1, resources_per_rank={{"CPU": 1}},
                                        weight_transfer_config={{"backend": "shm"}},
                                        binary={worker!r})
        class ShmTrainer:
            def __init__(self, context, connection):
                import os
                self.pid = os.getpid()
                source = hotswap.TensorListSource(list(hotswap.load_checkpoint({model!r}).items()))
                self.engine = hotswap.WeightTransferTrainerFactory.trainer_init(
                    hotswap.ShmTrainerInitInfo(1, rank=0, timeout=60),
                    client=connection.client(), source=source)
            def push(self):
                self.engine.push(weight_version="shm-1", verify=True)
                return self.pid
        trainers = hotswap.ray.TrainerGroup(ShmTrainer, args=(group.connection(),))
        print(group.infos()[0]["pid"], trainers.run("push")[0], flush=True)
        time.sleep(600)
        """)
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids), pids
        assert glob.glob(f"/dev/shm/hotswap-{pids[1]}-*"), "the shm trainer made no segment"
    finally:
        driver.kill()
        driver.wait()
    left = wait_gone(pids, 60)
    assert not left, f"a killed driver's worker or trainer is still running: {left}"
    # The trainer's own segments, by the pid in their names: other suites running beside this
    # one (ctest -j) make and remove segments of their own meanwhile.
    trainer_segments = f"/dev/shm/hotswap-{pids[1]}-*"
    deadline = time.monotonic() + 30
    while glob.glob(trainer_segments) and time.monotonic() < deadline:
        time.sleep(0.2)
    segments = glob.glob(trainer_segments)
    assert not segments, f"a killed driver's trainer left {segments}"
    print("a driver killed with SIGKILL left no worker, trainer or segment")


def start_cluster():
    """Three simulated nodes, every one at LOOPBACK, and this driver connected to them: nodes 0
    and 1 can hold inference replicas, node 2 the trainer (a replica or trainer placed elsewhere
    would fail the node checks of main). ray.shutdown() and the cluster's shutdown() end it."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": LOOPBACK, "num_cpus": 3, "resources": {"inference": 1},
        "include_dashboard": False, "object_store_memory": OBJECT_STORE})
    try:
        cluster.add_node(node_ip_address=LOOPBACK, num_cpus=3, resources={"inference": 1},
                         object_store_memory=OBJECT_STORE)
        cluster.add_node(node_ip_address=LOOPBACK, num_cpus=3, resources={"trainer": 1},
                         object_store_memory=OBJECT_STORE)
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False)
        cluster.wait_for_nodes()
        # Ray itself, before any group: every node as the cluster knows it, the address the
        # driver reached it at, and the driver's own node.
        nodes_at = [n["NodeManagerAddress"] for n in ray.nodes()] + \
            [cluster.address, ray.util.get_node_ip_address()]
        assert all(on_loopback(a) for a in nodes_at), f"Ray is not on loopback: {nodes_at}"
    except BaseException:
        ray.shutdown()
        cluster.shutdown()
        raise
    return cluster


def main(worker, make_model):
    tmp = tempfile.mkdtemp(prefix="hotswap-ray-test-")
    model = os.path.join(tmp, "model")
    subprocess.run([make_model, "--arch", "llama", "--layers", "2", "--hidden-size", "64",
                    "--intermediate-size", "96", "--heads", "4", "--kv-heads", "2", "--vocab",
                    "128", "--seed", "3", "--out", model], check=True, stdout=subprocess.DEVNULL)
    segments_before = set(glob.glob("/dev/shm/hotswap-*"))
    segment_creators = []  # this test's processes that made segments (their pids name them)
    cluster = start_cluster()
    try:
        check_placement_failures(model, worker)

        workers = hotswap.ray.WorkerGroup(
            model, replicas=2, tensor_parallel_size=2, placement="spread",
            resources_per_rank={"CPU": 1, "inference": 0.5},
            weight_transfer_config={"backend": "gloo"}, worker_args=["--timeout", str(TIMEOUT)],
            http=True, binary=worker, max_restarts=2, ready_timeout=TIMEOUT)
        trainers = None
        try:
            infos = workers.infos()
            nodes = [i["node_id"] for i in infos]
            assert len(set(nodes)) == 2, f"the replicas share a node: {nodes}"
            assert [i["data_parallel_rank"] for i in infos] == [0, 1]
            assert workers.get_world_size() == 4 and workers.get_world_size(False) == 2
            assert workers.connection().inference_world_size() == 4
            assert all(h["status"] == "ok" for h in workers.health()), workers.health()
            check_loopback(workers)
            # The replicas' actors drive workers with the client alone: no torch (600 MB each).
            loaded = ray.get(workers._actors[0].__ray_call__.remote(
                lambda actor: "torch" in sys.modules), timeout=TIMEOUT)
            assert not loaded, "a replica's actor imported torch"
            check_security(workers)

            trainers = hotswap.ray.TrainerGroup(Trainer, ranks=1, args=(model,),
                                                resources_per_rank={"CPU": 1, "trainer": 1})
            check_trainers_loopback(trainers)
            trainer_node = trainers.run("connect", workers.connection())[0]
            assert trainer_node not in nodes, "the trainer shares a node with a replica"
            trainers.run("push", "round-1", timeout=120)
            assert served_versions(workers) == ["round-1"] * 2
            pushed = workers.connection()
            trainers.run("connect", pushed, trainers.free_port(), "python")
            trainers.run("push", "round-2", timeout=120)
            assert served_versions(workers) == ["round-2"] * 2
            print("a trainer on a third node pushed verified rounds into both replicas "
                  "(C++ and Python fan-out clients)")

            victim = infos[1]
            os.kill(victim["pid"], signal.SIGKILL)
            # Once the worker is reaped, its actor has seen the exit (a wait_ready() sooner
            # could still find the dying worker running).
            assert not wait_gone([victim["pid"]], 30)
            start = time.monotonic()
            replaced = workers.wait_ready(timeout=120, connection=pushed)
            back = time.monotonic() - start
            assert replaced == [1], replaced
            exits = [e for e in workers.events() if e["event"] == "exited"]
            assert len(exits) == 1 and exits[0]["replica"] == 1, exits
            assert exits[0]["returncode"] == -signal.SIGKILL, exits[0]
            now = workers.infos()[1]
            assert now["pid"] != victim["pid"] and now["restarted"], now
            # Back on the same node, it took the same ports: clients made before still reach it.
            assert (now["endpoint"], now["http_url"]) == (victim["endpoint"], victim["http_url"])
            assert workers.health()[1]["restarts"] == 1
            check_loopback(workers)
            # The restarted worker serves the checkpoint again: the next init takes it in.
            assert served_versions(workers)[1] != "round-2"
            connection = workers.connection()
            trainers.run("connect", connection, trainers.free_port())
            assert workers.replaced(connection) == [] and workers.replaced(pushed) == [1]
            trainers.run("push", "round-3", timeout=120)
            assert served_versions(workers) == ["round-3"] * 2
            print(f"kill -9 of replica 1's worker: reported, restarted by Ray, serving again "
                  f"after {back:.1f} s; the next init and round verified")
            trainers.shutdown()

            # The many-sender layout: two trainer ranks, rank 0's node is the rendezvous.
            trainers = hotswap.ray.TrainerGroup(Trainer, ranks=2, args=(model,),
                                                resources_per_rank={"CPU": 1}, placement="spread")
            assert trainers.master_address == trainers.contexts[0].node_ip
            check_trainers_loopback(trainers)
            trainers.run("connect", workers.connection())
            trainers.run("push", "round-4", timeout=120)
            trainers.run("push", "round-5", timeout=120)
            assert served_versions(workers) == ["round-5"] * 2
            print("two trainer ranks as actors (trainer_ranks=2) pushed verified rounds")
            trainers.shutdown()

            # shm, on one node: a trainer killed with SIGKILL leaves its segments to the worker's
            # sweep, and the group's shutdown leaves none either.
            trainers = hotswap.ray.TrainerGroup(Trainer, ranks=1, args=(model,),
                                                resources_per_rank={"CPU": 1, "trainer": 0.5})
            local = hotswap.ray.WorkerGroup(
                model, replicas=1, resources_per_rank={"CPU": 1, "trainer": 0.5},
                weight_transfer_config={"backend": "shm"}, binary=worker, ready_timeout=TIMEOUT)
            try:
                check_loopback(local)
                check_trainers_loopback(trainers)
                trainers.run("connect", local.connection(), None, "cpp", "shm")
                trainers.run("push", "shm-1", timeout=120)
                assert glob.glob("/dev/shm/hotswap-*"), "the shm trainer made no segment"
                shm_trainer = trainers.run("pid")[0]
                segment_creators.append(shm_trainer)
                os.kill(shm_trainer, signal.SIGKILL)
                pids = [local.infos()[0]["pid"]]
            finally:
                local.shutdown()
            assert not wait_gone(pids, 30)
            print("a shm trainer killed, then its group shut down: no segment left")

            # A replica with no restarts left: the fault drill kills it for good, and the group
            # names it instead of waiting.
            once = hotswap.ray.WorkerGroup(model, replicas=1, resources_per_rank={"CPU": 1},
                                           weight_transfer_config={"backend": "gloo"},
                                           binary=worker, max_restarts=0, ready_timeout=TIMEOUT)
            try:
                check_loopback(once)
                pid = once.kill_worker(0)
                assert not wait_gone([pid], 30)
                try:
                    once.wait_ready(timeout=30)
                    raise AssertionError("a replica without restarts came back")
                except RuntimeError as error:
                    assert "gone for good" in str(error) and "-9" in str(error), str(error)
                assert once.health()[0]["status"] == "dead", once.health()
            finally:
                once.shutdown()
            print("a replica out of restarts: wait_ready names it, health says dead")
            print("every group's endpoints, HTTP URLs and nodes, and every trainer group's "
                  "master_address, on loopback")
        finally:
            pids = [i["pid"] for i in workers.infos() if i is not None]
            if trainers is not None:
                trainers.shutdown()
            workers.shutdown()
        left = wait_gone(pids, 30) + workers_of(model)
        assert not left, f"hotswap processes left after shutdown: {left}"
        # Only this test's: suites running beside it (ctest -j) make and remove segments of
        # their own meanwhile, each named by its creator's pid.
        segments = {s for s in set(glob.glob("/dev/shm/hotswap-*")) - segments_before
                    if any(s.startswith(f"/dev/shm/hotswap-{pid}-")
                           for pid in segment_creators + pids)}
        assert not segments, f"segments left after shutdown: {segments}"
        print("shutdown left no hotswap process or segment")

        check_driver_death(cluster.address, model, worker)
        assert not workers_of(model), workers_of(model)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("hotswap.ray on a simulated three-node cluster: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
