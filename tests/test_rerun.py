"""A committed record's command re-runs from a clone and gives the same record (issue 12): commands name
repository paths, never a temporary folder, and the deterministic numbers (FLOPs, bytes, call counts,
model state) come out equal."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from suite.estimate.beside import compare, format_comparison
from suite.records import load_records, read_record, summary_row

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results"
# where two runs of one command may differ: when and where it ran, and how long it took
# fields records gained after the committed ones were made (the corpus's identity, epochs seen, trajectory saves,
# where a fine-tune starts, and the machine's load in estimate records): an older record lacks them, which is no
# difference in its numbers
ADDED_SINCE = (
    "data.corpus.",
    "totals.epochs",
    "settings.init_from",
    "settings.save_every",
    "timing.load_average",
    "timing.method",
    "settings.comm_check",
    "settings.emulate",
    "parallel.emulated",
    "parallel.processes",
)
PROVENANCE = {
    "digest",  # a rerun is another run (its id and times differ), so its seal differs by construction
    "run_id",
    "created",
    "command",
    "_path",
    "settings.results",
    "faults.checkpoints",
    "estimate.wall_s",
    "env.hostname",
    "env.threads",
    "env.git_sha",
    "env.git_dirty",
    "env.torch",
}
CONDITIONS = ("timing.load_average",)  # the machine's load while it ran: what it ran under, not what it measured


def _committed(order=lambda r: r["run_id"], **wanted) -> dict:
    records = [r for folder in sorted(COMMITTED.glob("*-smoke")) for r in load_records(folder)[0]]
    # a fine-tune starts from a model file its plan wrote outside the repository, and its base run writes one there:
    # neither reruns from a checkout as it is
    records = [r for r in records if not (r["settings"].get("init_from") or r["settings"].get("checkpoint"))]
    found = [r for r in records if all(summary_row(r).get(k) == v for k, v in wanted.items())]
    assert found, f"no committed record with {wanted}"
    return min(found, key=order)


def _fields(value, path: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _fields(item, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _fields(item, f"{path}[{i}]").items()}
    return {path: value}


def differences(before: dict, after: dict) -> list[tuple[str, object, object]]:
    """Every field (dotted path) whose value differs between two records, provenance aside. A record made before
    the ledger counted what DTensor issues inside its ops is compared without its ledger, which the rerun must
    hold whole and grown only by all-reduces (ledger_grown)."""
    older = not counts_dtensor(before)
    if older:
        assert ledger_grown(before, after) == [], ledger_grown(before, after)
    a, b = (_fields(r) for r in (before, after))
    missing = "<missing>"
    return [
        (k, a.get(k, missing), b.get(k, missing))
        for k in sorted((a.keys() | b.keys()) - PROVENANCE)
        if a.get(k, missing) != b.get(k, missing)
        and not (k not in a and k.startswith(ADDED_SINCE))
        and not k.startswith(CONDITIONS)
        and not (older and k.startswith("comm."))
    ]


def counts_dtensor(record: dict) -> bool:
    """Whether the record's ledger counted the collectives inside DTensor's ops (issue 46; its method says so)."""
    return "DTensor" in record["comm"]["method"]


def ledger_grown(before: dict, after: dict) -> list[str]:
    """How `after`'s ledger fails to be `before`'s with all-reduces added (clipping's norm under DTensor): [] if
    every row of `before` is in `after` unchanged or, for an all-reduce, with more calls and bytes."""
    wrong = []
    for old, new in zip(before["comm"]["per_rank"], after["comm"]["per_rank"], strict=True):
        rows = {(o["op"], o["group"]): (o["count"], o["bytes"]) for o in new["ops"]}
        for o in old["ops"]:
            key, was = (o["op"], o["group"]), (o["count"], o["bytes"])
            now = rows.pop(key, None)
            grew = o["op"] == "all_reduce" and now is not None and now[0] > was[0] and now[1] > was[1]
            if now != was and not grew:
                wrong.append(f"rank {old['rank']} {key}: {was} -> {now}")
        wrong += [f"rank {old['rank']} {key}: new {v}" for key, v in rows.items() if key[0] != "all_reduce"]
    return wrong


def _rerun(record: dict, results: Path) -> dict:
    argv = shlex.split(record["command"])
    assert argv[:3] == ["python", "-m", "suite"]
    where = argv[argv.index("--results") + 1]
    assert not Path(where).is_absolute() and (ROOT / where).is_dir(), f"{where} is not a folder of the repository"
    out = subprocess.run(
        [sys.executable, *argv[1:], "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return read_record(out.stdout.strip().splitlines()[-1])


def test_every_committed_command_names_repository_paths():
    for folder in sorted(COMMITTED.glob("*-smoke")):
        for record in load_records(folder)[0]:
            command = record["command"]
            assert "/tmp" not in command and str(ROOT) not in command, (record["_path"], command)


def test_a_committed_estimate_reruns_to_the_same_numbers(tmp_path):
    record = _committed(method="ddp", model="llama-500m", provenance="estimated")
    again = _rerun(record, tmp_path)
    assert [r for r in compare(record, again) if r.ok is False] == [], format_comparison(compare(record, again))
    assert summary_row(again)["peak_bytes_max"] == summary_row(record)["peak_bytes_max"]
    assert differences(record, again) == []


@pytest.mark.slow
def test_a_committed_run_reruns_to_the_same_counts_and_loss(tmp_path):
    # the shortest of them (3 steps at 2 ranks): the oldest, 40 steps of Muon, took 5 minutes on a CPU without bf16
    # kernels (its Newton-Schulz), and 40 steps of AdamW on another CPU than the record's ended 3% apart
    record = _committed(
        order=lambda r: (r["totals"]["tokens"], r["run_id"]),
        method="ddp", model="llama-tiny", provenance="measured", protocol="tokens", seed=0,
    )  # fmt: skip
    again = _rerun(record, tmp_path)
    before, after = summary_row(record), summary_row(again)
    for field in ("steps", "tokens", "flops", "state_bytes_max", "comm_bytes_per_rank_step"):
        assert after[field] == before[field], field
    assert [[(o["op"], o["count"], o["bytes"]) for o in r["ops"]] for r in again["comm"]["per_rank"]] == [
        [(o["op"], o["count"], o["bytes"]) for o in r["ops"]] for r in record["comm"]["per_rank"]
    ]
    # the same seed on the same kind of machine; another CPU's kernels may round differently
    assert after["final_val_loss"] == pytest.approx(before["final_val_loss"], rel=0.02)
