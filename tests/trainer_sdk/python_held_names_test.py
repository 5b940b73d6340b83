"""A `held_names` WeightSource written in Python, split across two Python trainer processes that
push into one hotswap-worker over gloo (trainer_ranks=2): each rank sends the parameters it
holds, a parameter both hold is sent once, every round is verified by each rank against what
it holds, and the whole model the worker ends up serving is checked against the trainer's.

Usage: python_held_names_test.py WORKER MAKE_MODEL        (the test: starts everything)
       python_held_names_test.py --rank R ENDPOINT PORT MODEL   (one trainer rank)
"""

import hashlib
import os
import subprocess
import sys
import tempfile

import torch

import hotswap

ROUNDS = 2


def step(tensor, round_number):
    """The same deterministic update on every rank, so that replicated parameters stay equal."""
    tensor += 0.01 * round_number


def split(names):
    """Rank 0: the embeddings and the first half of the layers, plus the final norm, which rank
    1 holds too; rank 1: the rest."""
    groups = hotswap.layerwise_groups(names)
    half = (len(groups) + 1) // 2
    held = [set(n for g in groups[:half] for n in g), set(n for g in groups[half:] for n in g)]
    held[0].add("model.norm.weight")
    return held


class Shard(hotswap.WeightSource):
    """This rank's part of the model: metadata describes all of it, iteration covers exactly this
    rank's groups, with None for the names of those groups that another rank holds."""

    def __init__(self, tensors, held):
        super().__init__()
        self.tensors = tensors
        self.held = held
        self.meta = [hotswap.ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()]

    def metadata(self):
        return self.meta

    def held_names(self):
        return self.held

    def __iter__(self):
        for group in self.groups():
            for name in group:
                yield name, self.tensors[name] if name in self.held else None


def trainer_rank(rank, endpoint, port, model):
    tensors = hotswap.load_checkpoint(model)
    held = split(list(tensors))[rank]
    source = Shard(tensors, held)
    client = hotswap.ZmqWeightSyncClient(endpoint, timeout=60)
    info = hotswap.GlooTrainerInitInfo("127.0.0.1", port, world_size=3, rank=rank,
                                       trainer_ranks=2, timeout=60)
    with hotswap.WeightTransferTrainerFactory.trainer_init(info, client=client,
                                                           source=source) as engine:
        assert engine.is_sender == (rank == 0) and engine.sends_weights
        for round_number in range(1, ROUNDS + 1):
            for name in held:
                step(tensors[name], round_number)
            engine.push(weight_version=f"split-{round_number}", verify=True)
    print(f"rank {rank}: pushed {ROUNDS} verified rounds of the {len(held)} of {len(tensors)} "
          "parameters it holds")


def main(worker, make):
    tmp = tempfile.mkdtemp(prefix="hotswap-held-")
    model = os.path.join(tmp, "model")
    subprocess.run([make, "--arch", "llama", "--layers", "4", "--hidden-size", "64",
                    "--intermediate-size", "96", "--heads", "4", "--kv-heads", "2", "--vocab",
                    "128", "--seed", "5", "--out", model], check=True, stdout=subprocess.DEVNULL)
    with hotswap.WorkerProcess(worker, model, "gloo") as w:
        port = hotswap.free_port()
        ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), w.endpoint,
                                   str(port), model]) for r in (0, 1)]
        try:
            codes = [p.wait(timeout=120) for p in ranks]
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
        assert codes == [0, 0], f"trainer ranks exited with {codes}"
        client = hotswap.ZmqWeightSyncClient(w.endpoint, timeout=30)
        assert client.call("weight_info")["weight_version"] == f"split-{ROUNDS}"
        # The whole model, as the two ranks stepped it between them.
        expected = hotswap.load_checkpoint(model)
        for round_number in range(1, ROUNDS + 1):
            for t in expected.values():
                step(t, round_number)
        served = client.call("weight_checker", {"action": "checksum", "format": "checkpoint"})
        served = served["checksums"]
        wrong = [n for n, t in expected.items()
                 if served.get(n) != hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()]
        assert not wrong, f"the worker serves other values for {wrong}"
    print(f"held_names across two Python trainer processes: ok ({len(expected)} parameters)")


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        trainer_rank(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main(sys.argv[1], sys.argv[2])
