"""A trainer on one Ray node pushes its weights after every optimizer step into a group of
hotswap workers on other nodes, which serve /v1/completions all the while.

- Ray places a WorkerGroup of 2 replicas (tensor-parallel 2 each where the cluster has the
  resources, else 1) with one bundle per replica, spread across nodes; each replica's actor
  starts hotswap-worker on its node with the group's CURVE keys and HTTP API key.
- A TrainerGroup of one rank, on another node, trains a Llama and pushes a verified round after
  every step: gloo, or nccl where the cluster has GPUs.
- A client thread sends /v1/completions to every replica throughout, with the group's API key.
- With --kill-replica-at STEP, replica 1's worker is killed with SIGKILL before that step's push:
  the group reports it, Ray restarts the replica's actor, and the trainer re-initializes its
  transfer group with every replica and pushes again.

Without --address it runs on a simulated three-node cluster on this machine
(ray.cluster_utils.Cluster): nodes 0 and 1 for inference, node 2 for the trainer, every one at
127.0.0.1, so that Ray, the workers and the trainer stay on loopback.

    PYTHONPATH=build/python python3 examples/ray_train_and_push.py \\
        --worker build/worker/hotswap-worker --make-model build/model_loader/hotswap-make-model

Exits non-zero if a push or its verification fails, a completion fails on a replica that was
serving, or the replicas do not end up generating what the trainer's own model generates.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# The simulated cluster's nodes are at LOOPBACK (Cluster's node_ip_address), where the replicas
# and the trainer bind. ray.init would replace a loopback address by this machine's interface
# address (ray/_private/services.py, resolve_ip_for_localhost), where those nodes do not listen,
# but for RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read when ray is imported. Nothing else: a real
# cluster's --address is kept as given either way.
LOOPBACK = "127.0.0.1"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

try:
    import ray
    import ray.cloudpickle
except ImportError as error:
    print(f"skipped: this example needs Ray ({error}): pip install 'hotswap[ray]'")
    sys.exit(77)  # CTest's "skipped"
import torch

import hotswap
import hotswap.ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_and_push  # noqa: E402
from train_and_push import (  # noqa: E402
    add_model_arguments,
    load_model,
    starting_checkpoint,
    train_step,
)

# The trainer's class is sent to its actor by value (this file is not importable there), and
# with it the model code of train_and_push.
ray.cloudpickle.register_pickle_by_value(train_and_push)

SEQUENCE = [1, 17, 42, 99, 5, 63, 28, 77, 110, 3]
PROMPT, TARGET = SEQUENCE[:2], SEQUENCE[2:]


class PolicyTrainer:
    """One trainer rank: a Llama taught SEQUENCE, pushed after every step."""

    def __init__(self, context, checkpoint, backend, lr=0.01):
        torch.manual_seed(0)
        self.context = context
        self.backend = backend
        self.model = load_model(checkpoint)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.engine = None

    def connect(self, connection, master_port=None):
        """A transfer group with every replica of `connection`: at the start, and again after a
        replica was replaced (a replaced worker left the old group)."""
        self.shutdown()
        info = self.context.init_info(self.backend, connection.inference_world_size(),
                                      master_port=master_port, timeout=60)
        self.engine = hotswap.WeightTransferTrainerFactory.trainer_init(
            info, client=connection.client("cpp", timeout=60), source=self.model)
        return self.context.node_id

    def train_step(self):
        inputs, labels = torch.tensor([SEQUENCE[:-1]]), torch.tensor(SEQUENCE[1:])
        return train_step(self.model, self.optimizer, inputs, labels)

    def push(self, version):
        start = time.perf_counter()
        self.engine.push(weight_version=version, verify=True)
        return time.perf_counter() - start

    def greedy(self):
        return self.model.greedy(PROMPT, len(TARGET))

    def shutdown(self):
        if self.engine is not None:
            try:
                self.engine.shutdown()
            except Exception as error:  # a replaced worker never joined the old group
                print(f"trainer: closing the old transfer group: {error}", flush=True)
            self.engine = None


def completion(url, api_key, model_name):
    """Replica at `url`'s greedy continuation of PROMPT over /v1/completions: (token ids,
    weight versions)."""
    body = json.dumps({"model": model_name, "prompt": PROMPT, "max_tokens": len(TARGET),
                       "temperature": 0, "ignore_eos": True, "return_token_ids": True,
                       "return_weight_versions": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={
        "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        choice = json.load(reply)["choices"][0]
    return choice["token_ids"], choice["weight_versions"]


class CompletionLoad:
    """Sends /v1/completions to every replica in turn until stopped; counts what each served,
    and the requests refused while a replica was down (killed, being restarted)."""

    def __init__(self, connection, model_name):
        self.connection = connection
        self.model_name = model_name
        self.served = [0] * len(connection.http_urls)
        self.unavailable = [0] * len(connection.http_urls)
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            for i, url in enumerate(self.connection.http_urls):
                try:
                    completion(url, self.connection.api_key, self.model_name)
                    self.served[i] += 1
                except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                    if isinstance(error, urllib.error.HTTPError):
                        self.errors.append(f"replica {i}: HTTP {error.code}: {error.read()[:200]}")
                    else:
                        self.unavailable[i] += 1  # down: its worker is being restarted
            time.sleep(0.05)


def start_cluster(args):
    """Ray: the cluster at --address, or three simulated nodes on this machine. Returns the
    simulated cluster (None for a real one) and the WorkerGroup / TrainerGroup resources."""
    if args.address:
        ray.init(address=args.address)
        gpus = ray.cluster_resources().get("GPU", 0)
        rank = {"GPU": 1} if gpus >= args.replicas * 2 + 1 else {"CPU": 1}
        return None, rank, dict(rank)
    from ray.cluster_utils import Cluster

    store = 128 << 20  # each node's object store, small: nothing large goes through it
    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": LOOPBACK, "num_cpus": 2, "resources": {"inference": 1},
        "include_dashboard": False, "object_store_memory": store})
    cluster.add_node(node_ip_address=LOOPBACK, num_cpus=2, resources={"inference": 1},
                     object_store_memory=store)
    cluster.add_node(node_ip_address=LOOPBACK, num_cpus=2, resources={"trainer": 1},
                     object_store_memory=store)
    ray.init(address=cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False)
    cluster.wait_for_nodes()
    nodes_at = {n["NodeManagerAddress"] for n in ray.nodes()}
    if nodes_at != {LOOPBACK}:
        raise SystemExit(f"the simulated nodes are at {sorted(nodes_at)}, not {LOOPBACK}")
    return cluster, {"CPU": 1, "inference": 0.5}, {"CPU": 1, "trainer": 1}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    parser.add_argument("--address", help="a running Ray cluster (default: three simulated nodes)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--kill-replica-at", type=int, metavar="STEP",
                        help="kill replica 1's worker before this step's push (a fault drill)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="hotswap-ray-train-") as tmp:
        checkpoint = os.path.abspath(starting_checkpoint(args, tmp))
        cluster, rank_resources, trainer_resources = start_cluster(args)
        try:
            run(args, checkpoint, rank_resources, trainer_resources)
        finally:
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
    print("ray_train_and_push: ok")


def run(args, checkpoint, rank_resources, trainer_resources):
    gpu = "GPU" in rank_resources
    backend = "nccl" if gpu else "gloo"
    # Tensor-parallel 2 where each replica's node can hold two ranks.
    tp = 2 if all(any(n["Resources"].get(k, 0) >= 2 * v for k, v in rank_resources.items())
                  for n in ray.nodes() if n["Alive"]) else 1
    workers = hotswap.ray.WorkerGroup(
        checkpoint, replicas=args.replicas, tensor_parallel_size=tp,
        weight_transfer_config={"backend": backend}, resources_per_rank=rank_resources,
        placement="spread", http=True, binary=args.worker, worker_args=["--timeout", "60"])
    trainers = None
    load = None
    try:
        for info in workers.infos():
            print(f"replica {info['replica']}: node {info['node_ip']} ({info['node_id'][:8]}), "
                  f"{tp} rank(s) on {info['devices']}, control {info['endpoint']}, "
                  f"http {info['http_url']}")
        trainers = hotswap.ray.TrainerGroup(PolicyTrainer, ranks=1, args=(checkpoint, backend),
                                            resources_per_rank=trainer_resources)
        connection = workers.connection()
        node = trainers.run("connect", connection)[0]
        print(f"trainer: node {trainers.master_address} ({node[:8]}), pushing over {backend} to "
              f"{connection.inference_world_size()} inference ranks")
        load = CompletionLoad(connection, checkpoint)
        load.thread.start()

        for step in range(1, args.steps + 1):
            loss = trainers.run("train_step")[0]
            version = f"step-{step}"
            if step == args.kill_replica_at:
                pid = workers.kill_worker(1)
                print(f"step {step}: fault drill: killed replica 1's worker (pid {pid})")
            try:
                if workers.replaced(connection):
                    raise RuntimeError("replica(s) replaced since the last init")
                seconds = trainers.run("push", version, timeout=120)[0]
            except Exception as error:  # a replica died: every one must join a new group
                cause = getattr(error, "cause", None) or error  # a rank's own, through Ray
                print(f"step {step}: push refused ({type(cause).__name__}: "
                      f"{str(cause).splitlines()[0][:160]})")
                replaced = workers.wait_ready(timeout=120, connection=connection)
                exits = [e for e in workers.events() if e["event"] == "exited"]
                print(f"step {step}: replaced replica(s) {replaced}; last exit: replica "
                      f"{exits[-1]['replica']} returned {exits[-1]['returncode']}")
                connection = workers.connection()
                load.connection = connection  # a replica restarted on another node moved
                trainers.run("connect", connection, trainers.free_port())
                seconds = trainers.run("push", version, timeout=120)[0]
            if step == 1 or step % 10 == 0 or step == args.steps:
                tokens = completion(connection.http_urls[0], connection.api_key, checkpoint)[0]
                print(f"step {step:3d}: loss {loss:.4f}; pushed and verified in "
                      f"{1e3 * seconds:.1f} ms; replicas continue {PROMPT} with {tokens}")
        load.stop.set()
        load.thread.join(timeout=120)
        final = [completion(url, connection.api_key, checkpoint) for url in connection.http_urls]
        own = trainers.run("greedy")[0]
        health = workers.health()
    finally:
        if load is not None:
            load.stop.set()
        if trainers is not None:
            trainers.shutdown()
        workers.shutdown()

    print(f"completions served during training per replica: {load.served} "
          f"(refused while down: {load.unavailable}); restarts: "
          f"{[h['restarts'] for h in health]}")
    if load.errors:
        raise SystemExit(f"completions failed: {load.errors[:3]}")
    if min(load.served) == 0:
        raise SystemExit(f"a replica served no completion during training: {load.served}")
    version = f"step-{args.steps}"
    for i, (tokens, spans) in enumerate(final):
        if spans != [{"version": version, "start": 0, "end": len(TARGET)}]:
            raise SystemExit(f"replica {i} served {spans}, not {version}")
        if tokens != own:
            raise SystemExit(f"replica {i} generates {tokens}, the trainer's model {own}")
    if own != TARGET:
        raise SystemExit(f"the replicas generate {own}, not the sequence taught ({TARGET})")
    print(f"both replicas generate the taught sequence {TARGET} at {version}")


if __name__ == "__main__":
    main()
