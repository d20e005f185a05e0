"""Throughput and counters of every pair in benchmarks/pairs.py (a method and its baseline) in one pytest-benchmark run.

    pytest benchmarks/test_throughput.py -m bench --benchmark-json results/bench/latest.json [--short] [--rounds N|auto]

`nox -s bench` runs exactly this; `python -m benchmarks.gate` judges the counters, ratios and times in the JSON.
"""

from __future__ import annotations

import pytest

from benchmarks.measure import STEP_CLOCK, PairMeter, RoundPolicy
from benchmarks.pairs import Pair, selected

pytestmark = [pytest.mark.bench, pytest.mark.benchmark(group="throughput", timer=STEP_CLOCK)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pair" in metafunc.fixturenames:
        pairs = selected(metafunc.config.getoption("short"))
        metafunc.parametrize("pair", pairs, ids=[p.name for p in pairs])


def test_throughput(benchmark, pair: Pair, pair_meter: PairMeter, rounds: RoundPolicy) -> None:
    # pytest-benchmark times one call: all of the pair's rounds (their number depends on their spread)
    benchmark.pedantic(pair_meter.measure_rounds, args=(pair, rounds), rounds=1, iterations=1)
    benchmark.extra_info.update(pair_meter.summary(pair))
