"""The `hotswap` extension against real hotswap-workers: every binding's error path (wrong types,
a tensor of the wrong dtype or device, a closed engine, errors raised inside Python sources and
clients), each leaving the worker serving its previous weights; a push driven through the
pure-Python client; and the GIL released while bytes move.

Usage: python_bindings_test.py WORKER MAKE_MODEL  (with the built package on PYTHONPATH)
"""

import functools
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch

import hotswap

FAILURES = []


def expect(kind, fragment, call):
    """`call()` must raise exactly `kind` (or a subclass) with `fragment` in its message."""
    try:
        call()
    except kind as error:
        if fragment not in str(error):
            FAILURES.append(f"{kind.__name__} without {fragment!r}: {error}")
        return error
    except Exception as error:  # noqa: BLE001 (the wrong kind is what is being reported)
        FAILURES.append(f"expected {kind.__name__} ({fragment!r}), got "
                        f"{type(error).__name__}: {error}")
        return error
    FAILURES.append(f"expected {kind.__name__} ({fragment!r}), nothing was raised")
    return None


def check(condition, message):
    if not condition:
        FAILURES.append(message)


class ListSource(hotswap.WeightSource):
    """A Python source over a dict, with hooks to misbehave."""

    def __init__(self, tensors, yield_override=None, raise_in_iter=None):
        super().__init__()
        self.tensors = tensors
        self.yield_override = yield_override or {}
        self.raise_in_iter = raise_in_iter

    def metadata(self):
        return [(name, t.dtype, tuple(t.shape)) for name, t in self.tensors.items()]

    def __iter__(self):
        for name, t in self.tensors.items():
            if self.raise_in_iter is not None:
                raise self.raise_in_iter
            yield name, self.yield_override.get(name, t)


