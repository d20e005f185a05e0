"""Options and fixtures of the throughput benchmarks; which pairs a run covered goes into its JSON."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.measure import PairMeter
from benchmarks.pairs import selected


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--short", action="store_true", help="only the pairs of CI's short gate (benchmarks/pairs.py, short=True)"
    )
    parser.addoption(
        "--rounds",
        type=positive_int,
        default=1,
        help="rounds per pair (n rounds: n + 1 alternating launches); the gate uses their median ratio",
    )


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    # the gate checks exactly these pairs, so a pair whose benchmark failed or was skipped fails it
    output_json["bench_pairs"] = [p.name for p in selected(config.getoption("short"))]


@pytest.fixture(scope="session")
def rounds(pytestconfig: pytest.Config) -> int:
    return pytestconfig.getoption("rounds")


@pytest.fixture(scope="session")
def pair_meter(tmp_path_factory: pytest.TempPathFactory) -> PairMeter:
    return PairMeter(tmp_path_factory.mktemp("bench-runs"))
