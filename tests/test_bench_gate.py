"""The throughput gate (benchmarks/gate.py): exact counters, time measures and their verdicts, the reference.

The unit tests feed it hand-made benchmark JSON (as benchmarks/measure.py and benchmarks/conftest.py write it);
the slow test slows a real method on purpose (benchmarks/slowdown.py) and checks that the gate reports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import gate
from benchmarks.bare_loop import BARE_LOOP
from benchmarks.measure import PairMeter, RecordClock, RoundPolicy
from benchmarks.pairs import PAIRS, Config, Pair, selected
from suite.run.checks import check_config

ROOT = Path(__file__).resolve().parent.parent
BASE, FAST, SLOW = Config("ddp"), Config("fsdp"), Config("ddp", ac=True)
TOY = [Pair("fsdp/ddp", FAST, BASE), Pair("ac/ddp", SLOW, BASE, tolerance=0.2)]
CPU, ISA = "AMD EPYC", "AVX512"
SPEED = {BASE.key: 1000.0, FAST.key: 900.0, SLOW.key: 700.0}


LOSSES = [5.536699533462524, 4.9, 4.25, 3.75, 3.270644187927246]


def launch(
    key: str, speed: float, counters: dict | None = None, units: float = 10.0, losses: list[float] | None = None
) -> dict:
    """One launch as benchmarks/measure.py records it (the fields the gate reads)."""
    return {
        "config": key,
        "losses": LOSSES if losses is None else losses,
        "tokens_per_s": speed,
        "cpu_tokens_per_s": speed,
        "step_s": 1000 / speed,
        "cpu_units": units * 1000 / speed,
        "wall_units": 2 * units * 1000 / speed,
        "counters": {"comm/all_reduce@replicate/bytes_per_step/rank0": 4096, "flops/model_per_step": 10**9}
        if counters is None
        else counters,
    }


def bench_json(speed: dict[str, float], pairs: list[Pair] = TOY, cpu: str = CPU, isa: str = ISA, **launch_args) -> dict:
    """A benchmark JSON with one round per pair; a pair whose two speeds are not given was not measured."""
    entries = []
    for p in pairs:
        if p.method.key in speed and p.baseline.key in speed:
            ratio = speed[p.method.key] / speed[p.baseline.key]
            rounds = [
                {
                    "ratio": ratio,
                    "cpu_ratio": ratio,
                    "baseline": launch(p.baseline.key, speed[p.baseline.key], **launch_args),
                    "method": launch(p.method.key, speed[p.method.key], **launch_args),
                }
            ]
            entries.append({"extra_info": {"pair": p.name, "ratio": ratio, "cpu_ratio": ratio, "rounds": rounds}})
    return {
        "bench_pairs": [p.name for p in pairs],
        "datetime": "2026-01-01T00:00:00",
        "machine_info": {"cpu": {"brand_raw": cpu, "count": 2}, gate.ISA: isa},
        "benchmarks": entries,
    }


REFERENCE = gate.reference_from(bench_json(SPEED), TOY, reason="the toy's first reference")


def verdicts(checks: list[gate.Check], measure: str) -> dict[str, str]:
    return {c.subject: c.verdict for c in checks if c.measure == measure}


class FakeLaunches:
    """Stands in for `measure`: records the launch order; each launch's tokens/s is its configuration's
    speed times the machine's load factor at that launch (1 after the given ones)."""

    def __init__(self, tokens_per_s: dict[str, float], load: tuple[float, ...] = ()) -> None:
        self.tokens_per_s, self.load, self.order = tokens_per_s, load, []

    def __call__(self, config: Config, results: Path) -> dict:
        factor = self.load[len(self.order)] if len(self.order) < len(self.load) else 1.0
        self.order.append(config.key)
        speed = self.tokens_per_s[config.key] * factor
        return {"config": config.key, "tokens_per_s": speed, "cpu_tokens_per_s": speed, "step_s": 0.5}


