"""hotswap.ray against its single-host peers, on a simulated three-node Ray cluster
(ray.cluster_utils.Cluster on this machine), every figure in the same run, repetitions
interleaved:

- start: WorkerGroup(...) until every replica is ready, against `hotswap-launch` starting the
  same workers on one node until it prints their endpoints;
- restart: a replica whose worker was killed (SIGKILL) until the group serves again, against
  hotswap-launch starting one worker;
- push: a verified gloo push from a trainer actor into replicas spread over 3 nodes, against the
  same push into as many replicas packed on one node.

A figure is the median of its repetitions, printed with its range and the peer's.

Every simulated node is at 127.0.0.1: Ray, the workers, hotswap-launch and the trainer stay on
loopback.

Usage: PYTHONPATH=build/python python3 bench/ray_group_bench.py BUILD_DIR [--reps N]
       [--push-reps N] [--replicas N] [--json]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# The simulated nodes are at LOOPBACK (Cluster's node_ip_address), where the replicas and the
# trainer bind. ray.init would replace a loopback address by this machine's interface address
# (ray/_private/services.py, resolve_ip_for_localhost), where those nodes do not listen, but for
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read when ray is imported.
LOOPBACK = "127.0.0.1"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import hotswap  # noqa: E402
import hotswap.ray  # noqa: E402


class PushTrainer:
    """One trainer rank with an engine into each of two groups, pushing the checkpoint's
    tensors (stepped before each round, so that every round moves new values)."""

    def __init__(self, context, model):
        self.context = context
        self.tensors = hotswap.load_checkpoint(model)
        self.engines = {}

    def connect(self, name, connection, master_port):
        info = self.context.init_info("gloo", connection.inference_world_size(),
                                      master_port=master_port, timeout=300)
        self.engines[name] = hotswap.WeightTransferTrainerFactory.trainer_init(
            info, client=connection.client("cpp", timeout=300),
            source=hotswap.TensorListSource(list(self.tensors.items())))

    def push(self, name, version):
        for tensor in self.tensors.values():
            tensor += 0.001
        start = time.perf_counter()
        self.engines[name].push(weight_version=version, verify=True)
        return time.perf_counter() - start

    def shutdown(self):
        for engine in self.engines.values():
            engine.shutdown()


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def report(args, measure, values, peer, ratio_name, extra=None):
    figure, limit = spread(values), spread(peer)
    ratio = figure["median"] / limit["median"]
    line = {"bench": "ray_group", "measure": measure, "value": figure["median"], "unit": "s",
            "spread": figure, "limit": limit, "repetitions": len(values),
            f"ratio_{ratio_name}": ratio, **(extra or {})}
    if not args.json:
        print(f"{measure:<62} {figure['median']:.3f} s ({figure['min']:.3f}-"
              f"{figure['max']:.3f}); peer {limit['median']:.3f} s ({limit['min']:.3f}-"
              f"{limit['max']:.3f}); {ratio_name.replace('_', ' ')} {ratio:.2f}x")
    print(json.dumps(line), flush=True)


def launch_start(launch, model, replicas):
    """Seconds for hotswap-launch to start `replicas` workers on this node and print their
    endpoints; then stops them."""
    start = time.perf_counter()
    process = subprocess.Popen([launch, "--replicas", str(replicas), "--base-port",
                                str(hotswap.free_port()), "--", "--model", model,
                                "--weight-transfer-config", '{"backend": "gloo"}'],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()
        seconds = time.perf_counter() - start
        if '"endpoints"' not in line:
            raise RuntimeError(f"hotswap-launch printed {line!r}, not its endpoints")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", help="the build directory (its worker/ and model_loader/)")
    parser.add_argument("--reps", type=int, default=5, help="start and restart repetitions")
    parser.add_argument("--push-reps", type=int, default=11, help="pushes into each layout")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="JSON lines only")
    args = parser.parse_args()
    worker = os.path.join(args.build, "worker", "hotswap-worker")
    launch = os.path.join(args.build, "worker", "hotswap-launch")
    tmp = tempfile.mkdtemp(prefix="hotswap-ray-bench-")
    model = os.path.join(tmp, "model")
    # 44 M parameters in bfloat16 (88 MB): a push long enough to see the wire in.
    subprocess.run([os.path.join(args.build, "model_loader", "hotswap-make-model"), "--arch",
                    "llama", "--layers", "4", "--hidden-size", "512", "--intermediate-size",
                    "1408", "--heads", "8", "--kv-heads", "4", "--vocab", "32000", "--dtype",
                    "bfloat16", "--seed", "1", "--out", model], check=True,
                   stdout=subprocess.DEVNULL)
    model_bytes = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                      if f.endswith(".safetensors"))

    cpus = args.replicas + 2  # a node holds a packed group, a spread group's replica, a trainer
    store = 128 << 20  # each node's object store: nothing large goes through it
    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": LOOPBACK, "num_cpus": cpus, "include_dashboard": False,
        "object_store_memory": store})
    for _ in range(2):
        cluster.add_node(node_ip_address=LOOPBACK, num_cpus=cpus, object_store_memory=store)
    ray.init(address=cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False)
    cluster.wait_for_nodes()
    common = dict(resources_per_rank={"CPU": 1}, weight_transfer_config={"backend": "gloo"},
                  binary=worker, ready_timeout=300)
    try:
        # Start: a group of 2 replicas spread over two nodes against hotswap-launch of 2.
        group_start, launch_peer = [], []
        for _ in range(args.reps):
            start = time.perf_counter()
            group = hotswap.ray.WorkerGroup(model, replicas=2, placement="strict_spread",
                                            **common)
            group_start.append(time.perf_counter() - start)
            group.shutdown()
            launch_peer.append(launch_start(launch, model, 2))
        report(args, "WorkerGroup of 2 replicas on 2 nodes: start to ready", group_start,
               launch_peer, "group_to_launch")

        # Restart: kill a replica's worker, until the group serves again.
        group = hotswap.ray.WorkerGroup(model, replicas=2, placement="strict_spread",
                                        max_restarts=-1, **common)
        try:
            restart, launch_one = [], []
            for _ in range(args.reps):
                pid = group.infos()[1]["pid"]
                start = time.perf_counter()
                group.kill_worker(1)
                while (group.infos()[1] or {}).get("pid") == pid:  # until the ledger knows
                    time.sleep(0.01)
                group.wait_ready(timeout=300)
                while group.health()[1]["status"] != "ok":
                    time.sleep(0.01)
                restart.append(time.perf_counter() - start)
                launch_one.append(launch_start(launch, model, 1))
        finally:
            group.shutdown()
        report(args, "replica killed (SIGKILL) until the group serves again", restart,
               launch_one, "restart_to_launch_one")

        # Push: replicas on 3 nodes against replicas on 1, one trainer actor driving both.
        groups = []  # each torn down on the way out, however far the setup got
        trainers = None
        try:
            spread_group = hotswap.ray.WorkerGroup(model, replicas=args.replicas,
                                                   placement="strict_spread", **common)
            groups.append(spread_group)
            packed_group = hotswap.ray.WorkerGroup(model, replicas=args.replicas,
                                                   placement="strict_pack", **common)
            groups.append(packed_group)
            trainers = hotswap.ray.TrainerGroup(PushTrainer, args=(model,))
            nodes = lambda g: len({i["node_id"] for i in g.infos()})  # noqa: E731
            assert nodes(spread_group) == min(3, args.replicas) and nodes(packed_group) == 1
            trainers.run("connect", "spread", spread_group.connection(), trainers.free_port())
            trainers.run("connect", "packed", packed_group.connection(), trainers.free_port())
            pushes = {"spread": [], "packed": []}
            for rep in range(args.push_reps + 1):
                for name in ("spread", "packed"):
                    seconds = trainers.run("push", name, f"{name}-{rep}")[0]
                    if rep:  # the first round of each is a warm-up
                        pushes[name].append(seconds)
        finally:
            if trainers is not None:
                trainers.shutdown()
            for group in groups:
                group.shutdown()
        report(args, f"verified gloo push of {model_bytes / 1e6:.0f} MB into {args.replicas} "
               f"replicas on {min(3, args.replicas)} nodes", pushes["spread"], pushes["packed"],
               "spread_to_one_node", {"bytes": model_bytes})
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
