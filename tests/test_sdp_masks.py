"""SDP masks: coverage, balance, connectivity and the spectral gap, over many K, L and C."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproductions.sdp.masks import assign, held_count


@st.composite
def feasible(draw):
    """(L, K, C) with K * round(C * L) >= L, so every component can have a holder."""
    components = draw(st.integers(1, 40))
    workers = draw(st.integers(1, 16))
    n = draw(st.integers(-(-components // workers), components))
    return components, workers, n / components


@settings(max_examples=300, deadline=None)
@given(feasible())
def test_every_component_has_a_holder_and_holders_are_balanced(case):
    components, workers, coverage = case
    mask = assign(components, workers, coverage)
    m = mask.matrix()
    n = held_count(components, coverage)
    assert m.shape == (workers, components)
    assert (m.sum(axis=1) == n).all(), "every worker holds round(C L) components"
    counts = m.sum(axis=0)
    assert counts.min() >= 1
    assert counts.max() - counts.min() <= 1
    assert counts.sum() == workers * n
    assert mask.holder_counts() == counts.tolist()


@settings(max_examples=300, deadline=None)
@given(feasible())
def test_connected_exactly_when_the_edge_count_allows(case):
    components, workers, coverage = case
    mask = assign(components, workers, coverage)
    possible = workers * held_count(components, coverage) >= workers + components - 1
    assert mask.is_connected() == possible


@settings(max_examples=200, deadline=None)
@given(feasible())
def test_spectral_gap_is_positive_exactly_when_connected(case):
    mask = assign(*case)
    gap = mask.spectral_gap()
    assert 0.0 <= gap <= 1.0 + 1e-9
    assert (gap > 1e-9) == mask.is_connected()


@settings(max_examples=100, deadline=None)
@given(feasible())
def test_averaging_operator_is_stochastic(case):
    """W = N^-1 M D^-1 M^T has rows summing to one, so its top eigenvalue is 1 and the gap is 1 - lambda_2."""
    m = assign(*case).matrix().astype(float)
    w = (m / m.sum(axis=1, keepdims=True)) @ (m / m.sum(axis=0, keepdims=True)).T
    np.testing.assert_allclose(w.sum(axis=1), 1.0)


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_full_coverage_is_ddp(workers):
    mask = assign(16, workers, 1.0)
    assert mask.holder_sets() == [tuple(range(workers))]
    assert mask.spectral_gap() == pytest.approx(1.0)


def test_paper_setting_holds_eleven_of_sixteen_blocks():
    mask = assign(16, 8, 0.69)
    assert mask.effective_coverage == 11 / 16
    assert set(mask.holder_counts()) == {5, 6}


def test_a_partition_is_disconnected():
    mask = assign(4, 2, 0.5)
    assert mask.held == ((0, 1), (2, 3))
    assert not mask.is_connected()
    assert mask.spectral_gap() == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "components,workers,coverage,fix",
    [
        (4, 4, 0.0, "C must be in (0, 1]"),
        (4, 4, 1.5, "C must be in (0, 1]"),
        (4, 4, float("nan"), "C must be in (0, 1]"),
        (4, 0, 0.5, "--nproc K"),
        (4, 2.5, 0.5, "--nproc K"),
        (16, 4, 0.02, "--set C=0.0625 or more"),
        (16, 2, 0.25, "--set C=0.5 or more"),
    ],
)
def test_bad_c_or_k_names_the_fix(components, workers, coverage, fix):
    with pytest.raises(ValueError, match=fix.replace("(", r"\(").replace("]", r"\]").replace(".", r"\.")):
        assign(components, workers, coverage)