# ---- measuring: ABAB rounds, median of ratios, rounds from the spread ------------------------------------------


def test_pair_meter_takes_ratios_from_adjacent_launches_and_reuses_the_last_one(tmp_path, monkeypatch):
    nometers = Config("ddp", meters=False)
    launches = FakeLaunches({BASE.key: 2000.0, FAST.key: 1500.0, SLOW.key: 500.0, nometers.key: 2100.0})
    monkeypatch.setattr("benchmarks.measure.measure", launches)
    clock = RecordClock()
    meter = PairMeter(tmp_path, clock)
    pairs = [
        Pair("meters", BASE, nometers),
        Pair("fsdp/ddp", FAST, BASE),
        Pair("ac/ddp", SLOW, BASE),
        Pair("ac/nometers", SLOW, nometers),
    ]
    ratios = {p.name: meter(p)["ratio"] for p in pairs}
    assert ratios == {"meters": 2000 / 2100, "fsdp/ddp": 0.75, "ac/ddp": 0.25, "ac/nometers": 500 / 2100}
    assert launches.order == [nometers.key, BASE.key, FAST.key, BASE.key, SLOW.key, nometers.key]
    assert clock() == 0.5 * len(pairs)


def test_rounds_alternate_the_two_launches_and_the_pair_keeps_their_median(tmp_path, monkeypatch):
    launches = FakeLaunches({BASE.key: 1000.0, FAST.key: 900.0}, load=(1.0, 1.0, 1.25, 1.5))
    monkeypatch.setattr("benchmarks.measure.measure", launches)
    meter, pair = PairMeter(tmp_path, RecordClock()), Pair("fsdp/ddp", FAST, BASE)
    summary = meter.measure_rounds(pair, RoundPolicy(fixed=3))
    assert launches.order == [BASE.key, FAST.key, BASE.key, FAST.key]  # ABAB: 3 rounds from 4 launches
    assert [r["ratio"] for r in summary["rounds"]] == pytest.approx([0.9, 900 / 1250, 1350 / 1250])
    assert summary["ratio"] == pytest.approx(0.9) and summary["cpu_ratio"] == pytest.approx(0.9)


def test_steady_pairs_stop_at_the_least_rounds_and_noisy_ones_get_more(tmp_path, monkeypatch):
    policy = RoundPolicy(fixed=None, least=3, most=6, margin=0.05)
    steady = FakeLaunches({BASE.key: 1000.0, FAST.key: 900.0})
    monkeypatch.setattr("benchmarks.measure.measure", steady)
    assert len(PairMeter(tmp_path, RecordClock()).measure_rounds(Pair("p", FAST, BASE), policy)["rounds"]) == 3
    noisy = FakeLaunches({BASE.key: 1000.0, FAST.key: 900.0}, load=(1.0, 1.3, 0.8, 1.2, 0.9, 1.4, 1.0, 0.7, 1.1))
    monkeypatch.setattr("benchmarks.measure.measure", noisy)
    assert len(PairMeter(tmp_path, RecordClock()).measure_rounds(Pair("p", FAST, BASE), policy)["rounds"]) == 6


@given(ratios=st.lists(st.floats(0.2, 5), min_size=3, max_size=9), scale=st.floats(0.5, 2))
def test_rounds_needed_stay_in_bounds_and_ignore_the_ratios_scale(ratios, scale):
    policy = RoundPolicy(fixed=None, least=3, most=7)
    n = policy.needed(ratios)
    assert 3 <= n <= 7
    assert policy.needed([r * scale for r in ratios]) == n or abs(policy.needed([r * scale for r in ratios]) - n) <= 1


@given(spread=st.floats(0.0, 0.2))
def test_more_spread_never_asks_for_fewer_rounds(spread):
    policy = RoundPolicy(fixed=None, least=3, most=20, margin=0.05)
    narrow = [1 - spread / 2, 1, 1 + spread / 2]
    wide = [1 - spread, 1, 1 + spread]
    assert policy.needed(wide) >= policy.needed(narrow)


