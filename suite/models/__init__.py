"""The model registry: names to builders and configs, and the residual blocks strategies wrap.

Models are single-device; DDP, FSDP2, activation checkpointing and SDP masks are applied from
outside, per block, to what blocks_of returns.
"""

import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Literal

from torch import nn

from suite.models.llama import LLAMA_CONFIGS, Block, Llama, LlamaConfig
from suite.models.moe import MOE_CONFIGS, MoeConfig, MoeLlama


def block_types() -> tuple[type[nn.Module], ...]:
    """The residual block classes. torchvision's are named only once torchvision is imported (no model of it
    can exist before): importing it costs every process that trains a language model about 1 s."""
    if "torchvision" not in sys.modules:
        return (Block,)
    from torchvision.models.resnet import BasicBlock
    from torchvision.models.swin_transformer import SwinTransformerBlock

    return (Block, BasicBlock, SwinTransformerBlock)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: Literal["lm", "image"]
    build: Callable[..., nn.Module]  # called with every field of `defaults` as a keyword argument
    defaults: Mapping[str, Any]  # the config fields an override may change, with their default values


def _build_llama(**config: Any) -> nn.Module:
    return Llama(LlamaConfig(**config))


def _build_moe(**config: Any) -> nn.Module:
    return MoeLlama(MoeConfig(**config))


def _vision(builder: str) -> Callable[..., nn.Module]:
    def build(**config: Any) -> nn.Module:
        from suite.models import vision

        return getattr(vision, builder)(**config)

    return build


_IMAGE_DEFAULTS = MappingProxyType({"num_classes": 10, "in_channels": 3})

MODELS: dict[str, ModelSpec] = {
    **{name: ModelSpec(name, "lm", _build_llama, MappingProxyType(asdict(cfg))) for name, cfg in LLAMA_CONFIGS.items()},
    **{name: ModelSpec(name, "lm", _build_moe, MappingProxyType(asdict(cfg))) for name, cfg in MOE_CONFIGS.items()},
    "resnet18": ModelSpec("resnet18", "image", _vision("resnet18"), _IMAGE_DEFAULTS),
    "wrn18": ModelSpec("wrn18", "image", _vision("wrn18"), _IMAGE_DEFAULTS),
    "swin-t": ModelSpec("swin-t", "image", _vision("swin_t"), _IMAGE_DEFAULTS),
}


def spec_of(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model '{name}'; choose one of: {', '.join(MODELS)}")
    return MODELS[name]


def kind_of(name: str) -> str:
    return spec_of(name).kind


def _check_type(key: str, value: Any, default: Any) -> None:
    """Overrides often arrive from a command line or YAML: reject a string where a number belongs."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"config key '{key}' must be {type(default).__name__}, got {value!r}")


def model_config(name: str, **overrides: Any) -> dict:
    """The full, JSON-serialisable config of model `name` with `overrides` applied."""
    spec = spec_of(name)
    unknown = sorted(set(overrides) - set(spec.defaults))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown} for model '{name}'; valid keys: {', '.join(spec.defaults)}")
    for key, value in overrides.items():
        _check_type(key, value, spec.defaults[key])
    return {**spec.defaults, **overrides}


def build_model(name: str, **overrides: Any) -> nn.Module:
    """Build model `name` on the current default device (use `with torch.device("meta")` to defer)."""
    return spec_of(name).build(**model_config(name, **overrides))


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The repeated residual blocks of `model`, in forward order: the units to wrap one by one."""
    types = block_types()
    blocks = [m for m in model.modules() if isinstance(m, types)]
    if not blocks:
        raise ValueError(
            f"{type(model).__name__} has no residual blocks of a known type "
            f"({', '.join(t.__name__ for t in types)}); build it with build_model"
        )
    return blocks


def num_params(model: nn.Module) -> int:
    """Distinct parameters (a tied weight counts once); works on meta-device models."""
    return sum(p.numel() for p in model.parameters())
