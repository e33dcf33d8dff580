"""The dataset every task produces (SPEC §1): input sequences, targets and the tokens of interest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxstair.checks import check_id_subset, check_labels, check_sequences, check_vocab_size


@dataclass(frozen=True)
class Dataset:
    """A finite multiset of samples ``(X[i], y[i])``, each of weight 1 (SPEC §1).

    Attributes:
        X: int64 (n, L) input token ids.
        y: int64 (n,) target token ids.
        vocab_size: V; every id in ``X`` and ``y`` lies in ``0..V-1``.
        tokens: int64 (k,) the token ids the task is about (e.g. the number tokens), in a meaningful
            order (numeric order for numbers); analyses default to these.
        name: task name in the registry.
        params: the resolved task parameters (defaults filled in), enough to rebuild the dataset.
        meta: task-specific extras (token groups, label laws, held-out evaluation sets, ...).
    """

    X: np.ndarray
    y: np.ndarray
    vocab_size: int
    tokens: np.ndarray
    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        vocab_size = check_vocab_size(self.vocab_size)
        X = check_sequences(self.X, vocab_size)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", check_labels(self.y, X.shape[0], vocab_size))
        object.__setattr__(self, "tokens", check_id_subset(self.tokens, vocab_size, "tokens"))

    @property
    def n_samples(self) -> int:
        """Number of samples n."""
        return int(self.X.shape[0])

    @property
    def seq_len(self) -> int:
        """Sequence length L."""
        return int(self.X.shape[1])

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, n={self.n_samples}, L={self.seq_len}, V={self.vocab_size}, "
            f"tokens={self.tokens.size}, params={self.params})"
        )