@pytest.mark.parametrize("text, policy", [("4", RoundPolicy(fixed=4)), ("auto", RoundPolicy(fixed=None))])
def test_rounds_option_reads_a_number_or_auto(text, policy):
    assert RoundPolicy.parse(text) == policy
    assert RoundPolicy.parse("auto:2-5") == RoundPolicy(fixed=None, least=2, most=5)
    with pytest.raises(ValueError, match="auto:LEAST-MOST"):
        RoundPolicy.parse("auto:5-2")


# ---- the gate: counters exact, times within tolerance, reference --------------------------------------------


def test_a_run_against_its_own_reference_passes():
    checks = gate.compare(bench_json(SPEED), REFERENCE, TOY)
    assert {c.verdict for c in checks} == {gate.OK} and not gate.failed(checks)
    assert {c.measure for c in checks if c.kind != "counter"} == {
        "loss/all",
        "wall_ratio",
        "cpu_ratio",
        "cpu_units",
        "wall_units",
        "loop_units",
    }


def test_a_changed_counter_fails_naming_counter_arm_values_and_the_refresh(capsys):
    more = {"comm/all_reduce@replicate/bytes_per_step/rank0": 8192, "flops/model_per_step": 10**9}
    checks = gate.compare(bench_json(SPEED, counters=more), REFERENCE, TOY)
    changed = [c for c in checks if c.verdict == gate.CHANGED]
    assert {c.subject for c in changed} == {BASE.key, FAST.key, SLOW.key} and gate.failed(checks)
    text = gate.format_table(checks)
    assert (
        f"counter comm/all_reduce@replicate/bytes_per_step/rank0 of arm {FAST.key} changed from 4,096 to 8,192" in text
    )
    assert "--only counters --reason" in text


def test_golden_losses_equal_at_every_step_pass():
    checks = gate.compare(bench_json(SPEED), REFERENCE, TOY)
    assert verdicts(checks, "loss/all") == dict.fromkeys([BASE.key, FAST.key, SLOW.key], gate.OK)
    assert "golden losses: 3 of 3 loss curves equal" in gate.format_table(checks)


def test_a_loss_changed_at_one_step_fails_naming_arm_step_and_both_values():
    moved = [*LOSSES[:3], 3.7500000000000004, *LOSSES[4:]]
    checks = gate.compare(bench_json(SPEED, losses=moved), REFERENCE, TOY)
    changed = [c for c in checks if c.kind == "loss" and c.verdict == gate.CHANGED]
    assert {(c.subject, c.measure, c.reference, c.measured) for c in changed} == {
        (arm, "loss/step4", 3.75, 3.7500000000000004) for arm in (BASE.key, FAST.key, SLOW.key)
    }
    assert gate.failed(checks)
    text = gate.format_table(checks)
    assert f"loss of arm {FAST.key} differs first at step 4: reference 3.75, measured 3.7500000000000004" in text


def test_a_shorter_loss_curve_is_judged_on_the_steps_it_ran():
    """An arm runs for different numbers of steps in different pairs; the golden curve is its longest."""
    checks = gate.compare(bench_json(SPEED, losses=LOSSES[:2]), REFERENCE, TOY)
    assert {(c.measure, c.verdict) for c in checks if c.kind == "loss"} == {("loss/all", gate.OK)}


def test_a_curve_longer_than_the_golden_one_differs_at_its_first_extra_step():
    checks = gate.compare(bench_json(SPEED, losses=[*LOSSES, 1.0]), REFERENCE, TOY)
    changed = {(c.measure, c.reference, c.measured) for c in checks if c.kind == "loss"}
    assert changed == {(f"loss/step{len(LOSSES) + 1}", None, 1.0)} and gate.failed(checks)


