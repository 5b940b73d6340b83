"""A push from Python against the same push from C++: same model, backend, worker and machine,
in the same run, repetitions interleaved. Target: the Python push takes at most 1.05x the C++
push's time.

C++: `hotswap-trainer` (its per-round JSON times the push alone, start to commit). Python: the
`hotswap` package, once with a TensorListSource (the source iterated in C++) and once with a
WeightSource written in Python (every tensor handed over from a Python generator). Each
repetition runs a C++ trainer and then the two Python ones, each for `--rounds` rounds of which
the first is a warm-up; a figure is the median of all measured rounds, printed with its range.

Usage: PYTHONPATH=build/python python3 bench/python_push_bench.py BUILD_DIR [--reps N]
       [--rounds N] [--backend shm|gloo]... [--json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import hotswap


class PythonSource(hotswap.WeightSource):
    """The tensors, handed over one by one from Python."""

    def __init__(self, tensors):
        super().__init__()
        self.tensors = tensors
        self.meta = [hotswap.ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()]

    def metadata(self):
        return self.meta

    def __iter__(self):
        yield from self.tensors.items()


# Each backend's default chunk buffer, given to both trainers alike (hotswap-trainer's own
# default is vLLM's 1 GiB for every backend, and fresh shm pages fault in on first use).
BUFFER_BYTES = {"shm": 64 << 20, "gloo": 1 << 30}


def init_info(backend):
    if backend == "shm":
        return hotswap.ShmTrainerInitInfo(1, rank=0, timeout=300,
                                          packed_buffer_size_bytes=BUFFER_BYTES["shm"])
    return hotswap.GlooTrainerInitInfo("127.0.0.1", hotswap.free_port(), world_size=2, rank=0,
                                       timeout=300, packed_buffer_size_bytes=BUFFER_BYTES["gloo"])


def cpp_rounds(trainer, endpoint, backend, model, rounds):
    out = subprocess.run([trainer, "--workers", endpoint, "--backend", backend, "--source", model,
                          "--rounds", str(rounds), "--step-scale", "0", "--timeout", "300",
                          "--buffer-size", str(BUFFER_BYTES[backend])],
                         check=True, capture_output=True, text=True).stdout
    seconds = [json.loads(line)["seconds"] for line in out.splitlines() if line.startswith("{")]
    if len(seconds) != rounds:
        raise RuntimeError(f"hotswap-trainer printed {len(seconds)} rounds of {rounds}:\n{out}")
    return seconds[1:]


def python_rounds(endpoint, backend, source, rounds):
    client = hotswap.ZmqWeightSyncClient(endpoint, timeout=300)
    factory = hotswap.WeightTransferTrainerFactory
    seconds = []
    with factory.trainer_init(init_info(backend), client=client, source=source) as engine:
        for round_number in range(rounds):
            start = time.perf_counter()
            engine.push(weight_version=f"python-{round_number}")
            seconds.append(time.perf_counter() - start)
    return seconds[1:]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def report(args, backend, what, values, cpp, model_bytes):
    figure, limit = spread(values), spread(cpp)
    ratio = figure["median"] / limit["median"]
    line = {"bench": "python_push", "measure": f"{backend} push of {model_bytes / 1e6:.0f} MB, "
            f"{what}", "value": figure["median"], "unit": "s", "spread": figure, "limit": limit,
            "repetitions": len(values), "ratio_python_to_cpp": ratio,
            "target_ratio": 1.05, "backend": backend, "bytes": model_bytes}
    if not args.json:
        print(f"{line['measure']:<56} {figure['median']:.4f} s ({figure['min']:.4f}-"
              f"{figure['max']:.4f}); C++ {limit['median']:.4f} s ({limit['min']:.4f}-"
              f"{limit['max']:.4f}); python/C++ {ratio:.3f}x (target <= 1.05x)")
    print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", help="the build directory (its hotswap-worker, hotswap-trainer)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="per trainer, the first a warm-up")
    parser.add_argument("--backend", action="append", choices=["shm", "gloo"])
    parser.add_argument("--json", action="store_true", help="print the JSON lines only")
    args = parser.parse_args()
    backends = args.backend or ["shm", "gloo"]
    worker = os.path.join(args.build, "worker", "hotswap-worker")
    trainer = os.path.join(args.build, "trainer_sdk", "hotswap-trainer")
    make = os.path.join(args.build, "model_loader", "hotswap-make-model")

    with tempfile.TemporaryDirectory(prefix="hotswap-pybench-") as tmp:
        model = os.path.join(tmp, "model")
        # ~170 MB of bfloat16: large enough that the bytes, not the calls, set the time.
        subprocess.run([make, "--arch", "llama", "--layers", "4", "--hidden-size", "1024",
                        "--intermediate-size", "2816", "--heads", "16", "--kv-heads", "16",
                        "--vocab", "16000", "--dtype", "bfloat16", "--seed", "1", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
        tensors = hotswap.load_checkpoint(model)
        model_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
        for backend in backends:
            cpp, listed, python = [], [], []
            with hotswap.WorkerProcess(worker, model, backend, "--timeout", "300") as w:
                for _ in range(args.reps):
                    cpp += cpp_rounds(trainer, w.endpoint, backend, model, args.rounds)
                    listed += python_rounds(w.endpoint, backend,
                                            hotswap.TensorListSource(list(tensors.items())),
                                            args.rounds)
                    python += python_rounds(w.endpoint, backend, PythonSource(tensors),
                                            args.rounds)
            report(args, backend, "TensorListSource", listed, cpp, model_bytes)
            report(args, backend, "WeightSource in Python", python, cpp, model_bytes)


if __name__ == "__main__":
    sys.exit(main())
