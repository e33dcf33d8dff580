"""The embedding sum ``h = Σ_i w^E_{x_i}`` of K stacked tables as compiled loops (numba), for the CPU (SPEC §5).

torch computes the gather as ``embedding`` then ``sum`` over the positions: it builds the (K, n, L, d)
rows, and its backward copies the gradient expanded over the L positions into another (K, n, L, d)
array before adding it into the table. At the staircase-add setting (16 members a group, n = 1,600,
L = 2, d = 128) each is 26 MB, where a per-model loop's stays in cache; the loops here never build
them (benchmarks/RESULTS.md, "Ensemble training").

Bitwise the same as torch's ops, so every recipe keeps its numbers:

* the backward adds each sample's gradient into its rows in the order torch's CPU embedding backward
  does — one index after the other, in memory order of the (K, n, L) rows, starting from zero — for
  any L;
* the forward adds the L rows in order, starting from zero; torch's CPU sum over a dimension of size
  1 or 2 gives the same bits, but from 3 rows on it groups float32 terms differently, so for L ≥ 3
  the forward stays torch's (:data:`COMPILED_FORWARD_MAX_POSITIONS`).

Tests compare both with torch's ops bit for bit. This module imports numba (≈ 0.3 s) and is imported
only where a gather runs on the CPU; each loop compiles once per dtype and is cached next to this file
(as :mod:`ctxstair.signatures.kernels`, which says where a read-only install keeps it).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

#: Up to this many positions per sample the compiled forward gives torch's bits (see the module's text).
COMPILED_FORWARD_MAX_POSITIONS = 2
#: The dtypes the loops run on; others (bfloat16, ...) keep torch's ops.
COMPILED_DTYPES = (torch.float32, torch.float64)


@numba.njit(cache=True, nogil=True)
def _sum_rows(table: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[k, i] = 0 + table[rows[k, i, 0]] + table[rows[k, i, 1]] + ...`` for table (R, d), rows int (K, n, L)
    and out (K, n, d), the L rows added in order."""
    K, n, L = rows.shape
    d = table.shape[1]
    for k in range(K):
        for i in range(n):
            for c in range(d):
                out[k, i, c] = 0
            for position in range(L):
                row = rows[k, i, position]
                for c in range(d):
                    out[k, i, c] += table[row, c]


@numba.njit(cache=True, nogil=True)
def _add_into_rows(grad: np.ndarray, rows: np.ndarray, grad_table: np.ndarray) -> None:  # pragma: no cover
    """``grad_table[rows[k, i, p]] += grad[k, i]`` for every (k, i, p) in memory order, for grad (K, n, d),
    rows int (K, n, L) and a zeroed grad_table (R, d)."""
    K, n, L = rows.shape
    d = grad.shape[2]
    for k in range(K):
        for i in range(n):
            for position in range(L):
                row = rows[k, i, position]
                for c in range(d):
                    grad_table[row, c] += grad[k, i, c]


class GatherSum(torch.autograd.Function):
    """``GatherSum.apply(table, rows)``: ``h[k, i] = Σ_p table[rows[k, i, p]]`` (K, n, d) for table (R, d) on
    the CPU and row numbers rows int64 (K, n, L); its gradient flows to ``table`` only."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(rows)
        ctx.table_rows = table.shape[0]
        if rows.shape[2] > COMPILED_FORWARD_MAX_POSITIONS:
            return torch.nn.functional.embedding(rows, table).sum(dim=2)
        out = torch.empty(*rows.shape[:2], table.shape[1], dtype=table.dtype)
        _sum_rows(table.detach().contiguous().numpy(), rows.numpy(), out.numpy())
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (rows,) = ctx.saved_tensors
        grad_table = torch.zeros(ctx.table_rows, grad.shape[2], dtype=grad.dtype)
        _add_into_rows(grad.contiguous().numpy(), rows.numpy(), grad_table.numpy())
        return grad_table, None
