"""A trained model on disk: its full state dict with the name and config that rebuild it.

One file per model, written atomically (temporary file, fsync, rename). The full state dict comes
from torch.distributed.checkpoint's get_model_state_dict, which gathers an FSDP2 model's shards and
returns a plain module's own state, so the file loads into a plain single-device model either way.

Loading trusts nothing in the file: torch.load with weights_only=True builds tensors and plain data only (a
pickle that names code is refused, so none runs), and the model the file names is first built on the meta
device, where a config far larger than the weights it came with costs no memory and stops early.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

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
    """The model rebuilt on device with the saved weights, and the rest of the file (model, config, data).

    A file that is not such a checkpoint (corrupt, truncated, another format, code in its pickle, weights that
    do not fit the model it names) raises a one-line ValueError.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"no checkpoint at {str(path)!r}; write one with suite.evals.model_file.save_checkpoint"
        )
    try:
        payload = _payload(_read(path))
        _check_fits(payload["model"], payload["config"], payload["state_dict"])
        model = plain_model(payload["model"], payload["config"], payload["state_dict"], device)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return model, {k: v for k, v in payload.items() if k != "state_dict"}


def load_state(path: str | Path, model_name: str, config: dict) -> dict[str, torch.Tensor]:
    """The weights of the model file at `path`, checked to be of `model_name` with `config` (a run that starts
    from another's final model: --set init_from=PATH); a one-line ValueError otherwise."""
    if not Path(path).is_file():
        raise ValueError(f"init_from: no model file at {str(path)!r}; write one with --checkpoint PATH first")
    try:
        payload = _payload(_read(path))
        _check_fits(payload["model"], payload["config"], payload["state_dict"])
    except ValueError as err:
        raise ValueError(f"init_from {path}: {err}") from None
    wanted = model_config(model_name, **config)
    if payload["model"] != model_name or payload["config"] != wanted:
        differ = sorted(k for k in wanted if payload["config"].get(k) != wanted[k])
        raise ValueError(
            f"init_from {path}: it holds {payload['model']}, this run builds {model_name}"
            + (f" (config differs in {', '.join(differ)})" if differ else "")
        )
    return payload["state_dict"]


def trajectory_path(path: str | Path, step: int) -> Path:
    """Where --set save_every writes the model after `step` steps: PATH with -stepNNNNNN before its suffix."""
    path = Path(path)
    return path.with_name(f"{path.stem}-step{step:06d}{path.suffix}")


def _read(path: str | Path) -> Any:
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols on stderr; the error says enough
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's message: advice to load without weights_only (never, for a file we do not trust), the reason
        # in the paragraph before the pointer to its documentation, then that pointer
        paragraphs = [p.strip() for p in str(err).split("\n\n") if p.strip() and not p.startswith("Weights only")]
        reason = " ".join(paragraphs[-2].split()) if len(paragraphs) > 1 else ""
        raise ValueError(
            f"not a readable checkpoint: the weights-only loader refused it ({reason[:120] or 'unpickling failed'}); "
            "it holds more than tensors and plain data, or is corrupt; write it with save_checkpoint"
        ) from None
    except Exception as err:  # noqa: BLE001  (weights_only runs no code: whatever fails is a corrupt file)
        first = " ".join(str(err).split(". ")[0].split())[:120]
        what = f"{type(err).__name__}: {first}" if first else type(err).__name__
        raise ValueError(f"not a readable checkpoint, corrupt or truncated ({what}); write it again") from None


def _payload(payload: Any) -> dict:
    """The file's content, checked to be what save_checkpoint writes."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"not a suite checkpoint of format {FORMAT}; save it with save_checkpoint")
    shapes = {"model": str, "config": dict, "state_dict": dict}
    if bad := [k for k, kind in shapes.items() if not isinstance(payload.get(k), kind)]:
        raise ValueError(f"a checkpoint of format {FORMAT} needs {bad[0]!r} of type {shapes[bad[0]].__name__}")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in payload["state_dict"].items()):
        raise ValueError("its state_dict holds more than named tensors: not a file save_checkpoint wrote")
    if not all(isinstance(k, str) for k in payload["config"]):
        raise ValueError("its config has keys that are not names: not a file save_checkpoint wrote")
    return payload


def _check_fits(model_name: str, config: dict, state: dict) -> None:
    """Build the model the file names on the meta device (no memory) and compare every shape with the saved
    weights, so that a config far larger than its weights stops here, before real memory is allocated: more
    parameters registered than the file holds stops the build itself."""
    limit = 2 * len(state) + 16  # a parameter may be registered twice (tied, or a module replaced)
    registered = 0

    def count(module, name, param) -> None:
        nonlocal registered
        registered += 1
        if registered > limit:
            raise ValueError(f"{model_name} with this config has more parameters than the file's {len(state)}")

    handle = torch.nn.modules.module.register_module_parameter_registration_hook(count)
    try:
        with torch.device("meta"):
            expected = {k: v.shape for k, v in build_model(model_name, **config).state_dict().items()}
    except (TypeError, RuntimeError, OverflowError, ZeroDivisionError) as err:  # values no builder checks
        raise ValueError(f"config does not build {model_name} ({type(err).__name__}: {str(err)[:120]})") from None
    finally:
        handle.remove()
    found = {k: v.shape for k, v in state.items()}
    if expected != found:
        wrong = sorted(set(expected) ^ set(found), key=str) or [k for k in expected if expected[k] != found[k]]
        raise ValueError(f"weights do not fit {model_name} with this config (first difference: {wrong[0]!r})")
