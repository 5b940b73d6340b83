"""HotswapFanOutClient: many workers (data-parallel replicas) as one client, in pure Python.

The pyzmq-only twin of hotswap.FanOutClient: each call reaches every worker at once (a thread
each) and returns once all are done; the first failure is raised as its own kind, prefixed with
the worker it came from. A trainer engine drives it as it drives any object with vLLM's four
client methods, and `verify=True` reads `checkpoint_checksums` / `adapter_checksums` from it.

    client = HotswapFanOutClient(["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"], timeout=60)
    world_size = 1 + client.inference_world_size()
"""

import concurrent.futures

from .client import DEFAULT_TIMEOUT_S, HotswapError, HotswapWeightSyncClient


class HotswapFanOutClient:
    def __init__(self, endpoints, timeout=DEFAULT_TIMEOUT_S, curve=None):
        if isinstance(endpoints, str):
            raise TypeError(f"HotswapFanOutClient takes a list of endpoints, got the one string "
                            f"{endpoints!r}")
        self.workers = [HotswapWeightSyncClient(e, timeout=timeout, curve=curve)
                        for e in endpoints]
        if not self.workers:
            raise ValueError("HotswapFanOutClient needs at least one worker")

    @property
    def endpoints(self):
        return [w.endpoint for w in self.workers]

    def each(self, call):
        """`call(worker)` on every worker at once; their results in the order of `workers`.
        Every call ends within its client's timeout; the first failure, by worker order, is
        raised after all have ended, prefixed with its worker's endpoint."""
        with concurrent.futures.ThreadPoolExecutor(len(self.workers)) as pool:
            futures = [pool.submit(call, w) for w in self.workers]
            concurrent.futures.wait(futures)
        for worker, future in zip(self.workers, futures):
            error = future.exception()
            if error is None:
                continue
            where = f"worker {worker.endpoint}: "
            if isinstance(error, HotswapError):
                raise HotswapError(error.code, error.kind, where + error.message) from error
            try:
                prefixed = type(error)(where + str(error))
            except Exception:  # a kind whose constructor takes more than a message
                prefixed = RuntimeError(where + f"{type(error).__name__}: {error}")
            raise prefixed from error
        return [f.result() for f in futures]

    # vLLM's VLLMWeightSyncClient protocol.
    def init_weight_transfer_engine(self, init_info):
        self.each(lambda w: w.init_weight_transfer_engine(init_info))

    def start_weight_update(self, lora_name=None, lora_config=None):
        self.each(lambda w: w.start_weight_update(lora_name=lora_name, lora_config=lora_config))

    def update_weights(self, update_info):
        self.each(lambda w: w.update_weights(update_info))

    def finish_weight_update(self, weight_version=None):
        self.each(lambda w: w.finish_weight_update(weight_version=weight_version))

    def shutdown_weight_transfer_engine(self):
        self.each(lambda w: w.shutdown_weight_transfer_engine())

    # What a trainer engine's verify=True reads: [(worker, {name: sha256 hex})].
    def checkpoint_checksums(self):
        return self._digests({})

    def adapter_checksums(self, lora_name):
        return self._digests({"lora_name": lora_name})

    def _digests(self, params):
        replies = self.each(lambda w: w.weight_checker("checksum", format="checkpoint", **params))
        return [(w.endpoint, reply["checksums"]) for w, reply in zip(self.workers, replies)]

    def inference_world_size(self):
        """Every worker's get_world_size without data parallelism, summed: a transfer group's
        world_size is this plus its broadcasting trainer ranks."""
        sizes = self.each(lambda w: w.get_world_size(include_dp=False)["world_size"])
        return sum(sizes)

    def call(self, method, params=None, timeout=None):
        """Any control method on every worker; the replies in the order of `workers`."""
        return self.each(lambda w: w.call(method, params, timeout=timeout))
