"""hotswap for Python trainers: push a PyTorch model's weights into hotswap workers.

One import gives both halves:

* the trainer SDK (the `hotswap._C` extension): init infos of every backend, the factory,
  engines, weight sources, the shared weight arena, the ZeroMQ and fan-out clients;
* `HotswapWeightSyncClient` (pure Python, pyzmq only): every control method of a worker.

    import hotswap
    client = hotswap.FanOutClient(["tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"])
    info = hotswap.GlooTrainerInitInfo("127.0.0.1", 29500, world_size=3, rank=0)
    with hotswap.WeightTransferTrainerFactory.trainer_init(info, client=client,
                                                           source=model) as engine:
        for step in range(steps):
            ...  # train
            engine.push(weight_version=f"step-{step}", verify=True)

`hotswap.HotswapFanOutClient` is the pure-Python twin of `FanOutClient`; `hotswap.ray` (with
Ray installed) places worker groups and trainer ranks on a Ray cluster.

A LoRA adapter alone is pushed the same way: `source=hotswap.LoraSource(peft_model)` and
`engine.push(lora_name="policy", lora_config=hotswap.lora_config_of(peft_model), verify=True)`.

Errors are vLLM's kinds: ValueError (bad input), RuntimeError (wrong state or order),
TimeoutError (a wait ran out), hotswap.TransferError (a data plane failed; a RuntimeError).
"""


def _require_the_torch_built_against():
    """Refuses, by name, a torch other than the one the extension was built against.

    A C++ extension links one libtorch's symbols and class layouts: loaded under another torch
    it does not fail cleanly but aborts the interpreter (`std::system_error`, seen with an
    extension for torch 1.13 under torch 2.14). So the check runs before `_C` is loaded.
    """
    try:
        from ._build_info import TORCH_VERSION as built
    except ImportError:
        return  # the pure-Python package alone: no extension to protect
    try:
        import torch
    except ImportError:
        return  # no torch: the client alone, as below
    if torch.__version__ != built:
        raise ImportError(
            f"hotswap's extension was built against torch {built}, but this interpreter "
            f"imports torch {torch.__version__} (from {torch.__file__}); an extension only "
            f"loads into the torch it was built for: reinstall hotswap in this environment "
            f"(pip install --no-build-isolation .)")


# HOTSWAP_CLIENT_ONLY=1 loads the client alone, as in an interpreter without torch: for processes
# that only drive workers (hotswap.ray's replica actors), where the trainer SDK would cost torch's
# import, 1.5 s and 600 MB of resident memory per process.
_CLIENT_ONLY = __import__("os").environ.get("HOTSWAP_CLIENT_ONLY") == "1"
if not _CLIENT_ONLY:
    _require_the_torch_built_against()

try:
    if _CLIENT_ONLY:
        raise ImportError("HOTSWAP_CLIENT_ONLY=1 is set in this process's environment")
    import torch as _torch  # noqa: F401  (the extension's tensors and dtypes are torch's)
    from ._C import (  # noqa: F401
        DiskTrainerInitInfo,
        FanOutClient,
        GlooTrainerInitInfo,
        IPCTrainerInitInfo,
        IpcTrainerInitInfo,
        NCCLTrainerInitInfo,
        NcclTrainerInitInfo,
        ParamMeta,
        Placement,
        Replicate,
        Shard,
        SharedWeightArena,
        ShmTrainerInitInfo,
        SparseGlooTrainerInitInfo,
        SparseNCCLTrainerInitInfo,
        SparseNcclTrainerInitInfo,
        SparsePatch,
        TensorListSource,
        TrainerInitInfo,
        TrainerWeightTransferEngine,
        TransferError,
        WeightSource,
        WeightSyncClient,
        WeightTransferTrainerFactory,
        ZmqWeightSyncClient,
        layerwise_groups,
        load_checkpoint,
    )
    from .lora_source import LoraSource, lora_config_of, lora_parameters  # noqa: F401
    from .module_source import (  # noqa: F401
        ModuleSource,
        arena_from_module,
        arena_from_parameters,
    )

    SharedWeightArena.from_module = staticmethod(arena_from_module)
    SharedWeightArena.from_parameters = staticmethod(arena_from_parameters)
    HAVE_TRAINER_SDK = True
except ImportError as _error:  # the client alone: a build without the extension, or no torch
    HAVE_TRAINER_SDK = False
    _TRAINER_SDK_IMPORT_ERROR = _error

    def __getattr__(name):
        # The trainer SDK's names say why they are missing instead of a bare AttributeError.
        raise ImportError(f"hotswap.{name} is part of the trainer SDK, which did not import: "
                          f"{_TRAINER_SDK_IMPORT_ERROR}") from _TRAINER_SDK_IMPORT_ERROR

from .client import (  # noqa: F401,E402
    CONTROL_METHODS,
    DEFAULT_TIMEOUT_S,
    HotswapError,
    HotswapWeightSyncClient,
)
from .fan_out_client import HotswapFanOutClient  # noqa: F401,E402
from .worker_process import WorkerProcess, free_port  # noqa: F401,E402
