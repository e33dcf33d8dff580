"""Attention sets the rate (SPEC §6.3, §8 F5b): attention, embedding norms and the three gradient
paths over the training of an attention-only run.

For every snapshot of a run with ``model.kind = attention``, every ensemble member and every token
group (the task's ``meta["groups"]``, e.g. anchors and noise; otherwise all task tokens), one row
of ``attention.csv``:

    member, epoch, group, attention, norm, path_value, path_key, path_query, cos_value, cos_key, cos_query

``attention`` is the attention the last position pays to an occurrence of a group token, averaged
over occurrences (``E[a_I | x_I ∈ group]``, 1/L for uniform attention); ``norm`` the mean norm of
the group's embedding rows ``|w_α|``; ``path_*`` the Frobenius norm, over the group's rows, of the
actual update ``−∇_{W_E} mean loss`` through the embeddings' use as values, keys and query
(:func:`ctxstair.theory.attention_path_gradients`, the positional embeddings included); ``cos_*``
the cosine of that path with the whole update over the same rows.

:func:`group_rows` computes the rows of one model; :mod:`ctxstair.analysis.attention_groups` writes
them for every snapshot of a run.
"""

from __future__ import annotations

import numpy as np

from ctxstair import tasks
from ctxstair.theory.attention import attention_forward, attention_path_gradients

ATTENTION_COLUMNS = ("member", "epoch", "group", "attention", "norm", "path_value", "path_key", "path_query",
                     "cos_value", "cos_key", "cos_query")
PATHS = ("value", "key", "query")


def token_groups(dataset: tasks.Dataset) -> dict[str, np.ndarray]:
    """The task's token groups (``meta["groups"]``), or ``{"tokens": dataset.tokens}``."""
    return dict(dataset.meta.get("groups") or {"tokens": dataset.tokens})


def group_rows(params: dict[str, np.ndarray], X: np.ndarray, y: np.ndarray,
               groups: dict[str, np.ndarray]) -> list[dict]:
    """Attention received, embedding norm and path gradients of each group for one model (SPEC §6.3).

    Args:
        params: one member's ``W_E (V, d)``, ``W_pos (L, d)`` (optional), ``W_Q``, ``W_K``, ``W_V``,
            ``W_O``, ``W_U`` (numpy).
        X: int (n, L) token ids; y: int (n,) labels.
        groups: group name -> int token ids.

    Returns:
        one dict per group with the columns of :data:`ATTENTION_COLUMNS` but ``member`` and ``epoch``.
    """
    A, _ = attention_forward(params, X)  # (n, L)
    paths = attention_path_gradients(params, X, y, objective="loss")
    norms = np.linalg.norm(np.asarray(params["W_E"], dtype=np.float64), axis=1)
    rows = []
    for name, ids in groups.items():
        held = np.isin(X, ids)
        full = paths["full"][ids].ravel()
        row = {"group": name, "attention": float(A[held].mean()) if held.any() else float("nan"),
               "norm": float(norms[ids].mean())}
        for path in PATHS:
            part = paths[path][ids].ravel()
            denom = np.linalg.norm(part) * np.linalg.norm(full)
            row[f"path_{path}"] = float(np.linalg.norm(part))
            row[f"cos_{path}"] = float(part @ full / denom) if denom > 0 else float("nan")
        rows.append(row)
    return rows
