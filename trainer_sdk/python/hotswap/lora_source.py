"""The trainer side of a LoRA adapter: its tensors and its config out of a PEFT model, for a push
that updates the adapter instead of the model (hotswap's extension of the contract):

    source = hotswap.LoraSource(peft_model)
    with hotswap.WeightTransferTrainerFactory.trainer_init(info, client=client,
                                                           source=source) as engine:
        ...  # train
        engine.push(lora_name="policy", lora_config=hotswap.lora_config_of(peft_model),
                    weight_version=f"step-{step}", verify=True)

Nothing here imports `peft`: a model is read by PEFT's parameter names, so a model that names
its LoRA layers as PEFT does (`<module>.lora_A.<adapter>.weight`) works as well.
"""

import dataclasses
import enum
import re

from ._C import ParamMeta, WeightSource
from .module_source import materialize_full_tensor

# A live PEFT model's name of an adapter's tensor: `<module>.lora_A.<adapter>.weight`.
_LIVE_NAME = re.compile(r"^(?P<module>.+\.lora_[AB])\.(?P<adapter>[^.]+)\.weight$")


def lora_parameters(module, adapter_name="default"):
    """[(name, parameter)] of every lora_A and lora_B weight of adapter `adapter_name` in
    `module`, named as PEFT saves them (`...q_proj.lora_A.weight`: the adapter's name dropped,
    as `get_peft_model_state_dict` and adapter_model.safetensors have them). A ValueError when
    the module has none."""
    found = []
    for name, parameter in module.named_parameters():
        match = _LIVE_NAME.match(name)
        if match and match["adapter"] == adapter_name:
            found.append((match["module"] + ".weight", parameter))
    if not found:
        raise ValueError(
            f"{type(module).__name__} has no LoRA weights of adapter '{adapter_name}' (PEFT names "
            f"them `<module>.lora_A.{adapter_name}.weight` and `<module>.lora_B.{adapter_name}"
            ".weight`)")
    return found


class LoraSource(WeightSource):
    """`WeightSource` over one LoRA adapter of a PEFT model: its A and B weights by PEFT's saved
    names, the live parameters themselves (nothing is copied until a backend sends them; a DTensor
    is gathered). Push it with `lora_name=`: the round updates that adapter on the workers, and
    `verify=True` compares their digests of the adapter with these tensors."""

    def __init__(self, module, adapter_name="default"):
        super().__init__()
        self._module = module
        self._adapter_name = adapter_name
        lora_parameters(module, adapter_name)  # refuses a model without the adapter now

    def metadata(self):
        return [ParamMeta(name, p.dtype, tuple(p.shape))
                for name, p in lora_parameters(self._module, self._adapter_name)]

    def __iter__(self):
        for name, p in lora_parameters(self._module, self._adapter_name):
            yield name, materialize_full_tensor(p.detach())


def _json_ready(value):
    if isinstance(value, enum.Enum):
        return _json_ready(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json_ready(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_json_ready(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def lora_config_of(model, adapter_name="default"):
    """Adapter `adapter_name`'s config as PEFT writes adapter_config.json (a dict of JSON values:
    `r`, `lora_alpha`, `target_modules`, `use_rslora`, ...), what a push's `lora_config` takes.
    Reads `model.peft_config[adapter_name]` (a PEFT model's LoraConfig, or a dict of those
    fields); a ValueError without it."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or adapter_name not in configs:
        raise ValueError(f"{type(model).__name__} has no peft_config['{adapter_name}']: give the "
                         "push's lora_config as a dict of adapter_config.json's fields instead")
    config = configs[adapter_name]
    if isinstance(config, dict):
        fields = config
    elif hasattr(config, "to_dict"):
        fields = config.to_dict()
    else:
        fields = vars(config)
    return _json_ready(fields)
