"""One torchrun worker of tests/test_resume.py: for each case, an uninterrupted run that checkpoints at step
`every`, then a second run resumed from a copy of that checkpoint; rank 0 writes both records.

Cases run one after the other in the same workers (one launch for all, which keeps the test in budget);
each run makes its own process groups, and the resume restores every RNG, so the order of cases cannot
make two runs agree by accident.

    python -m torch.distributed.run --standalone --nproc-per-node N tests/resume_worker.py OUT CASES.json
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import torch.distributed as dist

from suite.config import RunConfig, apply_sets
from suite.run import checkpoint
from suite.run.train import Worker


def run(cfg: RunConfig) -> None:
    worker = Worker(cfg)
    worker.build()
    worker.run()


def main(out: Path, cases: list[dict]) -> None:
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    for case in cases:
        name, every = case["name"], case["every"]
        cfg = RunConfig(
            method=case["method"],
            nproc=world,
            tokens=case["tokens"],
            optimizer=case.get("optimizer", "adamw"),
            results=str(out),
            checkpoint_dir=str(out / "checkpoints"),
            checkpoint_every=every,
            run_id=f"{name}-a",
            seq_len=32,
            micro_batch=2,
            eval_every=every,
            eval_batches=2,
            eval_batch=4,
            log_every=1,
        )
        apply_sets(cfg, case.get("sets", []))
        run(cfg)
        resumed = dataclasses.replace(cfg, run_id=f"{name}-b", resume=True, variant=dict(cfg.variant))
        source, target = checkpoint.run_folder(cfg), checkpoint.run_folder(resumed)
        if dist.get_rank() == 0:
            target.mkdir(parents=True)
            shutil.copytree(source / f"step-{every:06d}", target / f"step-{every:06d}")
        dist.barrier()
        run(resumed)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