def test_the_golden_curve_is_the_longest_of_an_arms_agreeing_launches():
    assert gate.golden_curve("a", [LOSSES[:2], LOSSES, LOSSES[:3]]) == LOSSES
    with pytest.raises(ValueError, match="differ from step 2"):
        gate.golden_curve("a", [LOSSES, [LOSSES[0], 9.0]])


def test_an_arm_without_golden_losses_has_no_reference_and_fails():
    reference = json.loads(json.dumps(REFERENCE))
    del reference["arms"][SLOW.key]["losses"]
    checks = gate.compare(bench_json(SPEED), reference, TOY)
    assert verdicts(checks, "loss/*") == {SLOW.key: gate.NO_REFERENCE} and gate.failed(checks)


def test_refreshing_golden_losses_from_some_pairs_keeps_every_other_arm_and_the_reason():
    moved = [*LOSSES[:4], 3.25]
    only_fsdp = bench_json({BASE.key: 1000.0, FAST.key: 900.0}, losses=moved)
    new = gate.with_losses(only_fsdp, REFERENCE, TOY, command="bench -k fsdp", reason="new data order")
    assert new["arms"][FAST.key]["losses"] == new["arms"][BASE.key]["losses"] == {ISA: moved}
    assert new["arms"][SLOW.key] == REFERENCE["arms"][SLOW.key] and new["pairs"] == REFERENCE["pairs"]
    assert new["history"][-1]["reason"] == "new data order"
    with pytest.raises(ValueError, match="reason"):
        gate.with_losses(only_fsdp, REFERENCE, TOY, reason="")


def test_on_another_instruction_set_losses_are_held_near_the_golden_curve_and_memory_is_printed():
    """AVX2 and AVX512 kernels sum in different orders: the same launch's losses differ in the last digits."""
    more = {"comm/all_reduce@replicate/bytes_per_step/rank0": 4096, "flops/model_per_step": 10**9, "memory/x/rank0": 1}
    near = [x * (1 + 1e-7) for x in LOSSES]
    checks = gate.compare(bench_json(SPEED, isa="AVX2", losses=near, counters=more), REFERENCE, TOY)
    assert {c.verdict for c in checks if c.kind == "loss"} == {gate.OTHER_MACHINE}
    assert {c.verdict for c in checks if c.measure == "counter/memory/x/rank0"} == {gate.OTHER_MACHINE}
    assert not gate.failed(checks)
    assert "0 of 3 loss curves equal to the reference at every step, 3 within 1e-03" in gate.format_table(checks)
    far = [*LOSSES[:3], LOSSES[3] * (1 + 2 * gate.ACROSS_ISA), LOSSES[4]]
    checks = gate.compare(bench_json(SPEED, isa="AVX2", losses=far), REFERENCE, TOY)
    changed = {(c.measure, c.verdict) for c in checks if c.kind == "loss"}
    assert changed == {("loss/step4", gate.CHANGED)} and gate.failed(checks)
    assert f"loss of arm {FAST.key} differs by more than 1e-03 at step 4" in gate.format_table(checks)


def test_golden_losses_of_a_second_instruction_set_are_added_beside_the_first_and_then_exact():
    near = [x * (1 + 1e-7) for x in LOSSES]
    avx2 = bench_json(SPEED, isa="AVX2", losses=near)
    new = gate.with_losses(avx2, REFERENCE, TOY, command="nox -s bench", reason="CI's AVX2 CPU")
    assert new["arms"][FAST.key]["losses"] == {ISA: LOSSES, "AVX2": near}
    assert verdicts(gate.compare(avx2, new, TOY), "loss/all") == dict.fromkeys([BASE.key, FAST.key, SLOW.key], gate.OK)
    assert gate.failed(gate.compare(bench_json(SPEED, isa="AVX2"), new, TOY))  # AVX2 is now exact
    assert not gate.failed(gate.compare(bench_json(SPEED), new, TOY))


