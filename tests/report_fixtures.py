"""Valid run records for the claim and report tests: any method, seed, provenance and device.

Numbers are synthetic but shaped like real runs (a falling loss, a memory breakdown that sums to the
peak, an all-reduce ledger); `quality`, `speed` and `memory_scale` move one arm against another, and
each record is checked against the schema before it is returned.
"""

from __future__ import annotations

import atexit
import json
import math
import random
import shutil
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

from suite.judge.claims import load_claims
from suite.records import load_records, validate, write_record
from suite.report import build_report_for, build_site

PARAMS = 3_150_000
SEQ = 256


def make_record(
    method: str = "ddp",
    seed: int = 0,
    *,
    reproduction: str | None = "harness",
    baseline: bool | None = None,
    variant: dict | None = None,
    provenance: str = "measured",
    device: str = "cpu",
    world_size: int = 2,
    model: str = "llama-tiny",
    protocol: str = "tokens",
    steps: int = 8,
    quality: float = 0.0,
    speed: float = 1.0,
    memory_scale: float = 1.0,
    tier: str = "intra-node",
    status: str = "complete",
    evals: dict | None = None,
) -> dict:
    variant = variant or {}
    rng = random.Random(zlib.crc32(f"{method}|{variant}|{seed}|{provenance}|{device}|{world_size}".encode()))
    batch_tokens = world_size * 4 * SEQ
    step_s = 0.5 / speed * (1 + 0.03 * rng.random())
    curve = []
    for step in range(1, steps + 1):
        loss = 2.0 + quality + 3.5 * math.exp(-2.5 * step / steps) + 0.02 * rng.random()
        curve.append(
            {
                "step": step,
                "tokens": step * batch_tokens,
                "flops": 6.0 * PARAMS * step * batch_tokens,
                "wall_s": step * step_s,
                "train_loss": loss,
                "val_loss": loss + 0.05 if step % 2 == 0 else None,
            }
        )
    state = int(PARAMS * 4 * memory_scale)
    memory = []
    for rank in range(world_size):
        parts = {
            "params": state,
            "grads": state,
            "optimizer": 2 * state,
            "activations": int(5e6 * (1 + 0.1 * rank)),
            "other": int(1e6 + 1e5 * rng.random()),
        }
        memory.append({"rank": rank, "peak_bytes": sum(parts.values()), **parts, "rss_peak_bytes": None})
    payload = state * steps
    ops = [
        {
            "op": "all_reduce",
            "group": "dp",
            "tier": tier,
            "group_size": world_size,
            "count": 2 * steps,
            "bytes": payload,
            "wire_bytes": payload * 2 * (world_size - 1) / world_size,
        }
    ]
    tokens = steps * batch_tokens
    wall = steps * step_s
    record = {
        "schema": 1,
        "run_id": f"{reproduction}-{method}-{_slug(variant)}s{seed}-{provenance}-{device}-w{world_size}",
        "created": "2026-01-01T00:00:00Z",
        "status": status,
        "error": None if status == "complete" else "stopped",
        "command": f"python -m suite run {method} --seed {seed} --nproc {world_size} --device {device}",
        "reproduction": reproduction,
        "method": method,
        "variant": variant,
        "baseline": method in ("ddp", "fsdp", "hsdp") if baseline is None else baseline,
        "model": {"name": model, "params": PARAMS, "config": {"n_layer": 4, "d_model": 256}},
        "data": {"name": "text", "source": "suite/data", "split": "train", "seed": seed},
        "parallel": {
            "world_size": world_size,
            "strategy": method,
            "mesh": None,
            "global_batch_tokens": batch_tokens,
            "micro_batch": 4,
            "grad_accum": 1,
            "groups": [{"name": "dp", "tier": tier, "size": world_size}],
        },
        "protocol": {"kind": protocol, "budget": float(tokens), "target": None, "reached": None},
        "totals": {"steps": steps, "tokens": tokens, "flops": 6.0 * PARAMS * tokens, "wall_s": wall},
        "curve": curve,
        "memory": {"method": "MemTracker", "per_rank": memory},
        "comm": {
            "method": "dispatch",
            "steps": steps,
            "per_rank": [{"rank": r, "ops": ops} for r in range(world_size)],
        },
        "throughput": {
            "tokens_per_s": tokens / wall,
            "samples_per_s": tokens / wall / SEQ,
            "step_s": step_s,
            "mfu": None,
        },
        "evals": evals
        if evals is not None
        else {
            "val_loss": curve[-1]["val_loss"] or curve[-1]["train_loss"],
            "hellaswag": {"value": 0.3 + 0.01 * rng.random(), "stderr": 0.01},
        },
        "env": {
            "torch": "2.14.1",
            "device": device,
            "device_name": "NVIDIA H200" if device == "cuda" else "cpu",
            "backend": "nccl" if device == "cuda" else "gloo",
            "world_size": world_size,
            "git_sha": "0123456789abcdef",
            "seed": seed,
            "peak_flops": 989e12 if device == "cuda" else None,
        },
        "provenance": provenance,
    }
    validate(record)
    return record


def _slug(variant: dict) -> str:
    return "".join(f"{k}{v}-" for k, v in sorted(variant.items()))


