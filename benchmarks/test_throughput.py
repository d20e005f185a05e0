"""Throughput of every configuration in benchmarks/pairs.py, one launch each, in one pytest-benchmark run.

    pytest benchmarks/test_throughput.py -m bench --benchmark-json results/bench/latest.json [--short]

`nox -s bench` runs exactly this; `python -m benchmarks.gate` turns the JSON into ratios and a verdict.
"""

from __future__ import annotations

import pytest

from benchmarks.measure import STEP_CLOCK, measure
from benchmarks.pairs import Config, configs_of, selected

pytestmark = [pytest.mark.bench, pytest.mark.benchmark(group="throughput", timer=STEP_CLOCK)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "config" in metafunc.fixturenames:
        configs = configs_of(selected(metafunc.config.getoption("short")))
        metafunc.parametrize("config", configs, ids=[c.key for c in configs])


def test_throughput(benchmark, config: Config, tmp_path) -> None:
    info = benchmark.pedantic(measure, args=(config, tmp_path), rounds=1, iterations=1)
    benchmark.extra_info.update(info)
