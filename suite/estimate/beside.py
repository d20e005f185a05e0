"""An estimate beside a measured run of the same configuration: what must agree exactly, what within 5%.

FLOPs, bytes and call counts must be equal; parameters, gradients and optimizer state too; activations
and, against a CPU run, the peak within 5%. Against a CUDA run the peak and `other` are shown but not
judged: the allocator's peak includes what no tensor tracker sees (CUDA kernels also save slightly different
attention activations than the CPU kernels the estimate runs). On CPU the tracker sees every tensor: the
peaks of fp32 runs agree to the byte, bf16 under FSDP2 within 1.5% (measured on llama-tiny).

`judging(field, rows)` names the rows that judge a summary field a claim card reads (peak_bytes_max: the
peaks; state_bytes_max: the model state; comm_bytes_per_rank_step: every collective's payload, the rows
"OP@GROUP bytes"; comm_wire_bytes_per_rank_step: every collective's ring wire bytes, the rows "OP@GROUP
wire_bytes", which also depend on the group's size): an estimate may decide a card only where its estimator
check judges that field, at the card's compositions (tests/test_sdp_fsdp.py).

At import this module reads records only, so the report can use it without importing the training loop:
`compare` judges an estimate rank by rank against a run of as many steps (`python -m suite estimate
--measure`, whose run `measure_beside` launches, importing the launcher only then); the report shows each
estimate beside the measured runs of its configuration (`config_key`) with the same tolerances, per step
(`compare_per_step`), so measured runs of any length compare.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from suite.config import RunConfig
from suite.records import summary_row

EXACT = 0.0
ACTIVATIONS = 0.05
PEAK_CPU = 0.05
JUDGED_MEMORY = {
    "params": EXACT,
    "grads": EXACT,
    "optimizer": EXACT,
    "activations": ACTIVATIONS,
    "state_bytes": EXACT,
    "peak_bytes": None,
    "comm_buffers": None,
    "other": None,
}
MEMORY_PER_STEP = ("peak_bytes", "params", "grads", "optimizer", "activations")
PER_STEP = {
    **{q: JUDGED_MEMORY[q] for q in MEMORY_PER_STEP},
    "comm_bytes_per_rank_step": EXACT,
    "flops_per_step": EXACT,
}
# settings that change memory, bytes or FLOPs besides the variant (method parameters, ac, precision)
CONFIG_SETTINGS = ("seq_len", "optimizer")


@dataclass
class Row:
    quantity: str
    rank: int | None
    estimated: float | None  # None: the record has no such number (no memory meter, no ledger)
    measured: float | None
    tolerance: float | None  # None: shown, not judged

    @property
    def ok(self) -> bool | None:
        if self.tolerance is None or self.estimated is None or self.measured is None:
            return None
        return abs(self.estimated - self.measured) <= self.tolerance * max(abs(self.measured), 1.0)

    @property
    def ratio(self) -> float | None:
        if self.estimated is None or not self.measured:
            return None
        return self.estimated / self.measured


def _per_rank(section: dict, estimated: dict) -> dict[int, dict]:
    rows = {row["rank"]: row for row in section["per_rank"]}
    stands_in = rows.get(0) if estimated.get("estimate", {}).get("symmetry") else None
    return {r: rows.get(r, stands_in) for r in range(estimated["parallel"]["world_size"])}


def compare(estimated: dict, measured: dict) -> list[Row]:
    """Row by row: totals, each rank's collectives (count, payload `bytes` and ring `wire_bytes` per op and
    group) and memory categories."""
    rows = [
        Row(q, None, estimated["totals"][q], measured["totals"].get(q, 0), EXACT)
        for q in ("steps", "tokens", "flops", "hardware_flops")
    ]
    est_comm, est_mem = _per_rank(estimated["comm"], estimated), _per_rank(estimated["memory"], estimated)
    for entry in measured["comm"]["per_rank"]:
        rank = entry["rank"]
        mine = {(o["op"], o["group"]): o for o in (est_comm[rank] or {"ops": []})["ops"]}
        for op in entry["ops"]:
            key = (op["op"], op["group"])
            ours = mine.pop(key, {"count": 0, "bytes": 0, "wire_bytes": 0})
            rows += [
                Row(f"{op['op']}@{op['group']} {field}", rank, ours[field], op[field], EXACT)
                for field in ("count", "bytes", "wire_bytes")
            ]
        rows += [
            Row(f"{o['op']}@{o['group']} {field}", rank, o[field], 0, EXACT)
            for o in mine.values()
            for field in ("bytes", "wire_bytes")
        ]
    tolerances = {**JUDGED_MEMORY, "peak_bytes": PEAK_CPU if measured["env"]["device"] == "cpu" else None}
    for entry in measured["memory"]["per_rank"]:
        rank = entry["rank"]
        ours = est_mem[rank] or {}
        rows += [Row(q, rank, ours.get(q, 0), entry.get(q, 0), tol) for q, tol in tolerances.items()]
    return rows


# the summary fields a card may read from an estimate -> the quantities of `compare`'s rows that judge it
CARD_FIELDS = {
    "peak_bytes_max": lambda q: q == "peak_bytes",
    "state_bytes_max": lambda q: q == "state_bytes",
    "comm_bytes_per_rank_step": lambda q: q.endswith(" bytes"),  # payload: "OP@GROUP bytes"
    "comm_wire_bytes_per_rank_step": lambda q: q.endswith(" wire_bytes"),  # ring wire bytes: "OP@GROUP wire_bytes"
}


def judging(field: str, rows: list[Row]) -> list[Row]:
    """The rows of `compare` that judge `field` (none: a field no check judges cannot be decided by an estimate)."""
    wanted = CARD_FIELDS.get(field)
    return [r for r in rows if wanted is not None and wanted(r.quantity) and r.tolerance is not None]


def config_key(record: dict) -> str:
    """What two records must share to be the same configuration; seed, device, steps and reproduction
    may differ (an estimate's numbers do not depend on them)."""
    parallel, settings = record["parallel"], record.get("settings", {})
    return json.dumps(
        {
            "method": record["method"],
            "model": record["model"]["name"],
            "params": record["model"]["params"],
            "variant": record["variant"],
            "world_size": parallel["world_size"],
            "micro_batch": parallel["micro_batch"],
            "grad_accum": parallel["grad_accum"],
            "global_batch_tokens": parallel["global_batch_tokens"],
            **{k: settings.get(k) for k in CONFIG_SETTINGS},
        },
        sort_keys=True,
    )


def per_step(record: dict) -> dict[str, float | None]:
    """PER_STEP's quantities of one record: memory of its largest rank, payload per rank and model FLOPs per step."""
    mem = record["memory"]["per_rank"]
    values = {q: max((m[q] for m in mem), default=None) for q in MEMORY_PER_STEP}
    steps = record["totals"]["steps"]
    values["comm_bytes_per_rank_step"] = summary_row(record)["comm_bytes_per_rank_step"]
    values["flops_per_step"] = record["totals"]["flops"] / steps if steps else None
    return values


def compare_per_step(estimated: dict, measured: dict) -> list[Row]:
    """PER_STEP's quantities side by side, judged with the tolerances `compare` uses."""
    ours, theirs = per_step(estimated), per_step(measured)
    return [Row(q, None, ours[q], theirs[q], tol) for q, tol in PER_STEP.items()]


def format_comparison(rows: list[Row]) -> str:
    verdict = {True: "ok", False: "DIFFERS", None: "shown"}
    lines = [f"{'quantity':<34}{'rank':>5}{'estimated':>20}{'measured':>20}{'ratio':>9}  verdict"]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.4f}"
        rank = "all" if r.rank is None else str(r.rank)
        lines.append(
            f"{r.quantity[:33]:<34}{rank:>5}{r.estimated:>20,.0f}{r.measured:>20,.0f}{ratio:>9}  {verdict[r.ok]}"
        )
    return "\n".join(lines)


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
    from suite.records import read_record
    from suite.run.launch import launch

    record = read_record(launch(measured_config(estimated, cfg, device, results)))
    if record["status"] != "complete":
        raise RuntimeError(f"the measured run {record['run_id']} ended {record['status']}: {record.get('error')}")
    return record