def test_counters_refresh_only_on_the_references_instruction_set():
    with pytest.raises(ValueError, match="--only losses"):
        gate.reference_from(bench_json(SPEED, isa="AVX2"), TOY, reason="x", old=REFERENCE)


def test_a_counter_that_appears_or_disappears_is_a_change():
    checks = gate.compare(bench_json(SPEED, counters={"flops/model_per_step": 10**9}), REFERENCE, TOY)
    gone = [c for c in checks if c.verdict == gate.CHANGED]
    assert gone and all(c.measured is None and c.reference == 4096 for c in gone)


def test_memory_counters_are_judged_on_the_references_processor_only():
    more = {"comm/all_reduce@replicate/bytes_per_step/rank0": 4096, "flops/model_per_step": 10**9, "memory/x/rank0": 1}
    checks = gate.compare(bench_json(SPEED, cpu="Other CPU", counters=more), REFERENCE, TOY)
    assert {c.verdict for c in checks if c.measure == "counter/memory/x/rank0"} == {gate.OTHER_MACHINE}
    assert not gate.failed(checks)
    fewer = {"flops/model_per_step": 10**9}
    assert gate.failed(gate.compare(bench_json(SPEED, cpu="Other CPU", counters=fewer), REFERENCE, TOY))


def test_counters_scheduling_moves_are_printed_not_gated(monkeypatch):
    monkeypatch.setattr("benchmarks.counters.SCHEDULED", (r"fsdp-n2 comm/.*",))
    more = {"comm/all_reduce@replicate/bytes_per_step/rank0": 8192, "flops/model_per_step": 10**9}
    checks = [c for c in gate.compare(bench_json(SPEED, counters=more), REFERENCE, TOY) if c.subject == FAST.key]
    assert {c.verdict for c in checks if c.kind == "counter"} == {gate.OK, gate.MOVES}
    assert not gate.failed(checks)


def test_the_tensor_parallel_peak_that_moved_in_ci_is_printed_and_its_state_gated():
    from benchmarks.counters import scheduled

    arm = "tp-n2-micro_batch16-eval_every11"
    for field in ("peak_bytes", "grads", "activations", "other"):
        assert scheduled(f"{arm} memory/{field}/rank1")
    for field in ("state_bytes", "params", "optimizer"):
        assert not scheduled(f"{arm} memory/{field}/rank1")
    assert not scheduled("ddp-n2 memory/peak_bytes/rank1")


def test_only_blocking_measures_fail_on_a_slowdown(monkeypatch):
    slower = {**SPEED, FAST.key: 900.0 / 1.3}  # fsdp 30% slower: its ratio and its units move
    checks = gate.compare(bench_json(slower), REFERENCE, TOY)
    assert verdicts(checks, "cpu_ratio")["fsdp/ddp"] == gate.SLOWER
    assert verdicts(checks, "cpu_units")[FAST.key] == gate.SLOWER
    monkeypatch.setattr(gate, "BLOCKING", frozenset({"counter"}))
    assert not gate.failed(checks)
    monkeypatch.setattr(gate, "BLOCKING", frozenset({"counter", "cpu_units"}))
    assert gate.failed(checks)
    assert "(printed, not blocking)" in gate.format_table(checks)


def test_time_measures_block_only_on_the_pairs_the_false_alarm_test_ran(monkeypatch):
    monkeypatch.setattr(gate, "BLOCKING", frozenset({"counter", "cpu_units"}))
    monkeypatch.setattr(gate, "TESTED", frozenset({FAST.key}))
    checks = gate.compare(bench_json({**SPEED, SLOW.key: 700.0 / 1.3}), REFERENCE, TOY)
    assert verdicts(checks, "cpu_units")[SLOW.key] == gate.SLOWER and not gate.failed(checks)
    checks = gate.compare(bench_json({**SPEED, FAST.key: 900.0 / 1.3}), REFERENCE, TOY)
    assert gate.failed(checks)


