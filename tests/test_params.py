"""Typed method and optimizer parameters (suite/params.py), and a reproduction's name written once."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.extensions import reproductions
from suite.judge.claims import load_claims
from suite.params import Param, parse_params
from suite.plan.plans import load_plan
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_a_whole_number_parameter_refuses_a_fraction_and_a_switch_in_one_line():
    for bad in ("2.5", "true"):
        proc = run_cli(["run", "hsdp", "--nproc", "4", "--tokens", "1024", "--set", f"shard={bad}"])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"error: method hsdp: shard must be a whole number >= 1, got '{bad}'; pass e.g. --set shard=1"
        ]


def test_run_method_help_lists_its_parameters_with_defaults():
    proc = run_cli(["run", "b-sdp", "--optimizer", "dion", "--help"])
    assert proc.returncode == 0
    assert "method b-sdp parameters (--set KEY=VALUE):" in proc.stdout
    assert "C: a number in (0, 1] (default 0.5)" in proc.stdout
    assert "optimizer dion parameters (--set KEY=VALUE):" in proc.stdout
    assert "rank_fraction: a number in (0, 1] (default 1)" in proc.stdout


@given(st.integers(-1000, 1000))
def test_an_int_reads_its_own_text_and_a_plans_typed_value_alike(n):
    p = Param(int, 0)
    assert p.parse("n", str(n)) == p.parse("n", n) == n


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_range_admits_exactly_its_interval(x):
    p = Param(float, 0.5, low=0, high=1, low_open=True)
    if 0 < x <= 1:
        assert p.parse("C", repr(x)) == x
    else:
        with pytest.raises(ValueError, match=r"C must be a number in \(0, 1\]"):
            p.parse("C", repr(x))


@pytest.mark.parametrize("raw", ["nan", "inf", "", "two"])
def test_a_number_refuses_what_is_not_a_finite_number(raw):
    with pytest.raises(ValueError, match="must be a number"):
        Param(float).parse("lr", raw)


def test_choices_and_unknown_names_are_one_line_errors():
    declared = {"mode": Param(str, "a", choices=("a", "b"))}
    with pytest.raises(ValueError, match=r"^m: mode must be one of a, b, got 'c'; pass e.g. --set mode=a$"):
        parse_params("m", declared, {"mode": "c"})
    with pytest.raises(ValueError, match=r"m has no parameter 'other' \(its parameters: mode\)"):
        parse_params("m", declared, {"other": "1"})


def test_a_reproductions_name_is_its_runs_its_claims_commands_and_its_nox_session():
    found = {name: rep for name, rep in reproductions().items() if rep.module.startswith("reproductions.")}
    # noxfile.py names a reproduce-NAME session after each folder with a plan.py, "_" read as "-"
    assert {p.parent.name.replace("_", "-") for p in (ROOT / "reproductions").glob("*/plan.py")} == set(found)
    for name, rep in found.items():
        plan = load_plan(name, "smoke")
        assert plan.name == name
        # a plan may file runs under a name of its own (dion's learning-rate sweep: dion-lr-sweep)
        assert all(cfg.reproduction == name or cfg.reproduction.startswith(f"{name}-") for cfg in plan.runs)
        assert all(f"--set reproduction={cfg.reproduction}" in cfg.command for cfg in plan.runs)
        for claim in load_claims(rep.claims) if rep.claims else []:
            words = shlex.split(claim.command)
            if words[:4] == ["python", "-m", "suite", "reproduce"]:
                assert words[4] == name, f"{claim.id}: its command names {words[4]!r}, the reproduction is {name!r}"
