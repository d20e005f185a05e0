"""Every run setting declares its checks with the setting (suite/config.py setting(within=, allowed=, requires=)):
no non-finite or out-of-range number reaches a worker (issue 46: `--set lr=nan` failed inside the workers with
tracebacks and an incomplete record), and each refusal is one line naming the setting."""

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.config import FIELDS, RunConfig, check_settings, field_type

NUMERIC = sorted(n for n in FIELDS if field_type(n) in (int, float))
RANGED = [n for n in NUMERIC if FIELDS[n].metadata["within"] is not None]


def test_every_numeric_setting_declares_its_range_or_what_it_requires():
    bare = [n for n in NUMERIC if FIELDS[n].metadata["within"] is None and FIELDS[n].metadata["requires"] is None]
    assert not bare, f"numeric settings that declare no check: {bare}"


@pytest.mark.parametrize("name", [n for n in RANGED if field_type(n) is float])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_is_refused_in_one_line_naming_the_setting(name, value):
    with pytest.raises(ValueError) as err:
        check_settings(dataclasses.replace(RunConfig(tokens=1000.0), **{name: value}))
    message = str(err.value)
    assert (FIELDS[name].metadata["flag"] or name) in message and "\n" not in message


def _outside(name: str) -> float:
    r = FIELDS[name].metadata["within"]
    return r.low if r.low_open else r.low - 1


@pytest.mark.parametrize("name", [n for n in RANGED if FIELDS[n].metadata["within"].low is not None])
def test_a_number_below_the_declared_range_is_refused(name):
    value = field_type(name)(_outside(name))
    with pytest.raises(ValueError, match="must be"):
        check_settings(dataclasses.replace(RunConfig(tokens=1000.0), **{name: value}))


@given(st.sampled_from(RANGED), st.floats(-1e6, 1e6, allow_nan=False))
def test_a_finite_number_passes_exactly_when_its_range_holds_it(name, raw):
    value = field_type(name)(raw)
    cfg = dataclasses.replace(RunConfig(tokens=1000.0), **{name: value})
    inside = FIELDS[name].metadata["within"].contains(value)
    try:
        check_settings(cfg)
    except ValueError as err:
        assert not inside, f"{name}={value} is inside its range but refused: {err}"
    else:
        assert inside, f"{name}={value} is outside its range but passed"


def test_the_learning_rate_that_used_to_reach_the_workers_is_refused():
    for value in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="lr must be"):
            check_settings(RunConfig(tokens=1000.0, lr=value))
    with pytest.raises(ValueError, match="betas must be two numbers in"):
        check_settings(RunConfig(tokens=1000.0, betas=(0.9, 1.5)))