def test_units_catch_a_slower_shared_loop_that_ratios_cannot_see():
    # every suite arm 20% slower in machine units, ratios unchanged
    checks = gate.compare(bench_json(SPEED, units=12.0), REFERENCE, TOY)
    assert set(verdicts(checks, "cpu_units").values()) == {gate.SLOWER}
    assert set(verdicts(checks, "cpu_ratio").values()) == {gate.OK}
    assert verdicts(checks, "loop_units") == {gate.LOOP: gate.SLOWER}


def test_the_loop_measure_is_the_median_over_arms_so_one_slow_arm_moves_it_little():
    checks = gate.compare(bench_json({**SPEED, FAST.key: 900.0 / 1.3}), REFERENCE, TOY)
    loop = next(c for c in checks if c.measure == "loop_units")
    assert loop.verdict == gate.OK and loop.measured == pytest.approx(1.0)


def test_a_machine_that_slows_the_bare_loop_as_much_as_the_suites_does_not_fail_the_loop_measure():
    bare = Config(BARE_LOOP)
    pairs = [*TOY, Pair("suite/bare-loop", BASE, bare)]
    speed = {**SPEED, bare.key: 1100.0}
    reference = gate.reference_from(bench_json(speed, pairs), pairs, reason="with the bare loop")

    def loop(slower: dict[str, float]) -> gate.Check:
        return next(c for c in gate.compare(bench_json(slower, pairs), reference, pairs) if c.measure == "loop_units")

    machine = loop({k: v / 1.2 for k, v in speed.items()})  # every loop 20% slower, the bare one too
    assert machine.verdict == gate.OK and machine.measured == pytest.approx(1.0)
    suite = loop({**{k: v / 1.2 for k, v in SPEED.items()}, bare.key: 1100.0})  # only the suite's loop
    assert suite.verdict == gate.SLOWER and suite.measured == pytest.approx(1.2)


def test_the_loop_measure_is_not_judged_when_the_calibration_kernels_show_an_unsteady_machine():
    slower = {k: v / 1.2 for k, v in SPEED.items()}  # every arm 20% slower: loop_units says SLOWER

    def with_spread(spread: float) -> dict:
        bench = bench_json(slower)
        for b in bench["benchmarks"]:
            for r in b["extra_info"]["rounds"]:
                for side in (r["baseline"], r["method"]):
                    side["calibration_spread"] = {"matmul_cpu_s": spread, "matmul_wall_s": 0.0}
        return bench

    steady = [c for c in gate.compare(with_spread(-0.05), REFERENCE, TOY) if c.measure == "loop_units"]
    assert [c.verdict for c in steady] == [gate.SLOWER]
    unsteady = [c for c in gate.compare(with_spread(-0.15), REFERENCE, TOY) if c.measure == "loop_units"]
    assert [c.verdict for c in unsteady] == ["not judged: machine unsteady (spread 15.0%)"]
    assert "not judged: machine unsteady (spread 15.0%)" in gate.format_table(unsteady)


def test_time_measures_are_judged_on_the_references_processor_only(monkeypatch):
    monkeypatch.setattr(gate, "BLOCKING", frozenset({"counter", "cpu_units", "cpu_ratio"}))
    slower = {**SPEED, FAST.key: 900.0 / 1.3}
    checks = gate.compare(bench_json(slower, cpu="Other CPU", units=20.0), REFERENCE, TOY)
    assert set(verdicts(checks, "cpu_units").values()) == {gate.OTHER_MACHINE}
    assert verdicts(checks, "cpu_ratio")["fsdp/ddp"] == gate.SLOWER and not gate.failed(checks)
    assert gate.failed(gate.compare(bench_json(slower), REFERENCE, TOY))


