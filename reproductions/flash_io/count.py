"""HBM accesses of one attention head, in closed form: what the instrumented algorithms (tiled.py, standard.py)
move, without executing them, so paper-scale shapes (GPT-2 medium: N 1024, d 64) cost nothing to count.

Elements, not bytes: one element is one number of Q, K, V, O, their gradients, S, P, or the softmax
statistics l and m. The tests check every formula here equal to the executed algorithm's counter.

Tiled (FlashAttention, arXiv 2205.14135 Algorithm 1 forward, Algorithm 4 backward without dropout). Block
sizes: the paper's B_c = ceil(M / 4d), B_r = min(ceil(M / 4d), d) do not fit M (the paper's analysis is up to
constants: the backward's K_j, V_j, dK_j, dV_j alone are 4 B_c d = M, and with Q_i, O_i, dO_i, dQ_i and the
four B_r x B_c tiles S, P, dP, dS it holds 114,880 elements at M = 49,152). Here B_r = min(B_c, d) as in the
paper, and B_c is the largest (at most N) whose tiles fit M: `sram_peak` counts what tiled.py holds at once,
and the tests check it equal to the executed algorithm's tracker. T_c = ceil(N / B_c) column blocks. For
column block j let R_j be the query rows it meets: N, or under a causal mask the rows of the row blocks not
entirely above the diagonal (fully masked tiles are skipped, as the CUDA kernels do). With R = sum_j R_j:
  forward  reads 2Nd (K, V once) + R (2d + 2) (Q_i, O_i, l_i, m_i per tile)
           writes Nd + 2N (O, l, m initialised) + R (d + 2) (O_i, l_i, m_i per tile)
  backward reads 2Nd (K, V) + R (4d + 2) (Q_i, O_i, dO_i, dQ_i, l_i, m_i per tile)
           writes 3Nd (dQ, dK, dV initialised) + R d (dQ_i per tile) + 2Nd (dK, dV once)
Without a mask R = T_c N, so the count is Theta(T_c N d) = Theta(N^2 d^2 / M) (Theorem 2).

Standard (Algorithm 0 forward, Algorithm 3 backward): S and P are materialised in HBM; scaling and the causal
mask are fused into the kernel that writes S, so a mask changes no count. Each operand of a matrix product
is read once, the paper's accounting (a real blocked product re-reads operand tiles; counting that would
only add to standard attention's total):
  forward  reads 3Nd + 2N^2, writes Nd + 2N^2          (S = QK^T; P = softmax(S); O = PV)
  backward reads 5Nd + 5N^2, writes 3Nd + 2N^2         (dV = P^T dO; dP = dO V^T; dS; dQ = dS K; dK = dS^T Q)
"""

from __future__ import annotations

from dataclasses import dataclass

ALGORITHMS = ("tiled", "standard")


@dataclass(frozen=True)
class Io:
    """Elements read from and written to HBM."""

    reads: int
    writes: int

    @property
    def moved(self) -> int:
        return self.reads + self.writes

    def __add__(self, other: Io) -> Io:
        return Io(self.reads + other.reads, self.writes + other.writes)


def sram_peak(n: int, d: int, bc: int, br: int, *, backward: bool = True) -> int:
    """Most elements tiled.py holds on chip at once with blocks B_c x B_r (edge tiles are smaller).

    forward:  K_j, V_j (2 B_c d); Q_i, O_i and the new O_i (3 B_r d); S, P (2 B_r B_c); l_i, m_i, new l, m (4 B_r)
    backward: K_j, V_j, dK_j, dV_j (4 B_c d); Q_i, O_i, dO_i, dQ_i (4 B_r d); S, P, dP, dS (4 B_r B_c);
              l_i, m_i, D_i (3 B_r)"""
    bc, br = min(bc, n), min(br, n)
    forward = 2 * bc * d + 3 * br * d + 2 * br * bc + 4 * br
    return max(forward, 4 * bc * d + 4 * br * d + 4 * br * bc + 3 * br) if backward else forward


