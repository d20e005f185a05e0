"""Options of the throughput benchmarks, and which pairs a run covered (written into its JSON for the gate)."""

from __future__ import annotations

import pytest

from benchmarks.pairs import selected


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--short", action="store_true",
                     help="only the pairs of CI's short gate (benchmarks/pairs.py, short=True)")


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    # the gate checks exactly these pairs, so a configuration that was not measured fails it
    output_json["bench_pairs"] = [p.name for p in selected(config.getoption("short"))]
