"""The checks of one run's configuration before anything launches: every one that needs no worker, each a UsageError
naming the fix. The settings' own checks are declared with them (suite/config.py check_settings, run with the limits:
suite/run/limits.py); here they meet the budget, the model, the method's and optimizer's parameters, this machine's
limits, the data and the results folder. `run`, `estimate` and `reproduce` share them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from suite.config import RunConfig
from suite.errors import UsageError


def check_config(cfg: RunConfig, machine: bool = True) -> None:
    """Every check that needs no worker; raises UsageError with the fix. `machine`: also against this
    machine's memory and cores (suite/run/limits.py)."""
    from suite import data, models
    from suite.run import limits, optim, protocols, strategy

    try:
        protocols.from_args(cfg.tokens, cfg.flops, cfg.time_s, cfg.target, cfg.max_tokens)
        kind = models.kind_of(cfg.model)
        method_params, _ = optim.split_variant(cfg)
        limits.check(cfg, machine)
        _check_data(cfg.data or data.default_data_for(kind), cfg.data_root)
        strategy.get_strategy(cfg, method_params).check(cfg.nproc)
        if cfg.evals:
            from suite.evals import check_evals

            check_evals([n for n in cfg.evals.split(",") if n])
    except (ValueError, FileNotFoundError, ConnectionError) as err:
        raise UsageError(str(err)) from None
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA device is visible; use --device cpu")
        if cfg.nproc > torch.cuda.device_count():
            raise UsageError(f"--nproc {cfg.nproc} but only {torch.cuda.device_count()} GPUs; lower --nproc")
    check_writable(Path(cfg.results))


def _check_data(name: str, root: str | None) -> None:
    from suite import data

    if name not in data.NAMES:
        raise ValueError(f"unknown data set {name!r}; choose one of: {', '.join(data.NAMES)}")
    if root is not None and name in data.EMBEDDED:
        raise ValueError(f"{name!r} is embedded and reads no data root: drop --data-root")
    if root is not None and not Path(root).exists():
        raise FileNotFoundError(
            f"no data at --data-root {root!r}; download it first (see README, Data) "
            f"or drop --data-root to use the embedded default"
        )


def check_writable(folder: Path) -> None:
    """A folder records can be written to (made if missing); UsageError naming --results otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as err:
        raise UsageError(
            f"cannot write run records to {str(folder)!r} ({err.strerror}); choose a writable folder with --results DIR"
        ) from None
