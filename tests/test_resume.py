"""A run resumed from a checkpoint equals the uninterrupted run bit for bit: every method and optimizer.

One launch per world size runs every case (tests/resume_worker.py): the uninterrupted run checkpoints at
step 4 of 6, and a second run continues from a copy of that checkpoint. Equal means the same training and
validation losses at every step, the same totals, meters' sections, parameter groups and protocol; only
what is timed (wall-clock, throughput), the process's RSS (which differs between any two runs) and FSDP2's split
at the peak (tests/peaks.py) may differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.records import read_record
from tests.conftest import MUON_MODEL
from tests.peaks import exact_memory, peaks_agree

ROOT = Path(__file__).resolve().parent.parent
EVERY = 4
FL = ["F=2"]  # a period of 2 keeps the meters' window before the checkpoint
W64 = f"model={MUON_MODEL[1]}"  # the matrix optimizers' runs (tests/conftest.py says why)


def case(name: str, method: str, *sets: str, optimizer: str = "adamw") -> dict:
    return {"name": name, "method": method, "sets": list(sets), "optimizer": optimizer, "every": EVERY}


CASES = {
    2: [
        case("ddp", "ddp"),
        case("fsdp", "fsdp"),
        case("b-sdp", "b-sdp", "C=0.5"),
        case("n-sdp", "n-sdp", "C=0.5"),
        case("bb-sdp", "bb-sdp", "C=0.5"),
        case("fl-fsdp", "fl-fsdp", "G=1", *FL),
        case("fl-hsdp", "fl-hsdp", "G=1", *FL),
        case("diloco", "diloco", "G=1", *FL),
        case("local-sgd", "local-sgd", "G=1", *FL),
        case("sdpa-math", "sdpa-math"),
        case("sdpa-flash", "sdpa-flash"),
        case("muon-ddp", "ddp", W64, optimizer="muon"),
        case("dion-ddp", "ddp", "rank_fraction=0.25", optimizer="dion"),
        case("dion-fsdp", "fsdp", "rank_fraction=0.25", optimizer="dion"),
        case("muon-fsdp", "fsdp", W64, optimizer="muon"),
        case("soap-fsdp", "fsdp", W64, "precondition_frequency=2", optimizer="soap"),
        case("sgd-ddp", "ddp", optimizer="sgd"),
    ],
    3: [case("ddp", "ddp"), case("fsdp", "fsdp"), case("b-sdp", "b-sdp", "C=0.67")],
    4: [
        case("hsdp", "hsdp", "shard=2"),
        case("fl-fsdp", "fl-fsdp", "G=2", *FL),
        case("diloco", "diloco", "G=2", *FL),
        case("n-sdp", "n-sdp", "C=0.5"),
    ],
}
TOKENS = 6 * 2 * 32  # 6 steps of micro-batch 2 x 32 tokens per data replica


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict[int, Path]:
    """Each world size's launch: its folder of records."""
    out = {}
    for world, cases in CASES.items():
        folder = tmp_path_factory.mktemp(f"resume{world}")
        spec = folder / "cases.json"
        spec.write_text(json.dumps([{**c, "tokens": TOKENS * world} for c in cases]))
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
            + ["tests/resume_worker.py", str(folder), str(spec)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            timeout=900,
        )
        errors = [line for line in proc.stderr.splitlines() if "Error" in line]
        assert proc.returncode == 0, "\n".join(errors[-6:]) or proc.stderr[-3000:]
        out[world] = folder
    return out


TIMED = {"wall_s", "tokens_per_s", "samples_per_s"}


def _untimed(rec: dict) -> dict:
    keys = tuple(k for k in rec["memory"]["per_rank"][0] if k not in ("rss_peak_bytes", "rank"))
    return {
        "curve": [{k: v for k, v in p.items() if k not in TIMED} for p in rec["curve"]],
        "totals": {k: v for k, v in rec["totals"].items() if k not in TIMED},
        "memory": exact_memory(rec, keys),
        "comm": rec["comm"],
        "protocol": rec["protocol"],
        "optimizer": rec["optimizer"],
        "variant": rec["variant"],
        "evals": rec["evals"],
    }


@pytest.mark.slow
@pytest.mark.parametrize("world,name", [(w, c["name"]) for w, cases in CASES.items() for c in cases])
def test_resumed_run_equals_uninterrupted(resumed, world, name):
    a = read_record(resumed[world] / f"{name}-a.json")
    b = read_record(resumed[world] / f"{name}-b.json")
    assert a["status"] == b["status"] == "complete"
    assert [p["step"] for p in a["curve"]] == list(range(1, 7))
    assert _untimed(b) == _untimed(a)
    assert peaks_agree(a, b)
    assert b["faults"]["resumes"][0]["from_step"] == EVERY
    assert a["faults"]["checkpoints_written"] == 1  # step 6 ends the run before the next (8)
