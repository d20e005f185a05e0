"""The instrumented attentions are exact, and their counters equal count.py's closed forms."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from reproductions.flash_io import count_io
from reproductions.flash_io.count import block_sizes, io_counts, min_sram, sram_peak
from reproductions.flash_io.execute import execute


def _reference(q, k, v, grad_out, causal):
    """Output and gradients from scaled_dot_product_attention's math backend."""
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*(t[None] for t in leaves), is_causal=causal)[0]
    out.backward(grad_out)
    return out.detach(), tuple(t.grad for t in leaves)


@st.composite
def shapes(draw):
    n = draw(st.integers(1, 20))
    d = draw(st.integers(1, 8))
    m = draw(st.integers(min_sram(d), max(min_sram(d), n * d) + 8 * d))
    return n, d, m, draw(st.booleans())


@settings(max_examples=80, deadline=None)
@given(shapes(), st.sampled_from(("tiled", "standard")))
def test_exact_against_math_backend_and_counted_in_closed_form(shape, algorithm):
    n, d, m, causal = shape
    torch.manual_seed(n * 1000 + d * 10 + m)
    q, k, v, grad_out = (torch.randn(n, d, dtype=torch.float64) for _ in range(4))
    out, grads = _reference(q, k, v, grad_out, causal)
    run = execute(q, k, v, grad_out, m, algorithm=algorithm, causal=causal)
    torch.testing.assert_close(run.out, out, rtol=1e-10, atol=1e-10)
    for mine, theirs in zip(run.grads, grads):
        torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-9)
    assert run.io == io_counts(n, d, m, algorithm=algorithm, causal=causal)
    forward_only = execute(q, k, v, None, m, algorithm=algorithm, causal=causal)
    assert forward_only.io == io_counts(n, d, m, algorithm=algorithm, causal=causal, backward=False)
    if algorithm == "tiled":
        bc, br = block_sizes(n, d, m)
        assert run.sram_peak == sram_peak(n, d, bc, br) <= m
        assert forward_only.sram_peak == sram_peak(n, d, bc, br, backward=False) <= m


def test_float32_matches_default_backend_with_blocks_that_do_not_divide_n():
    torch.manual_seed(0)
    n, d, m = 37, 16, 600  # B_c = 4, B_r = 4 (588 elements): 37 = 9 x 4 + 1
    q, k, v = (torch.randn(1, n, d) for _ in range(3))
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[0]
        got = execute(q[0], k[0], v[0], None, m, algorithm="tiled", causal=causal).out
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# Worked by hand from the algorithms' lines (not from count.py's formulas):
# N=4, d=2, M=23: one row of each tile (8d + 7 = 23 elements) and no more, so B_c = B_r = 1: 4 column blocks
#   of 1 key and 4 row blocks.
#   forward: K, V read once (2*4*2 = 16); each of the 16 tiles reads Q_i, O_i (2 x 2) and l_i, m_i (2): 96;
#            O, l, m initialised (8 + 4 + 4 = 16); each tile writes O_i, l_i, m_i (4): 64.  112 reads, 80 writes.
#   backward: K, V (16) + 16 tiles x (Q_i, O_i, dO_i, dQ_i: 8, l_i, m_i: 2) = 176 reads;
#             dQ, dK, dV initialised (24) + 16 tiles x dQ_i (2) + dK, dV once (16) = 72 writes.
#   causal: column j meets rows j..3, 4+3+2+1 = 10 tiles: forward 16 + 60 reads, 16 + 40 writes;
#           backward 16 + 100 reads, 24 + 20 + 16 writes.
# N=5, d=2, M=54, causal: B_c = B_r = 2 fills M exactly (4*2*2 + 4*2*2 + 4*2*2 + 3*2 = 54; B_c = 3 needs 70);
#   column blocks start at keys 0, 2, 4; row blocks
#   {0,1}, {2,3}, {4}. Column 0 meets all 5 rows, column 2 rows 2..4 (3), column 4 row 4 (1): 9 rows of tiles.
#   forward reads 20 + 9 x 6 = 74, writes 10 + 10 + 9 x 4 = 56.
# Standard, N=4, d=2: S = QK^T reads 16 writes 16; softmax reads 16 writes 16; O = PV reads 16 + 8 writes 8:
#   forward 56 reads, 40 writes. Backward: dV = P^T dO 16 + 8 / 8; dP = dO V^T 16 / 16; dS 32 / 16;
#   dQ = dS K 16 + 8 / 8; dK = dS^T Q 16 + 8 / 8: 120 reads, 56 writes.
@pytest.mark.parametrize(
    "n, d, m, algorithm, causal, backward, reads, writes",
    [
        (4, 2, 23, "tiled", False, False, 112, 80),
        (4, 2, 23, "tiled", False, True, 112 + 176, 80 + 72),
        (4, 2, 23, "tiled", True, False, 76, 56),
        (4, 2, 23, "tiled", True, True, 76 + 116, 56 + 60),
        (5, 2, 54, "tiled", True, False, 74, 56),
        (4, 2, None, "standard", False, False, 56, 40),
        (4, 2, None, "standard", True, True, 56 + 120, 40 + 56),
    ],
)
def test_counts_worked_by_hand(n, d, m, algorithm, causal, backward, reads, writes):
    io = io_counts(n, d, m, algorithm=algorithm, causal=causal, backward=backward)
    assert (io.reads, io.writes) == (reads, writes)
    assert count_io(n, d, m, algorithm=algorithm, causal=causal, backward=backward) == reads + writes
    if m is not None or algorithm == "standard":
        q, k, v, g = (torch.randn(n, d) for _ in range(4))
        assert execute(q, k, v, g if backward else None, m, algorithm=algorithm, causal=causal).io == io


