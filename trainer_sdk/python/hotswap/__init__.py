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

Errors are vLLM's kinds: ValueError (bad input), RuntimeError (wrong state or order),
TimeoutError (a wait ran out), hotswap.TransferError (a data plane failed; a RuntimeError).
"""

try:
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
    from .module_source import ModuleSource, arena_from_module  # noqa: F401

    SharedWeightArena.from_module = staticmethod(arena_from_module)
    HAVE_TRAINER_SDK = True
except ImportError as _error:  # the client alone: a build without the extension, or no torch
    HAVE_TRAINER_SDK = False
    _TRAINER_SDK_IMPORT_ERROR = _error

    def __getattr__(name):
        # The trainer SDK's names say why they are missing instead of a bare AttributeError.
        raise ImportError(f"hotswap.{name} is part of the trainer SDK, which did not import: "
                          f"{_TRAINER_SDK_IMPORT_ERROR}") from _TRAINER_SDK_IMPORT_ERROR

from .client import CONTROL_METHODS, HotswapError, HotswapWeightSyncClient  # noqa: F401,E402
from .worker_process import WorkerProcess, free_port  # noqa: F401,E402