def min_sram(d: int) -> int:
    """The smallest M that holds one row of every tile (B_c = B_r = 1), forward and backward."""
    return sram_peak(1, d, 1, 1)


def check_shape(n: int, d: int, m: int | None = None) -> None:
    """One line naming the fix for a shape the tiled algorithm cannot run (M too small for one row of its tiles)."""
    if n < 1 or d < 1:
        raise ValueError(f"sequence length N and head dimension d must be >= 1, got N={n}, d={d}")
    if m is not None and m < min_sram(d):
        raise ValueError(
            f"SRAM size M={m} elements cannot hold one row of each tile at d={d} (8d + 7 = {min_sram(d)}); "
            f"choose M >= {min_sram(d)}"
        )


def block_sizes(n: int, d: int, m: int) -> tuple[int, int]:
    """(B_c, B_r): B_r = min(B_c, d) (Algorithm 1, line 1) and B_c the largest, at most N, whose tiles fit M."""
    check_shape(n, d, m)
    bc = 1
    while bc < n and sram_peak(n, d, bc + 1, min(bc + 1, d)) <= m:
        bc += 1
    return bc, min(bc, d)


def tiled_rows(n: int, d: int, m: int, causal: bool) -> list[int]:
    """R_j for each column block j: the query rows of the tiles that the algorithm visits in that column."""
    bc, br = block_sizes(n, d, m)
    # under a causal mask, row block i is visited when its last row reaches column c0: i >= c0 // br
    return [n - (c0 // br) * br if causal else n for c0 in range(0, n, bc)]


def tiled_io(n: int, d: int, m: int, *, causal: bool = False, backward: bool = True) -> Io:
    rows = sum(tiled_rows(n, d, m, causal))
    io = Io(2 * n * d + rows * (2 * d + 2), n * d + 2 * n + rows * (d + 2))
    if backward:
        io += Io(2 * n * d + rows * (4 * d + 2), 3 * n * d + rows * d + 2 * n * d)
    return io


def standard_io(n: int, d: int, *, backward: bool = True) -> Io:
    check_shape(n, d)
    io = Io(3 * n * d + 2 * n * n, n * d + 2 * n * n)
    if backward:
        io += Io(5 * n * d + 5 * n * n, 3 * n * d + 2 * n * n)
    return io


def io_counts(n: int, d: int, m: int | None, *, algorithm: str, causal: bool = False, backward: bool = True) -> Io:
    """Reads and writes of one head; `m` (SRAM elements) is ignored by "standard"."""
    if algorithm == "standard":
        return standard_io(n, d, backward=backward)
    if algorithm == "tiled":
        if m is None:
            raise ValueError("the tiled algorithm needs the SRAM size m (elements, d <= m <= N d)")
        return tiled_io(n, d, m, causal=causal, backward=backward)
    raise ValueError(f"unknown algorithm {algorithm!r}; choose one of: {', '.join(ALGORITHMS)}")


def count_io(n: int, d: int, m: int | None, *, algorithm: str, causal: bool = False, backward: bool = True) -> int:
    """Elements moved between HBM and SRAM for one attention head (forward, plus backward by default)."""
    return io_counts(n, d, m, algorithm=algorithm, causal=causal, backward=backward).moved


# The paper's A100 (arXiv 2205.14135 v2, section 2.1): "192KB of on-chip SRAM per each of 108 streaming
# multiprocessors". Taken as 4-byte elements (on-chip S, P, the accumulator and l, m are fp32 even with fp16
# inputs): 49,152 elements, inside Theorem 2's range d <= M <= N d at GPT-2 medium's N d = 65,536 (the CUDA
# kernels also keep tiles in registers and in fp16, so their tiles are larger than these).
A100_SRAM_BYTES = 192 * 1024
A100_M = A100_SRAM_BYTES // 4