@given(ratio=st.floats(0.05, 3), ref=st.floats(0.05, 3), tol=st.floats(0.01, 0.5))
def test_ratio_verdict_follows_the_change_against_the_tolerance(ratio, ref, tol):
    pair = Pair("m/b", FAST, BASE, tolerance=tol)
    reference = {"pairs": {"m/b": {"ratio": ref, "method": FAST.key, "baseline": BASE.key}}}
    checks = gate.compare(bench_json({BASE.key: 1000.0, FAST.key: 1000.0 * ratio}, [pair]), reference, [pair])
    change = ratio / ref - 1
    expected = gate.SLOWER if change < -tol else gate.FASTER if change > tol else gate.OK
    assert verdicts(checks, "wall_ratio")["m/b"] == expected


def test_missing_measurement_missing_reference_and_stale_reference_fail():
    partial = bench_json({BASE.key: 1000.0, FAST.key: 900.0})
    assert verdicts(gate.compare(partial, REFERENCE, TOY), "wall_ratio")["ac/ddp"] == gate.NOT_MEASURED
    grown = [*TOY, Pair("bf16/ddp", Config("ddp", precision="bf16"), BASE)]
    checks = gate.compare(bench_json({**SPEED, "ddp-n2-bf16": 1500.0}, grown), REFERENCE, grown)
    assert verdicts(checks, "wall_ratio")["bf16/ddp"] == gate.NO_REFERENCE
    assert verdicts(checks, "counter/*")["ddp-n2-bf16"] == gate.NO_REFERENCE and gate.failed(checks)
    changed = [Pair("fsdp/ddp", Config("fsdp", nproc=4), BASE)]
    checks = gate.compare(bench_json({BASE.key: 1000.0, "fsdp-n4": 900.0}, changed), REFERENCE, changed)
    assert verdicts(checks, "wall_ratio") == {"fsdp/ddp": gate.STALE} and gate.failed(checks)


def test_reference_needs_a_full_run_and_a_reason():
    with pytest.raises(ValueError, match="full run"):
        gate.reference_from(bench_json({BASE.key: 1000.0, FAST.key: 900.0}), TOY, reason="x")
    with pytest.raises(ValueError, match="reason"):
        gate.reference_from(bench_json(SPEED), TOY, reason=" ")


def test_refreshing_only_counters_keeps_the_times_and_records_the_reason():
    more = {"comm/all_reduce@replicate/bytes_per_step/rank0": 8192, "flops/model_per_step": 10**9}
    new = gate.reference_from(bench_json(SPEED, counters=more, units=50.0), TOY, reason="bigger buckets", old=REFERENCE)
    assert new["arms"][FAST.key]["counters"] == more
    assert new["arms"][FAST.key]["losses"] == {ISA: LOSSES}
    assert new["arms"][FAST.key]["cpu_units"] == REFERENCE["arms"][FAST.key]["cpu_units"]
    assert new["pairs"] == REFERENCE["pairs"]
    assert [h["reason"] for h in new["history"]] == ["the toy's first reference", "bigger buckets"]
    assert not gate.failed(gate.compare(bench_json(SPEED, counters=more), new, TOY))


def write(path: Path, obj: dict) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def test_command_line_prints_the_table_and_exits_1_on_a_changed_counter(tmp_path, capsys):
    ref = write(tmp_path / "ref.json", REFERENCE)
    assert gate.main([write(tmp_path / "ok.json", bench_json(SPEED)), "--reference", ref], TOY) == 0
    bad = write(tmp_path / "bad.json", bench_json(SPEED, counters={"flops/model_per_step": 2 * 10**9}))
    assert gate.main([bad, "--reference", ref], TOY) == 1
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith(FAST.key) and "flops/model_per_step" in line)
    assert row.split()[1:] == [
        "counter/flops/model_per_step",
        "1,000,000,000",
        "2,000,000,000",
        "+100.0%",
        "0%",
        "CHANGED",
    ]