def test_block_sizes_fit_the_sram():
    # the paper's ceil(M / 4d) = 192 and min(192, 64) would hold 114,880 elements in the backward
    assert sram_peak(1024, 64, 192, 64) == 114_880
    assert block_sizes(1024, 64, 49152) == (63, 63)  # 4*63*64*2 + 4*63*63 + 3*63 = 48,321; 64 needs 49,344
    assert block_sizes(1024, 64, 65536) == (95, 64)  # B_c above d: B_r stays d
    assert block_sizes(10, 3, 31) == (1, 1)
    assert block_sizes(4, 2, 10_000) == (4, 2)  # never wider than N


def test_tiled_grows_as_n2_d2_over_m_standard_as_n2():
    # doubling N quadruples the tiled count's leading term; doubling M about halves it (non-causal)
    n, d, m = 4096, 64, 32768
    tiled = count_io(n, d, m, algorithm="tiled", backward=False)
    assert count_io(2 * n, d, m, algorithm="tiled", backward=False) / tiled == pytest.approx(4, rel=0.02)
    assert count_io(n, d, 2 * m, algorithm="tiled", backward=False) / tiled == pytest.approx(0.5, rel=0.1)
    standard = count_io(n, d, None, algorithm="standard", backward=False)
    assert count_io(2 * n, d, None, algorithm="standard", backward=False) / standard == pytest.approx(4, rel=0.02)


@pytest.mark.parametrize("m", [1, 8, 70])
def test_sram_too_small_for_one_row_of_tiles_is_one_clear_error(m):
    with pytest.raises(ValueError, match=r"cannot hold one row of each tile at d=8 \(8d \+ 7 = 71\); choose M >= 71"):
        count_io(20, 8, m, algorithm="tiled")
    with pytest.raises(ValueError, match=r"choose M >= 71"):
        execute(*(torch.randn(20, 8) for _ in range(3)), m=m, algorithm="tiled")


def test_bad_algorithm_and_missing_m_name_the_fix():
    with pytest.raises(ValueError, match="unknown algorithm 'flash'; choose one of: tiled, standard"):
        count_io(8, 2, 23, algorithm="flash")
    with pytest.raises(ValueError, match="needs the SRAM size m"):
        count_io(8, 2, None, algorithm="tiled")
    with pytest.raises(ValueError, match="must all be N x d"):
        execute(torch.randn(2, 4, 2), torch.randn(2, 4, 2), torch.randn(2, 4, 2), m=23, algorithm="tiled")
