"""A trained model on disk: its full state dict with the name and config that rebuild it.

One file per model, written atomically (temporary file, fsync, rename). The full state dict comes
from torch.distributed.checkpoint's get_model_state_dict, which gathers an FSDP2 model's shards and
returns a plain module's own state, so the file loads into a plain single-device model either way.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from suite.atomic import atomic_write
from suite.models import build_model, model_config

FORMAT = 1


def full_state(model: nn.Module) -> dict:
    """The full state dict as CPU tensors on rank 0, empty on other ranks.

    Under FSDP2 this gathers the shards, a collective: call it on every rank.
    """
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def plain_model(model_name: str, config: dict, state: dict, device: torch.device | str = "cpu") -> nn.Module:
    """A single-device model_name with these weights: what rank 0 evaluates after full_state."""
    with torch.device(device):
        model = build_model(model_name, **config)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"weights do not fit {model_name} with this config ({str(err).splitlines()[0]})") from None
    return model


def save_checkpoint(
    model: nn.Module, path: str | Path, model_name: str, config: dict, data: str | None = None
) -> Path | None:
    """Write model's full state to path on rank 0; returns the path there, None on other ranks.

    Call it on every rank of a distributed run: gathering an FSDP2 model's full state is a collective.
    config is the model's full config (suite.models.model_config); data names the set it trained on.
    """
    config = model_config(model_name, **config)
    state = full_state(model)
    if dist.is_initialized() and dist.get_rank() != 0:
        return None
    payload = {"format": FORMAT, "model": model_name, "config": config, "data": data, "state_dict": state}
    return atomic_write(path, lambda f: torch.save(payload, f), binary=True)


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict]:
    """The model rebuilt on device with the saved weights, and the rest of the file (model, config, data)."""
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"no checkpoint at {str(path)!r}; write one with suite.evals.checkpoint.save_checkpoint"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        raise ValueError(f"{path}: not a readable checkpoint ({str(err).splitlines()[0]})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path}: not a suite checkpoint of format {FORMAT}; save it with save_checkpoint")
    try:
        model = plain_model(payload["model"], payload["config"], payload["state_dict"], device)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return model, {k: v for k, v in payload.items() if k != "state_dict"}