def types_and_values(tensors):
    """Errors that need no worker."""
    factory = hotswap.WeightTransferTrainerFactory
    shm = hotswap.ShmTrainerInitInfo(1, rank=0)
    expect(TypeError, "init_info must be a hotswap TrainerInitInfo",
           lambda: factory.trainer_init({"backend": "shm"}, client=None))
    expect(TypeError, "has no init_weight_transfer_engine()",
           lambda: factory.trainer_init(shm, client=object()))
    expect(TypeError, "source must be a hotswap.WeightSource",
           lambda: factory.trainer_init(shm, client=hotswap.ZmqWeightSyncClient("tcp://127.0.0.1:1"),
                                        source=[1, 2]))
    expect(TypeError, "incompatible constructor arguments",
           lambda: hotswap.GlooTrainerInitInfo("127.0.0.1", 1, 2, rank="zero"))
    expect(TypeError, "", lambda: hotswap.GlooTrainerInitInfo("127.0.0.1", 1, 2))  # rank: keyword
    expect(ValueError, "timeout must be a positive number of seconds",
           lambda: hotswap.GlooTrainerInitInfo("127.0.0.1", 1, 2, rank=0, timeout=0))
    expect(TypeError, "must be a torch.dtype, got str",
           lambda: hotswap.ParamMeta("w", "float32", (2,)))
    expect(ValueError, "no name on vLLM's weight-transfer wire",
           lambda: hotswap.ParamMeta("w", torch.complex64, (2,)))
    expect(TypeError, "must be a torch.Tensor, got list",
           lambda: hotswap.TensorListSource([("w", [1.0, 2.0])]))
    expect(TypeError, "(name: str, tensor) pairs",
           lambda: hotswap.TensorListSource([("w",)]))
    expect(ValueError, "has no name on vLLM's weight-transfer wire",
           lambda: hotswap.TensorListSource([("c", torch.ones(2, dtype=torch.complex64))]))
    expect(ValueError, "must be a positive number of seconds",
           lambda: hotswap.ZmqWeightSyncClient("tcp://127.0.0.1:1", timeout=-1))
    expect(TypeError, "FanOutClient takes control endpoints",
           lambda: hotswap.FanOutClient([3]))
    expect(TypeError, "got the one string", lambda: hotswap.FanOutClient("tcp://127.0.0.1:1"))
    # A CURVE key left out is named at once, not by ZeroMQ's "Invalid argument" at a call.
    expect(ValueError, "curve lacks public_key", lambda: hotswap.FanOutClient(
        ["tcp://127.0.0.1:1"], curve={"server_public": "x" * 40, "secret_key": "y" * 40}))
    expect(ValueError, "up to a year",
           lambda: hotswap.ZmqWeightSyncClient("tcp://127.0.0.1:1", timeout=float("inf")))
    arena = hotswap.SharedWeightArena(1 << 16)
    expect(TypeError, "shape must be a sequence of ints",
           lambda: arena.allocate("w", "four", torch.float32))
    expect(TypeError, "must be a torch.dtype", lambda: arena.allocate("w", (4,), "float32"))
    arena.allocate("w", (4,), torch.float32)
    expect(ValueError, "w", lambda: arena.allocate("w", (4,), torch.float32))  # the name is taken
    expect(ValueError, "", lambda: arena.allocate("big", (1 << 20,), torch.float32))  # no room
    meta_model = torch.nn.Linear(2, 2, device="meta")
    expect(ValueError, "a SharedWeightArena holds CPU tensors",
           lambda: hotswap.SharedWeightArena.from_module(meta_model))
    # load_checkpoint reads with hotswap's own safetensors reader: bad input is a ValueError.
    with tempfile.TemporaryDirectory() as empty:
        expect(ValueError, "", lambda: hotswap.load_checkpoint(empty))
        with open(os.path.join(empty, "model.safetensors"), "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
        expect(ValueError, "", lambda: hotswap.load_checkpoint(empty))

    # The Python source protocol: what the C++ side reads back.
    source = ListSource(tensors)
    check([m[0] for m in source.metadata()] == list(tensors), "metadata names")
    check(source.groups()[0][0] == next(iter(tensors)), "groups() over a Python source")

    class NoMetadata(hotswap.WeightSource):
        def __iter__(self):
            return iter(())

    expect(RuntimeError, "must implement metadata", lambda: NoMetadata().groups())

    class BadHeld(ListSource):
        def held_names(self):
            return [1, 2]

    expect(TypeError, "held_names() must give names", lambda: BadHeld(tensors).groups())
    # iter_groups: the default batches __iter__ by layerwise group, checking the order; an
    # override is what the C++ side reads (through the base class's binding, as an engine would).
    batches = list(source.iter_groups())
    check([names for names, _ in batches] == source.groups(), "default iter_groups batches")
    check(all(t.data_ptr() == tensors[n].data_ptr()
              for names, ts in batches for n, t in zip(names, ts)), "iter_groups copied")

    class Grouped(ListSource):
        def iter_groups(self):
            for group in self.groups():
                yield group, [self.tensors[n] for n in group]

    via_cpp = list(hotswap.WeightSource.iter_groups(Grouped(tensors)))
    check([names for names, _ in via_cpp] == source.groups(), "overridden iter_groups from C++")

    class Ragged(ListSource):
        def iter_groups(self):
            yield ["a", "b"], [torch.zeros(1)]

    expect(ValueError, "yielded 2 names but 1 tensors",
           lambda: list(hotswap.WeightSource.iter_groups(Ragged(tensors))))

    class OutOfOrder(ListSource):
        def __iter__(self):
            yield from reversed(list(self.tensors.items()))

    expect(RuntimeError, "", lambda: list(OutOfOrder(tensors).iter_groups()))
    # The ready sources pass tensors through without a copy.
    t = torch.arange(6.0)
    passed = next(iter(hotswap.TensorListSource([("t", t)])))[1]
    check(passed.data_ptr() == t.data_ptr(), "TensorListSource copied its tensor")
    module_source = hotswap.ModuleSource(torch.nn.Linear(3, 2))
    check([m.name for m in module_source.metadata()] == ["weight", "bias"], "ModuleSource names")


class Vllm034Source(hotswap.WeightSource):
    """A source written for vLLM 0.34: `metadata` a cached property, `iter_full()` instead of
    iteration, owners in the metadata."""

    def __init__(self, tensors):
        super().__init__()
        self.tensors = tensors

    @functools.cached_property
    def metadata(self):
        return [hotswap.ParamMeta(n, t.dtype, tuple(t.shape), owners=(0,))
                for n, t in self.tensors.items()]

    def iter_full(self):
        yield from self.tensors.items()


def vllm_034_forms():
    """ParamMeta's 0.34 fields with vLLM's checks, and 0.34's placements."""
    m = hotswap.ParamMeta("w", torch.float32, (4, 2), owners=(3, 5), mesh_shape=(2,),
                          placements=(hotswap.Shard(0),))
    check(m.owners == (3, 5) and m.mesh_shape == (2,) and m.placements == (hotswap.Shard(0),),
          f"ParamMeta keeps its ownership: {m.owners} {m.mesh_shape} {m.placements}")
    plain = hotswap.ParamMeta("w", torch.float32, (4, 2))
    check(plain.owners is None and plain.mesh_shape is None and plain.placements is None,
          "a ParamMeta without owners has none")
    replicated = hotswap.ParamMeta("w", torch.float32, (4, 2), owners=(1,),
                                   placements=(hotswap.Replicate(),))
    check(replicated.placements is None, "all-Replicate placements read as None, as in vLLM")
    expect(ValueError, "owners must be distinct non-negative ranks, got (1, 1)",
           lambda: hotswap.ParamMeta("w", torch.float32, (4,), owners=(1, 1)))
    expect(ValueError, "mesh_shape (3,) does not cover its 2 owners",
           lambda: hotswap.ParamMeta("w", torch.float32, (4,), owners=(1, 2), mesh_shape=(3,)))
    expect(ValueError, "shards dim 1 of a 1-D tensor",
           lambda: hotswap.ParamMeta("w", torch.float32, (4,), owners=(1,),
                                     placements=(hotswap.Shard(1),)))
    expect(ValueError, "declares a mesh or placements without owners",
           lambda: hotswap.ParamMeta("w", torch.float32, (4,), mesh_shape=(1,)))
    expect(TypeError, "", lambda: hotswap.ParamMeta("w", torch.float32, (4,), (0,)))  # keyword


def lora_sources():
    """LoraSource and lora_config_of read a model by PEFT's names and config, peft not needed."""
    import dataclasses
    import enum

    class Layer(torch.nn.Module):  # a LoRA layer under PEFT's names, two adapters in it
        def __init__(self):
            super().__init__()
            self.base_layer = torch.nn.Linear(4, 6)
            self.lora_A = torch.nn.ModuleDict({"default": torch.nn.Linear(4, 2, bias=False),
                                               "other": torch.nn.Linear(4, 2, bias=False)})
            self.lora_B = torch.nn.ModuleDict({"default": torch.nn.Linear(2, 6, bias=False),
                                               "other": torch.nn.Linear(2, 6, bias=False)})

    class PeftType(str, enum.Enum):
        LORA = "LORA"

    @dataclasses.dataclass
    class Config:
        r: int = 2
        lora_alpha: int = 4
        target_modules: set = dataclasses.field(default_factory=lambda: {"v_proj", "q_proj"})
        peft_type: PeftType = PeftType.LORA
        modules_to_save: object = None

        def to_dict(self):
            return dataclasses.asdict(self)

    model = torch.nn.Module()
    model.base_model = torch.nn.Module()
    model.base_model.model = torch.nn.Module()
    model.base_model.model.q_proj = Layer()
    model.peft_config = {"default": Config()}
    source = hotswap.LoraSource(model)
    names = [m.name for m in source.metadata()]
    prefix = "base_model.model.q_proj."
    check(names == [prefix + "lora_A.weight", prefix + "lora_B.weight"],
          f"LoraSource names, the adapter's name dropped as PEFT saves them: {names}")
    live = model.base_model.model.q_proj.lora_A["default"].weight
    check(dict(source)[prefix + "lora_A.weight"].data_ptr() == live.data_ptr(),
          "LoraSource yields the live parameters")
    other = hotswap.LoraSource(model, adapter_name="other")
    check(dict(other)[prefix + "lora_B.weight"].data_ptr() ==
          model.base_model.model.q_proj.lora_B["other"].weight.data_ptr(),
          "LoraSource of a second adapter")
    expect(ValueError, "has no LoRA weights of adapter 'missing'",
           lambda: hotswap.LoraSource(model, adapter_name="missing"))
    expect(ValueError, "has no LoRA weights", lambda: hotswap.LoraSource(torch.nn.Linear(2, 2)))
    config = hotswap.lora_config_of(model)
    check(config == {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],
                     "peft_type": "LORA", "modules_to_save": None},
          f"lora_config_of: JSON values (sets sorted, enums by value): {config}")
    expect(ValueError, "has no peft_config['x']", lambda: hotswap.lora_config_of(model, "x"))
    # The adapter alone moves into an arena; the base layer stays where it was.
    base, before = model.base_model.model.q_proj.base_layer.weight.data_ptr(), live.data_ptr()
    hotswap.arena_from_parameters(hotswap.lora_parameters(model))
    check(live.data_ptr() != before, "arena_from_parameters moved the adapter's parameters")
    check(model.base_model.model.q_proj.base_layer.weight.data_ptr() == base,
          "arena_from_parameters moved only the parameters given")


