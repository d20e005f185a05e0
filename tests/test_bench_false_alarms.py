"""The false-alarm experiment's bookkeeping (benchmarks/false_alarms.py): runs compacted and read back as the gate
reads them, merged into a reference, and which arms and pairs a slowdown touches."""

from __future__ import annotations

from benchmarks import false_alarms, gate
from tests.test_bench_gate import BASE, FAST, SPEED, TOY, bench_json


def test_a_compacted_run_reads_back_as_the_gate_reads_it():
    bench, table = bench_json(SPEED), {}
    run = false_alarms.compact(bench, table)
    assert len(table) == 1  # one set of counters for every launch: stored once
    back = false_alarms.expand(run, table)
    reference = gate.reference_from(bench, TOY, reason="r")
    assert [c.verdict for c in gate.compare(back, reference, TOY)] == [
        c.verdict for c in gate.compare(bench, reference, TOY)
    ]


def test_merged_runs_keep_every_round_and_their_median():
    runs = [bench_json({**SPEED, FAST.key: speed}) for speed in (800.0, 900.0, 1000.0)]
    merged = false_alarms.merged(runs)
    pair = next(b["extra_info"] for b in merged["benchmarks"] if b["extra_info"]["pair"] == "fsdp/ddp")
    assert len(pair["rounds"]) == 3 and pair["ratio"] == 0.9
    assert merged["bench_pairs"] == [p.name for p in false_alarms.PAIRS if p.name in {t.name for t in TOY}]


def test_a_method_slowdown_touches_its_arms_and_the_pairs_it_is_the_method_of():
    touched = false_alarms.slowed_subjects("fsdp:0.15")
    assert FAST.key in touched and "fsdp/ddp" in touched
    assert BASE.key not in touched and "fsdp-ac/fsdp" not in touched  # both sides slowed: the ratio keeps


def test_a_loop_slowdown_touches_every_suite_arm_and_the_pair_against_the_bare_loop():
    touched = false_alarms.slowed_subjects("0.15")
    assert {BASE.key, FAST.key, "suite/bare-loop"} <= touched
    assert "bare-loop-n2" not in touched and "fsdp/ddp" not in touched
