"""The signature hierarchy of a task dataset: orders 0..m over the tokens the task is about (SPEC §2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxstair.checks import check_order
from ctxstair.signatures.counting import label_signature, occurrence
from ctxstair.tasks.dataset import Dataset


@dataclass(frozen=True)
class SignatureHierarchy:
    """Label signatures of orders ``0..len(orders)-1`` of one dataset (SPEC §2).

    Attributes:
        tokens: (T,) conditioning tokens α (the dataset's ``tokens``).
        labels: (K,) labels ν: every id that occurs as a target.
        context: (C,) context tokens β: every id that occurs in an input sequence.
        occurrence: (V,) ``r_α`` of every id.
        orders: ``orders[m]`` is the order-m label signature, shape (T, K, *[C] * m).
    """

    tokens: np.ndarray
    labels: np.ndarray
    context: np.ndarray
    occurrence: np.ndarray
    orders: tuple[np.ndarray, ...]

    def __repr__(self) -> str:
        """One line: the sizes and each order's shape."""
        shapes = ", ".join(f"order {m} {tuple(sig.shape)}" for m, sig in enumerate(self.orders))
        return (f"SignatureHierarchy({len(self.tokens)} tokens, {len(self.labels)} labels, {len(self.context)} "
                f"context tokens, V = {len(self.occurrence)}; {shapes})")

    def as_arrays(self) -> dict[str, np.ndarray]:
        """Flat name -> array mapping (``order0``, ``order1``, ...) for ``np.savez``."""
        arrays = {"tokens": self.tokens, "labels": self.labels, "context": self.context, "occurrence": self.occurrence}
        arrays.update({f"order{m}": sig for m, sig in enumerate(self.orders)})
        return arrays


def signature_hierarchy(dataset: Dataset, max_order: int, max_bytes: int | None = None) -> SignatureHierarchy:
    """Label signatures (SPEC §2) of orders 0..max_order of ``dataset``, restricted to the ids that occur.

    Labels are restricted to ids that occur in ``y`` and context to ids that occur in ``X``; entries
    outside are zero by definition, so nothing is lost. Every order's size is checked against
    ``max_bytes`` before any is computed.
    """
    max_order = check_order(max_order, dataset.seq_len)
    labels, context = np.unique(dataset.y), np.unique(dataset.X)
    args = (dataset.X, dataset.y)
    kwargs = dict(vocab_size=dataset.vocab_size, tokens=dataset.tokens, labels=labels, context=context,
                  max_bytes=max_bytes)
    # Largest order first: an oversized request fails before any work is done.
    orders = [label_signature(*args, m, **kwargs) for m in range(max_order, -1, -1)][::-1]
    return SignatureHierarchy(
        tokens=dataset.tokens, labels=labels, context=context,
        occurrence=occurrence(dataset.X, dataset.vocab_size), orders=tuple(orders),
    )