def init_infos_from_settings():
    """A launcher reaches every registered backend through the factory, by name alone."""
    factory = hotswap.WeightTransferTrainerFactory
    for backend in factory.registered_backends():
        info = factory.init_info_from_settings(backend, rank=0, world_size=2)
        check(info.backend == backend, f"{backend}: built a {type(info).__name__}")
    gloo = factory.init_info_from_settings("gloo", rank=1, world_size=3, master_port=29512,
                                           packed=False, timeout=7.5)
    check(isinstance(gloo, hotswap.GlooTrainerInitInfo), "gloo's init info keeps its class")
    check((gloo.rank, gloo.world_size, gloo.master_port, gloo.packed, gloo.timeout) ==
          (1, 3, 29512, False, 7.5), "gloo's init info took the settings")
    check("shm-window" in factory.settings_read("shm"), "shm reads shm-window")
    check("shm-window" not in factory.settings_read("gloo"), "gloo does not read shm-window")
    expect(ValueError, "Invalid weight transfer backend: carrier_pigeon",
           lambda: factory.init_info_from_settings("carrier_pigeon", rank=0))


def against_a_worker(worker, model, tensors):
    factory = hotswap.WeightTransferTrainerFactory
    with hotswap.WorkerProcess(worker, model, "shm") as w:
        client = hotswap.ZmqWeightSyncClient(w.endpoint, timeout=30)
        info = hotswap.ShmTrainerInitInfo(1, rank=0, timeout=30)
        good = {name: t.clone() for name, t in tensors.items()}
        first = next(iter(good))

        def serves(version):
            check(client.call("weight_info")["weight_version"] == version,
                  f"the worker should serve {version}, serves "
                  f"{client.call('weight_info')['weight_version']}")
            client.call("generate", {"prompt_token_ids": [1, 2], "max_tokens": 2})

        engine = factory.trainer_init(info, client=client, source=ListSource(good))
        engine.push(weight_version="v1", verify=True)
        serves("v1")
        engine.shutdown()

        # A source written for vLLM 0.34 plugs in unchanged.
        engine = factory.trainer_init(info, client=client, source=Vllm034Source(good))
        engine.push(weight_version="v034", verify=True)
        serves("v034")
        engine.shutdown()
        client.call("update_weight_version", {"new_version": "v1"})  # what the checks below expect

        # A tensor of the wrong dtype, or one on the meta device: named, and nothing lost.
        wrong_dtype = ListSource(good, {first: good[first].double()})
        engine = factory.trainer_init(info, client=client, source=wrong_dtype)
        expect(ValueError, "metadata disagrees with iteration",
               lambda: engine.push(weight_version="v2"))
        engine.shutdown()
        serves("v1")
        on_meta = ListSource(good, {first: torch.empty_like(good[first], device="meta")})
        engine = factory.trainer_init(info, client=client, source=on_meta)
        expect(ValueError, "as a meta tensor", lambda: engine.push(weight_version="v2"))
        engine.shutdown()
        serves("v1")
        wrong_shape = ListSource(good, {first: good[first].flatten()[:1]})
        engine = factory.trainer_init(info, client=client, source=wrong_shape)
        expect(ValueError, "metadata disagrees", lambda: engine.push(weight_version="v2"))
        engine.shutdown()
        not_a_pair = ListSource(good, {first: "a string"})
        engine = factory.trainer_init(info, client=client, source=not_a_pair)
        expect(TypeError, "must be a torch.Tensor, got str", lambda: engine.push())
        engine.shutdown()
        serves("v1")

        # Exceptions raised inside a Python source keep their kind and say where they came from.
        raising = ListSource(good, raise_in_iter=ValueError("bad shard"))
        engine = factory.trainer_init(info, client=client, source=raising)
        expect(ValueError, "WeightSource.__iter__() raised ValueError: bad shard",
               lambda: engine.push())
        engine.shutdown()
        for kind in (TimeoutError, hotswap.TransferError):
            raising = ListSource(good, raise_in_iter=kind("stalled"))
            engine = factory.trainer_init(info, client=client, source=raising)
            expect(kind, f"raised {kind.__name__}: stalled", lambda: engine.push())
            engine.shutdown()
        raising = ListSource(good, raise_in_iter=KeyError("gone"))
        engine = factory.trainer_init(info, client=client, source=raising)
        expect(RuntimeError, "WeightSource.__iter__() raised KeyError", lambda: engine.push())
        engine.shutdown()
        serves("v1")

        # A closed engine says so, whichever way it was closed.
        with factory.trainer_init(info, client=client, source=ListSource(good)) as engine:
            engine.push(weight_version="v3")
        check(engine.closed, "the engine should be closed after its with block")
        expect(RuntimeError, "was shut down", lambda: engine.push())
        expect(RuntimeError, "was shut down", lambda: engine.send_weights())
        expect(RuntimeError, "was shut down", lambda: engine.is_sender)
        engine.shutdown()  # twice is harmless
        expect(ValueError, "send_weights(patches) is for the sparse backends",
               lambda: factory.trainer_init(info, client=client, source=ListSource(good))
               .send_weights([("w", torch.zeros(1, dtype=torch.int32), torch.zeros(1), [1])]))
        engine = factory.trainer_init(info, client=client, source=ListSource(good))
        expect(TypeError, "weight_version must be a str", lambda: engine.push(weight_version=3))
        expect(ValueError, "call push(weight_version=...)",
               lambda: engine.send_weights(weight_version="v4"))
        engine.shutdown()

        # shutdown() while a push runs on another thread is refused, not a use after free.
        class Slow(ListSource):
            def __iter__(self):
                for item in super().__iter__():
                    time.sleep(0.05)
                    yield item

        engine = factory.trainer_init(info, client=client, source=Slow(good))
        pushing = threading.Thread(target=lambda: engine.push(weight_version="slow"))
        pushing.start()
        time.sleep(0.1)
        expect(RuntimeError, "a push is running on another thread", engine.shutdown)
        pushing.join()
        engine.shutdown()
        serves("slow")

        # The worker's errors come back as their kinds, with vLLM's messages.
        expect(RuntimeError, "start_weight_update must be called before update_weights.",
               lambda: client.update_weights({"names": []}))
        expect(ValueError, "", lambda: client.call("weight_checker", {"action": "nonsense"}))
        silent = hotswap.ZmqWeightSyncClient(f"tcp://127.0.0.1:{hotswap.free_port()}",
                                             timeout=0.3)
        expect(TimeoutError, "", silent.start_weight_update)

        # The pure-Python client drives a C++ engine, and its HotswapError keeps the worker's
        # kind on the way through: here a worker's ValueError (bad params) raised by start.
        class BadStart(hotswap.HotswapWeightSyncClient):
            def start_weight_update(self):
                self.call("weight_checker", {"action": "nonsense"})

        with factory.trainer_init(info, client=BadStart(w.endpoint, timeout=30),
                                  source=ListSource(good)) as engine:
            expect(ValueError, "client.start_weight_update() raised HotswapError", engine.push)
        py_client = hotswap.HotswapWeightSyncClient(w.endpoint, timeout=30)
        with factory.trainer_init(info, client=py_client, source=ListSource(good)) as engine:
            engine.push(weight_version="via-python-client", verify=True)
        serves("via-python-client")

        # The GIL is released while the bytes move: another thread runs during a push.
        big = {name: t.clone() for name, t in good.items()}
        big_source = hotswap.TensorListSource(list(big.items()))
        ticks = []
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.0005)

        with factory.trainer_init(info, client=client, source=big_source) as engine:
            ticker = threading.Thread(target=tick)
            ticker.start()
            time.sleep(0.01)
            start = time.perf_counter()
            for _ in range(20):  # long enough that a loaded machine still schedules the ticker
                engine.push(weight_version="gil", verify=True)
            end = time.perf_counter()
            stop.set()
            ticker.join()
        during = [t for t in ticks if start < t < end]
        check(len(during) >= 3, f"another thread ran {len(during)} times during {1e3 * (end - start):.1f} ms "
                                "of pushes: the GIL was held")
        serves("gil")


def main(worker, make):
    tmp = tempfile.mkdtemp(prefix="hotswap-pybind-")
    model = os.path.join(tmp, "model")
    subprocess.run([make, "--arch", "llama", "--layers", "2", "--hidden-size", "64",
                    "--intermediate-size", "96", "--heads", "4", "--kv-heads", "2", "--vocab",
                    "128", "--seed", "3", "--out", model], check=True, stdout=subprocess.DEVNULL)
    tensors = hotswap.load_checkpoint(model)
    types_and_values(tensors)
    vllm_034_forms()
    lora_sources()
    init_infos_from_settings()
    against_a_worker(worker, model, tensors)
    if FAILURES:
        print("python bindings: FAILED")
        for failure in FAILURES:
            print("  -", failure)
        sys.exit(1)
    print("python bindings: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
