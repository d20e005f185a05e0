"""Options and fixtures of the throughput benchmarks; which pairs a run covered goes into its JSON."""

from __future__ import annotations

import pytest

from benchmarks.measure import PairMeter
from benchmarks.pairs import selected


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--short", action="store_true",
                     help="only the pairs of CI's short gate (benchmarks/pairs.py, short=True)")


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    # the gate checks exactly these pairs, so a pair whose benchmark failed or was skipped fails it
    output_json["bench_pairs"] = [p.name for p in selected(config.getoption("short"))]


@pytest.fixture(scope="session")
def pair_meter(tmp_path_factory: pytest.TempPathFactory) -> PairMeter:
    return PairMeter(tmp_path_factory.mktemp("bench-runs"))