def study(seeds: int = 3) -> list[dict]:
    """The harness comparison (ddp, fsdp) and an SDP reproduction (ddp vs b-sdp at two C), plus an estimate."""
    records = []
    for seed in range(seeds):
        records.append(make_record("ddp", seed))
        records.append(make_record("fsdp", seed, speed=0.9, memory_scale=0.5))
        records.append(make_record("ddp", seed, reproduction="sdp", protocol="flops"))
        for c in (0.5, 0.75):
            records.append(
                make_record(
                    "b-sdp",
                    seed,
                    reproduction="sdp",
                    protocol="flops",
                    variant={"C": c},
                    memory_scale=c,
                    speed=1.1,
                    quality=-0.3,
                )
            )
    records.append(
        make_record(
            "b-sdp",
            0,
            reproduction="sdp",
            protocol="flops",
            variant={"C": 0.5},
            provenance="estimated",
            world_size=8,
            memory_scale=0.5,
        )
    )
    return records


def write_records(folder: Path, records: list[dict]) -> list[Path]:
    return [write_record(r, Path(folder) / f"{r['run_id']}.json") for r in records]


SDP_CLAIMS_YAML = """
claims:
  - id: sdp-memory
    statement: B-SDP at C=0.5 lowers peak memory per device against DDP
    paper_value: 0.6
    unit: x DDP peak bytes
    source: {paper: arXiv 2507.09029, table: Table 3, version: v5}
    source_status: unverified
    metric: {name: ratio, field: peak_bytes_max, method: b-sdp, baseline: ddp, variant: {C: 0.5}}
    protocol: flops
    kind: ratio
    better: lower
    band: {tolerance: 0.1, source: a test band}
    command: python -m suite reproduce sdp --preset smoke
    what_would_test: a test
    regime: {any_scale: {because: "a test claim, judged at any size", source: the test fixture}}
  - id: sdp-quality
    statement: B-SDP keeps validation loss at or below DDP's
    paper_value: 2.437 vs 2.452
    source: {paper: arXiv 2507.09029, table: Table 1}
    source_status: unverified
    metric: {name: quality, field: final_val_loss, method: b-sdp, baseline: ddp, variant: {C: 0.5}}
    protocol: flops
    kind: quality
    better: lower
    test: non-inferiority
    margin: {value: 0.0, source: a strict test}
    plateau: {change: 0.5, source: a test plateau}
    command: python -m suite reproduce sdp --preset smoke
    what_would_test: a test
    regime: {any_scale: {because: "a test claim, judged at any size", source: the test fixture}}
  - id: sdp-inter-node
    statement: B-SDP+FSDP cuts inter-node wall-clock by 19.9% against DDP
    paper_value: 0.801
    source: {paper: arXiv 2507.09029}
    source_status: unverified
    metric: {name: ratio, field: wall_s, method: b-sdp, baseline: ddp}
    kind: ratio
    better: lower
    band: {tolerance: 0.05, source: a test band}
    requires: [cuda, network, world_size>=8]
    what_would_test: 8 GPUs over 2 nodes with python -m suite reproduce sdp --preset gpu
    command: python -m suite reproduce sdp --preset gpu
    regime: {any_scale: {because: "a test claim, judged at any size", source: the test fixture}}
"""


HOSTILE = "<script>alert(1)</script>"


def toy_reproduction(folder: Path) -> Path:
    """A reproduction named toy with SDP_CLAIMS_YAML's cards in `folder` (point SUITE_REPRODUCTIONS at it)."""
    folder.mkdir()
    (folder / "claims.yaml").write_text(SDP_CLAIMS_YAML)
    (folder / "__init__.py").write_text(
        "from pathlib import Path\nfrom suite.extensions import Reproduction\n"
        "REPRODUCTION = Reproduction('toy', 'test', claims=Path(__file__).with_name('claims.yaml'))\n"
    )
    return folder


def hostile_record() -> dict:
    """A valid record whose strings try to break out of HTML (method, model, evals key) and out of mathtext."""
    return make_record(
        HOSTILE,
        0,
        variant={"tag": "$\\frac{1}{"},
        model="<img src=x onerror=alert(2)>",
        evals={"<script>alert(3)</script>": 1.0},
    )


@lru_cache(maxsize=1)
def built_study() -> tuple[Path, Path]:
    """(results folder, site folder) of the study plus a hostile record and three bad files, built once
    per test process (figures are the slow part) and removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="report-test-"))
    atexit.register(shutil.rmtree, root, True)
    results = root / "results"
    paths = write_records(results, study() + [hostile_record()])
    text = paths[0].read_text()
    (results / "corrupt.json").write_text("{not json")
    (results / "truncated.json").write_text(text[: len(text) // 2])
    (results / "old-schema.json").write_text(json.dumps({**json.loads(text), "schema": 0}))
    claims_yaml = root / "claims.yaml"
    claims_yaml.write_text(SDP_CLAIMS_YAML)
    records, skipped = load_records(results)
    index = build_report_for(records, skipped, root / "site", {"sdp": load_claims(claims_yaml)})
    build_site(root)  # the index of all report folders, which every page's "All reproductions" links
    return results, index.parent
