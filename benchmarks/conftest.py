"""Options and fixtures of the throughput benchmarks; which pairs a run covered goes into its JSON."""

from __future__ import annotations

import argparse

import pytest
import torch

from benchmarks.measure import PairMeter, RoundPolicy
from benchmarks.pairs import selected


def round_policy(text: str) -> RoundPolicy:
    try:
        return RoundPolicy.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--short", action="store_true", help="only the pairs marked short (benchmarks/pairs.py, short=True)"
    )
    parser.addoption(
        "--rounds",
        type=round_policy,
        default=RoundPolicy(fixed=1),
        help="rounds per pair: N (n rounds: n + 1 alternating launches), or auto[:LEAST-MOST] to choose them "
        "from the spread of the first rounds' ratios; the gate uses their median ratio",
    )


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    # the gate checks exactly these pairs, so a pair whose benchmark failed or was skipped fails it
    output_json["bench_pairs"] = [p.name for p in selected(config.getoption("short"))]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    # the CPU kernels torch dispatches to (AVX2, AVX512, ...) sum in different orders, so golden losses and
    # memory counters are exact only between runs on the same instruction set (benchmarks/gate.py)
    machine_info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()


@pytest.fixture(scope="session")
def rounds(pytestconfig: pytest.Config) -> RoundPolicy:
    return pytestconfig.getoption("rounds")


@pytest.fixture(scope="session")
def pair_meter(tmp_path_factory: pytest.TempPathFactory) -> PairMeter:
    return PairMeter(tmp_path_factory.mktemp("bench-runs"))
