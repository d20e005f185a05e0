"""The throughput gate (benchmarks/gate.py): its ratios and verdicts, its registry, and that it can fail.

The unit tests feed it hand-made pytest-benchmark JSON; the slow test slows a real method on purpose
(tests/slow_method.py, a DDP that sleeps after each step) and checks that the gate reports it.
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
from benchmarks.measure import PairMeter, RecordClock
from benchmarks.pairs import PAIRS, Config, Pair, selected
from suite.cli import check_config

ROOT = Path(__file__).resolve().parent.parent
BASE, FAST, SLOW = Config("ddp"), Config("fsdp"), Config("ddp", ac=True)
TOY = [Pair("fsdp/ddp", FAST, BASE), Pair("ac/ddp", SLOW, BASE, tolerance=0.2)]


def bench_json(tokens_per_s: dict[str, float], pairs: list[Pair] = TOY) -> dict:
    """The parts of a benchmark JSON the gate reads, as PairMeter.summary and benchmarks/conftest.py write them."""
    entries = []
    for p in pairs:
        if p.method.key in tokens_per_s and p.baseline.key in tokens_per_s:
            ratio = tokens_per_s[p.method.key] / tokens_per_s[p.baseline.key]
            entries.append(
                {
                    "name": f"test_throughput[{p.name}]",
                    "extra_info": {"pair": p.name, "ratio": ratio, "rounds": [{"ratio": ratio}]},
                }
            )
    return {"bench_pairs": [p.name for p in pairs], "datetime": "2026-01-01T00:00:00", "benchmarks": entries}


def verdicts(rows: list[gate.Row]) -> dict[str, str]:
    return {r.pair: r.verdict for r in rows}


REFERENCE = gate.reference_from(bench_json({BASE.key: 1000.0, FAST.key: 900.0, SLOW.key: 700.0}), TOY)


class FakeLaunches:
    """Stands in for `measure`: records the launch order; each launch's tokens/s is its configuration's
    speed times the machine's load factor at that launch (1 after the given ones)."""

    def __init__(self, tokens_per_s: dict[str, float], load: tuple[float, ...] = ()) -> None:
        self.tokens_per_s, self.load, self.order = tokens_per_s, load, []

    def __call__(self, config: Config, results: Path) -> dict:
        factor = self.load[len(self.order)] if len(self.order) < len(self.load) else 1.0
        self.order.append(config.key)
        return {"config": config.key, "tokens_per_s": self.tokens_per_s[config.key] * factor, "step_s": 0.5}


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
    for _ in range(3):
        meter(pair)
    assert launches.order == [BASE.key, FAST.key, BASE.key, FAST.key]
    summary = meter.summary(pair)
    assert [r["ratio"] for r in summary["rounds"]] == pytest.approx([0.9, 900 / 1250, 1350 / 1250])
    assert summary["ratio"] == pytest.approx(0.9)


def test_short_gate_needs_seven_launches(tmp_path, monkeypatch):
    launches = FakeLaunches(dict.fromkeys({c.key for p in PAIRS for c in (p.method, p.baseline)}, 1000.0))
    monkeypatch.setattr("benchmarks.measure.measure", launches)
    meter = PairMeter(tmp_path, RecordClock())
    for pair in selected(short=True):
        meter(pair)
    assert len(launches.order) == 7  # 4 pairs; fsdp/ddp reuses the DDP launch of meters/no-meters


def test_a_run_against_its_own_reference_passes():
    bench = bench_json({BASE.key: 1000.0, FAST.key: 900.0, SLOW.key: 700.0})
    rows = gate.compare(bench, gate.reference_from(bench, TOY), TOY)
    assert verdicts(rows) == {"fsdp/ddp": gate.OK, "ac/ddp": gate.OK}
    assert all(r.change == 0 for r in rows) and not gate.failed(rows)


def test_only_ratios_matter_not_machine_speed():
    # a machine twice as slow, every configuration alike: no regression
    rows = gate.compare(bench_json({BASE.key: 500.0, FAST.key: 450.0, SLOW.key: 350.0}), REFERENCE, TOY)
    assert not gate.failed(rows)


@given(base=st.floats(100, 1e5), ratio=st.floats(0.05, 3), ref=st.floats(0.05, 3), tol=st.floats(0.01, 0.5))
def test_verdict_follows_the_change_against_the_tolerance(base, ratio, ref, tol):
    pair = Pair("m/b", FAST, BASE, tolerance=tol)
    rows = gate.compare(
        bench_json({BASE.key: base, FAST.key: base * ratio}, [pair]),
        {"pairs": {"m/b": {"ratio": ref, "method": FAST.key, "baseline": BASE.key}}},
        [pair],
    )
    change = (base * ratio / base) / ref - 1
    expected = gate.REGRESSED if change < -tol else gate.FASTER if change > tol else gate.OK
    assert rows[0].verdict == expected
    assert gate.failed(rows) == (expected == gate.REGRESSED)


