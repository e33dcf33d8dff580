"""Coordinate-wise activations of the CBOW model (SPEC §5): relu, gelu, tanh, poly, monomial."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ctxstair.errors import InputError


def activation_fn(name: str, coeffs: Sequence[float] = (), power: int = 2) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation σ by name.

    ``poly``: ``σ(z) = Σ_{k=1}^K C_k z^k`` with ``coeffs = (C_1..C_K)`` (no constant term, so
    σ(0) = 0 as for the others); ``monomial``: ``σ(z) = z^power``.
    """
    if name == "relu":
        return torch.relu
    if name == "gelu":
        return torch.nn.functional.gelu
    if name == "tanh":
        return torch.tanh
    if name == "poly":
        c = [float(x) for x in coeffs]
        if not c:
            raise InputError("activation 'poly' needs coeffs C_1..C_K (at least one)")
        return lambda z: sum(ck * z**k for k, ck in enumerate(c, start=1))
    if name == "monomial":
        if power < 1:
            raise InputError(f"activation 'monomial' needs power >= 1, got {power}")
        return lambda z: z**power
    raise InputError(f"unknown activation {name!r}; allowed: relu, gelu, tanh, poly, monomial")