def test_command_line_writes_a_reference_with_its_reason_then_passes(tmp_path, capsys):
    run = write(tmp_path / "run.json", bench_json(SPEED))
    ref = tmp_path / "ref.json"
    assert gate.main([run, "--write-reference", str(ref)], TOY) == 2
    assert "--reason" in capsys.readouterr().err
    assert gate.main([run, "--write-reference", str(ref), "--command", "by hand", "--reason", "first"], TOY) == 0
    assert json.loads(ref.read_text())["history"][0] == {
        "written": json.loads(ref.read_text())["written"],
        "reason": "first",
        "command": "by hand",
    }
    assert gate.main([run, "--reference", str(ref)], TOY) == 0


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "run `nox -s bench` first"),
        ("{", "not valid JSON"),
        ({"benchmarks": []}, "not a throughput benchmark JSON"),
    ],
)
def test_bad_input_is_one_line_naming_the_fix(tmp_path, capsys, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    assert gate.main([str(path), "--reference", write(tmp_path / "ref.json", REFERENCE)], TOY) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# ---- the registry and the committed reference -------------------------------------------------------------


def test_registry_pairs_are_distinct_valid_and_budgeted_in_steps(tmp_path):
    assert len({p.name for p in PAIRS}) == len(PAIRS)
    assert all(p.method.key != p.baseline.key for p in PAIRS)
    assert 0 < len(selected(short=True)) < len(PAIRS)
    for config in {c for p in PAIRS for c in (p.method, p.baseline)} - {Config(BARE_LOOP)}:
        cfg = config.run_config(tmp_path)
        check_config(cfg)
        assert cfg.tokens == config.steps * config.nproc * cfg.micro_batch * cfg.seq_len


def test_committed_reference_covers_every_pair_and_arm_with_a_reason():
    reference = json.loads((ROOT / "results" / "bench" / "reference.json").read_text())
    assert {name: (e["method"], e["baseline"]) for name, e in reference["pairs"].items()} == {
        p.name: (p.method.key, p.baseline.key) for p in PAIRS
    }
    assert set(reference["arms"]) == set(gate.arms_of(PAIRS))
    assert all(h["reason"].strip() and h["command"].strip() for h in reference["history"])
    suite_arms = [a for a in reference["arms"] if not a.startswith(BARE_LOOP)]
    assert all(reference["arms"][a]["counters"] for a in suite_arms if "nometers" not in a)
    short = {c.key for p in selected(short=True) for c in (p.method, p.baseline)}
    assert all(reference["arms"][a].get("losses") for a in suite_arms if a in short)  # golden losses


@pytest.mark.slow
def test_gate_reports_a_method_slowed_on_purpose(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_SLOWDOWN", "fsdp:1.0")  # fsdp's steps burn twice their CPU time
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("SUITE_REPRODUCTIONS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the launcher sets it; restore it afterwards
    tiny = (("micro_batch", 2), ("eval_batches", 1))
    pair = Pair("fsdp/ddp", Config("fsdp", sets=tiny, steps=5), Config("ddp", sets=tiny, steps=5))
    meter = PairMeter(tmp_path, RecordClock())
    result = meter(pair)
    assert result["method"]["slowdown"] == "fsdp:1.0"
    # the reference: the pair's own launches with the slowdown taken out (fsdp's CPU time halved)
    unslowed = {**result, "cpu_ratio": 2 * result["cpu_ratio"], "ratio": 2 * result["ratio"]}
    here = {"machine_info": {gate.ISA: "this machine's"}}
    reference = gate.reference_from(
        {
            **here,
            "bench_pairs": [pair.name],
            "benchmarks": [{"extra_info": {**meter.summary(pair), **unslowed, "rounds": [unslowed]}}],
        },
        [pair],
        reason="test",
    )
    run = {**here, "bench_pairs": [pair.name], "benchmarks": [{"extra_info": meter.summary(pair)}]}
    checks = gate.compare(run, reference, [pair])
    assert verdicts(checks, "cpu_ratio") == {pair.name: gate.SLOWER}
    assert {c.verdict for c in checks if c.kind == "counter"} == {gate.OK}  # a slowdown changes no counter
