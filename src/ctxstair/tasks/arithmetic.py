"""Arithmetic tasks of SPEC §8 (F1-F4, F9): complete enumerations of number sequences.

Every task here lists *all* input sequences once (the full dataset of SPEC §8), in lexicographic
order of the positions (``x1`` slowest, the last position fastest), and computes the label with a
closed-form rule. Numbers ``1..N`` are token ids ``1..N``; labels are token ids of the same
vocabulary (a label ``k`` is the token ``k``), so ``vocab_size`` is one more than the largest id
that can occur. Token ``0`` appears only where a label can be 0 (``sub``, ``mod``, ``modsum``).
"""

from __future__ import annotations

import math

import numpy as np

from ctxstair.checks import check_int, check_rows
from ctxstair.errors import InputError
from ctxstair.tasks.common import all_pairs, numbers, product_grid
from ctxstair.tasks.dataset import Dataset
from ctxstair.tasks.registry import register

# --------------------------------------------------------------------------------------------
# Two-number tasks: X = (x1, x2), x in 1..N, all N**2 pairs (SPEC §8 F1, F2b, F3, F9)
# --------------------------------------------------------------------------------------------


def _pair_task(N: int, rule, vocab_size: int) -> Dataset:
    """All pairs of ``1..N`` (lexicographic) labelled by ``rule(x1, x2)``; tokens ``1..N``."""
    check_rows("the N**2 input pairs", N * N, 2)
    X = all_pairs(N)
    y = rule(X[:, 0], X[:, 1]).astype(np.int64)
    return Dataset(X=X, y=y, vocab_size=vocab_size, tokens=numbers(1, N), meta={})


@register("add")
def add(N: int = 20) -> Dataset:
    """Addition F_add: y = x1 + x2 over all pairs of 1..N (SPEC §8 F1/F2b/F3).

    Parameters:
        N: largest number, ``N >= 2``.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``2..2N`` are ids ``2..2N``; id 0 unused.
    ``vocab_size = 2N + 1``; ``tokens = 1..N``.

    Label: ``y = x1 + x2``. Samples: all ``N**2`` pairs, lexicographic (``x1`` slowest).
    """
    N = check_int("N", N, 2)
    return _pair_task(N, lambda a, b: a + b, 2 * N + 1)


@register("sub")
def sub(N: int = 20) -> Dataset:
    """Absolute difference F_sub: y = |x1 - x2| over all pairs of 1..N (SPEC §8 F2b).

    Parameters:
        N: largest number, ``N >= 2``.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``0..N-1`` are ids ``0..N-1``.
    ``vocab_size = N + 1``; ``tokens = 1..N``.

    Label: ``y = |x1 - x2|``. Samples: all ``N**2`` pairs, lexicographic (``x1`` slowest).
    """
    N = check_int("N", N, 2)
    return _pair_task(N, lambda a, b: np.abs(a - b), N + 1)


@register("mul")
def mul(N: int = 20) -> Dataset:
    """Multiplication F_mul: y = x1 * x2 over all pairs of 1..N (SPEC §8 F2b).

    Parameters:
        N: largest number, ``N >= 2``.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``1..N**2`` are ids ``1..N**2``; id 0
    unused. ``vocab_size = N*N + 1``; ``tokens = 1..N``.

    Label: ``y = x1 * x2``. Samples: all ``N**2`` pairs, lexicographic (``x1`` slowest).
    """
    N = check_int("N", N, 2)
    return _pair_task(N, lambda a, b: a * b, N * N + 1)


@register("mod")
def mod(N: int = 20) -> Dataset:
    """Shifted modular addition F_mod: y = (x1 + x2 + 1) mod N over all pairs of 1..N (SPEC §8 F3).

    Parameters:
        N: largest number and modulus, ``N >= 2``.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``0..N-1`` are ids ``0..N-1``.
    ``vocab_size = N + 1``; ``tokens = 1..N``. Every number's order-0 label signature is uniform.

    Label: ``y = (x1 + x2 + 1) mod N``. Samples: all ``N**2`` pairs, lexicographic.
    """
    N = check_int("N", N, 2)
    return _pair_task(N, lambda a, b: (a + b + 1) % N, N + 1)


@register("modsum")
def modsum(N: int = 20, M: int = 5) -> Dataset:
    """Sum modulo M: y = (x1 + x2) mod M over all pairs of 1..N (SPEC §8 F9).

    Parameters:
        N: largest number, ``N >= 2``.
        M: modulus, ``M >= 2``. When ``M`` divides ``N`` every number's order-0 signature is
            uniform (slow onset); otherwise it is informative.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``0..M-1`` are ids ``0..M-1`` (shared
    with the numbers where they overlap). ``vocab_size = max(N, M-1) + 1``; ``tokens = 1..N``.

    Label: ``y = (x1 + x2) mod M``. Samples: all ``N**2`` pairs, lexicographic.
    """
    N = check_int("N", N, 2)
    M = check_int("M", M, 2)
    return _pair_task(N, lambda a, b: (a + b) % M, max(N, M - 1) + 1)


@register("sum_mod")
def sum_mod(N: int = 10, L: int = 2, max_samples: int = 10_000_000) -> Dataset:
    """Sum of L numbers modulo N, plus one: y = 1 + (x_1 + ... + x_L) mod N, all N**L sequences (SPEC §8 F4).

    Parameters:
        N: largest number and modulus, ``N >= 2``.
        L: sequence length, ``L >= 1``.
        max_samples: refuse (InputError) when ``N**L`` exceeds it, before allocating anything;
            ``>= 1``.

    Token ids: numbers ``1..N`` are ids ``1..N``; labels ``1..N`` are the same ids; id 0 unused.
    ``vocab_size = N + 1``; ``tokens = 1..N``.

    Label: ``y = 1 + (sum_i x_i) mod N``. Samples: all ``N**L`` sequences, lexicographic
    (first position slowest).
    """
    N = check_int("N", N, 2)
    L = check_int("L", L, 1)
    max_samples = check_int("max_samples", max_samples, 1)
    # Compare in logs first: N**L itself may have billions of digits.
    if L * math.log2(N) > math.log2(max_samples) + 1 or max_samples < N**L:
        raise InputError(
            f"sum_mod with N={N}, L={L} has N**L ~ 10^{L * math.log10(N):.1f} sequences, above "
            f"max_samples={max_samples}; lower N or L, or raise max_samples"
        )
    check_rows("the N**L input sequences", N**L, L)
    X = product_grid(*([numbers(1, N)] * L))
    y = 1 + X.sum(axis=1) % N
    return Dataset(X=X, y=y, vocab_size=N + 1, tokens=numbers(1, N), meta={})
