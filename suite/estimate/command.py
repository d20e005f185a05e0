"""`python -m suite estimate`: one configuration's memory, FLOPs and bytes at any world size on fake tensors
(scale.py), written as a record; with `--measure`, the same steps run for real beside it (beside.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from suite.config import RunConfig
from suite.errors import UsageError
from suite.run.checks import check_config


def estimate_command(cfg: RunConfig, gpus_per_node: int, ranks: str, measure_device: str | None) -> int:
    """Estimate `cfg` (its nproc the world size) on nodes of `gpus_per_node`; `measure_device`: also run it for
    real there. Prints the estimate (and the comparison), the record's path last."""
    from suite.estimate.beside import compare, format_comparison, measure_beside
    from suite.estimate.record import format_estimate
    from suite.estimate.scale import check_estimable, estimate
    from suite.records import write_record

    if cfg.nproc < 1 or gpus_per_node < 1:
        raise UsageError(f"--world-size and --gpus-per-node must be at least 1, got {cfg.nproc} and {gpus_per_node}")
    check_config(cfg, machine=False)  # fake tensors: any world size and model fit
    try:
        check_estimable(cfg.method)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if measure_device is not None:
        check_config(dataclasses.replace(cfg, device=measure_device))
    rec = estimate(cfg, gpus_per_node, ranks)
    path = write_record(rec, Path(cfg.results) / f"{rec['run_id']}.json")
    print(format_estimate(rec))
    if measure_device is not None:
        measured = measure_beside(rec, cfg, measure_device, cfg.results)
        print(format_comparison(compare(rec, measured)))
    print(path)
    return 0
