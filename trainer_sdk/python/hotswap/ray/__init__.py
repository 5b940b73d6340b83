"""hotswap on Ray: worker groups placed, watched and restarted by Ray, and trainer ranks placed
beside them, so that one trainer drives inference replicas on many machines.

    import ray, hotswap, hotswap.ray
    ray.init(address="auto")
    workers = hotswap.ray.WorkerGroup("/shared/ckpt", replicas=4, tensor_parallel_size=2,
                                      weight_transfer_config={"backend": "nccl"},
                                      resources_per_rank={"GPU": 1}, http=True)
    trainers = hotswap.ray.TrainerGroup(MyTrainer, ranks=2, resources_per_rank={"GPU": 1},
                                        args=(workers.connection(),))
    trainers.run("train", steps=100)
    ...
    trainers.shutdown(); workers.shutdown()

Every replica is one `hotswap-worker` (its tensor-parallel ranks with it, on one node) started
by an actor of its own, which restarts it through Ray's actor restarts when it dies; the group
says which replicas were replaced, so that the trainer's next init_weight_transfer_engine takes
them in. Control sockets are bound to each node's address with CURVE keys made for the group;
HTTP routes need the group's API key. Reference: docs/deployment.md.

Ray is an optional dependency: pip install 'hotswap[ray]'.
"""

try:
    import ray as _ray  # noqa: F401  (the top-level Ray package, not this one)
except ImportError as _error:
    raise ImportError("hotswap.ray needs Ray, which this interpreter cannot import "
                      f"({_error}); install it with: pip install 'hotswap[ray]' "
                      "(or pip install ray)") from _error

from .connection import GroupConnection, GroupKeys  # noqa: F401,E402
from .placement import PlacementError  # noqa: F401,E402
from .trainer_group import TrainerContext, TrainerGroup  # noqa: F401,E402
from .worker_group import WorkerGroup  # noqa: F401,E402
