"""Sources over a `torch.nn.Module`, the common case, and its parameters moved into a
`SharedWeightArena`."""

import torch

from ._C import ParamMeta, SharedWeightArena, WeightSource


def materialize_full_tensor(tensor):
    """A DTensor's full tensor (an all-gather across its mesh), or the tensor itself."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


class ModuleSource(WeightSource):
    """`WeightSource` over `module.named_parameters()` (vLLM's ModuleSource).

    Metadata reads each parameter's global dtype and shape, so it never gathers. Iteration
    yields the parameters themselves, detached (the live storage: nothing is copied until a
    backend sends it), calling `full_tensor()` on DTensors (FSDP). Parameters only, no buffers;
    tied parameters appear once, as named_parameters() gives them.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ModuleSource takes a torch.nn.Module, got {type(module).__name__}")
        self._module = module

    def metadata(self):
        return [ParamMeta(name, p.dtype, tuple(p.shape))
                for name, p in self._module.named_parameters()]

    def __iter__(self):
        for name, p in self._module.named_parameters():
            yield name, materialize_full_tensor(p.detach())


def arena_from_module(module: torch.nn.Module) -> SharedWeightArena:
    """Moves every parameter of `module` into a new SharedWeightArena sized for them, in place
    (each `Parameter` keeps its identity, so an optimizer built before or after sees the same
    parameters), and returns the arena. Training then updates the arena's bytes directly, and an
    shm engine given this arena sends them without a copy: its workers read them in place."""
    return arena_from_parameters(module.named_parameters())


def arena_from_parameters(named_parameters) -> SharedWeightArena:
    """arena_from_module over some parameters only, given as (name, parameter) pairs: a LoRA
    adapter's (`hotswap.lora_parameters(model)`), say, while the frozen base stays where it is."""
    params = list(named_parameters)
    for name, p in params:
        if p.device.type != "cpu":
            raise ValueError(f"parameter '{name}' is on {p.device}; a SharedWeightArena holds "
                             "CPU tensors")
    arena = SharedWeightArena(SharedWeightArena.bytes_for(
        [ParamMeta(name, p.dtype, tuple(p.shape)) for name, p in params]))
    with torch.no_grad():
        for name, p in params:
            p.data = arena.copy_in(name, p.data)
    return arena