def test_missing_measurement_missing_reference_and_stale_reference_fail():
    partial = bench_json({BASE.key: 1000.0, FAST.key: 900.0})
    assert verdicts(gate.compare(partial, REFERENCE, TOY))["ac/ddp"] == gate.NOT_MEASURED
    grown = [*TOY, Pair("bf16/ddp", Config("ddp", precision="bf16"), BASE)]
    bench = bench_json({BASE.key: 1000.0, FAST.key: 900.0, SLOW.key: 700.0, "ddp-n2-bf16": 1500.0}, grown)
    assert verdicts(gate.compare(bench, REFERENCE, grown))["bf16/ddp"] == gate.NO_REFERENCE
    changed = [Pair("fsdp/ddp", Config("fsdp", nproc=4), BASE)]
    rows = gate.compare(bench_json({BASE.key: 1000.0, "fsdp-n4": 900.0}, changed), REFERENCE, changed)
    assert verdicts(rows) == {"fsdp/ddp": gate.STALE} and gate.failed(rows)


def test_reference_needs_a_full_run():
    with pytest.raises(ValueError, match="full run"):
        gate.reference_from(bench_json({BASE.key: 1000.0, FAST.key: 900.0}), TOY)


def write(path: Path, obj: dict) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def test_command_line_prints_the_table_and_exits_1_on_a_regression(tmp_path, capsys):
    ref = write(tmp_path / "ref.json", REFERENCE)
    ok = write(tmp_path / "ok.json", bench_json({BASE.key: 1000.0, FAST.key: 880.0, SLOW.key: 700.0}))
    assert gate.main([ok, "--reference", ref], TOY) == 0
    bad = write(tmp_path / "bad.json", bench_json({BASE.key: 1000.0, FAST.key: 700.0, SLOW.key: 700.0}))
    assert gate.main([bad, "--reference", ref], TOY) == 1
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["pair", "reference", "measured", "change", "tolerance", "verdict"]
    assert next(line for line in table[::-1] if line.startswith("fsdp/ddp")).split()[1:] == [
        "0.900",
        "0.700",
        "-22.2%",
        "10%",
        "REGRESSED",
    ]


def test_command_line_writes_a_reference_the_gate_then_passes(tmp_path):
    run = write(tmp_path / "run.json", bench_json({BASE.key: 1000.0, FAST.key: 900.0, SLOW.key: 700.0}))
    ref = tmp_path / "ref.json"
    assert gate.main([run, "--write-reference", str(ref), "--command", "measured by hand"], TOY) == 0
    assert json.loads(ref.read_text())["command"] == "measured by hand"
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


def test_registry_pairs_are_distinct_valid_and_budgeted_in_steps(tmp_path):
    assert len({p.name for p in PAIRS}) == len(PAIRS)
    assert all(p.method.key != p.baseline.key for p in PAIRS)
    assert 0 < len(selected(short=True)) < len(PAIRS)
    for config in {c for p in PAIRS for c in (p.method, p.baseline)} - {Config(BARE_LOOP)}:
        cfg = config.run_config(tmp_path)
        check_config(cfg)
        assert cfg.tokens == config.steps * config.nproc * cfg.micro_batch * cfg.seq_len


def test_committed_reference_covers_every_pair_with_its_settings():
    reference = json.loads((ROOT / "results" / "bench" / "reference.json").read_text())
    assert {name: (e["method"], e["baseline"]) for name, e in reference["pairs"].items()} == {
        p.name: (p.method.key, p.baseline.key) for p in PAIRS
    }


@pytest.mark.slow
def test_gate_reports_a_method_slowed_on_purpose(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SUITE_REPRODUCTIONS", "tests.slow_method")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the launcher sets it; restore it afterwards
    sleep_s = 1.0  # per step: the ratio falls below 0.75 unless a step takes over 3 s
    tiny = (("micro_batch", 2), ("eval_batches", 1))
    pair = Pair(
        "ddp-slow/ddp",
        Config("ddp-slow", meters=False, sets=(*tiny, ("sleep_s", sleep_s)), steps=4),
        Config("ddp", meters=False, sets=tiny, steps=4),
    )
    meter = PairMeter(tmp_path, RecordClock())
    assert meter(pair)["method"]["step_s"] >= sleep_s
    # ddp-slow without its sleep is ddp itself, so the ratio it must keep is 1
    reference = {"pairs": {pair.name: {"ratio": 1.0, "method": pair.method.key, "baseline": pair.baseline.key}}}
    run = {"bench_pairs": [pair.name], "benchmarks": [{"extra_info": meter.summary(pair)}]}
    code = gate.main(
        [write(tmp_path / "run.json", run), "--reference", write(tmp_path / "ref.json", reference)], [pair]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert next(line for line in out.splitlines() if line.startswith(pair.name)).endswith(gate.REGRESSED)
