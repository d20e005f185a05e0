"""Run an estimated configuration for real, to judge the estimate against it (suite.compare).

`measure_beside` runs the estimated config for real, as many steps, through the suite's launcher (gloo
workers on CPU; NCCL on CUDA, where the memory meter's peak is torch.cuda.max_memory_allocated), so
both numbers come from the same loop and meters.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from suite.config import RunConfig

# the estimate command takes the comparison from here with the run it judges


def measured_config(estimated: dict, cfg: RunConfig, device: str, results: str | Path) -> RunConfig:
    """`cfg` as a real run of the estimate's steps on `device`, with the cheapest closing evaluation."""
    return dataclasses.replace(
        cfg,
        device=device,
        nproc=estimated["parallel"]["world_size"],
        tokens=float(estimated["totals"]["tokens"]),
        flops=None,
        time_s=None,
        target=None,
        meters=True,
        run_id=None,
        results=str(results),
        eval_every=estimated["totals"]["steps"] + 1,
        eval_batches=1,
        eval_batch=1,
        variant=dict(cfg.variant),
    )


def measure_beside(estimated: dict, cfg: RunConfig, device: str, results: str | Path) -> dict:
    """Run the estimated config for real; returns the measured record (raises if the run failed)."""
    from suite.launch import launch
    from suite.records import read_record

    record = read_record(launch(measured_config(estimated, cfg, device, results)))
    if record["status"] != "complete":
        raise RuntimeError(f"the measured run {record['run_id']} ended {record['status']}: {record.get('error')}")
    return record
