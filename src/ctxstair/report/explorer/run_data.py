"""What the explorer of an ensemble run shows (SPEC §3, §8 F1–F3), computed from its files.

Per snapshot ``t`` of one member: ``S^emb(t)``, the cosine matrix of the task tokens' embedding
rows; the PCA pictures of those rows (:func:`ctxstair.alignment.pca.pca_paths`); and, fixed,
``S^sig,(0)`` and ``S^sig,(1)`` through every Fourier probe ``c_k`` (the report's geometry figure
shows ``k = P/2``). Over training: the alignment curves of ``alignment.csv`` and the loss and
accuracy of ``metrics.jsonl``. Numbers are rounded to :data:`DIGITS` decimals, which keeps the
staircase-add page near 1 MB of data.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment.fourier import fourier_signatures
from ctxstair.alignment.pca import pca_paths
from ctxstair.alignment.similarity import signature_cosine, stacked_cosines
from ctxstair.errors import InputError
from ctxstair.report.typeset import typeset

#: Decimals kept for matrices and coordinates in the page (cosines in [-1, 1]: 5e-5 at most off).
DIGITS = 4
#: At most this many loss rows per member go into the page (evenly thinned, the last one kept).
MAX_LOSS_POINTS = 3000


def run_payload(run_dir: str | Path, member: int = 0, page_dir: str | Path | None = None) -> dict:
    """The data of a run's explorer page (module docstring) for ``member``; ``page_dir``: the
    directory the page goes to (default ``run_dir``), which its links are relative to.

    Returns:
        JSON-ready dict: ``kind`` "run", ``title``, ``unit`` "epoch", ``member``, ``members``,
        ``times`` (S,), ``tokens`` (T,) labels, ``S_emb`` (S, T, T), ``S_sig0`` (T, T),
        ``sig1`` (``ks``, ``default_k``, ``S`` {k: (T, T)}; None with order 0 only), ``curves``
        (alignment series over epochs ≥ 0), ``fourier`` {k: series}, ``loss`` (``x``, ``loss``,
        ``acc``), ``pca`` (``fixed``, ``procrustes``: (S, T, 2); None for a single token), ``report``
        (:func:`report_link`).

    Raises:
        InputError: no snapshots or no ``signatures.npz``, or ``member`` out of range.
    """
    run_dir = Path(run_dir)
    sigs = rundir.read_signatures(run_dir)
    times = rundir.snapshot_times(run_dir)
    if not times:
        raise InputError(f"{run_dir} has no snapshots to explore (was it run with --no-analysis?)")
    stacks = [rundir.load_snapshot(run_dir, t)["W_E"] for t in times]
    members = stacks[0].shape[0]
    if isinstance(member, bool) or not isinstance(member, (int, np.integer)) or not 0 <= member < members:
        raise InputError(f"member must be in 0..{members - 1} (members in the snapshots), got {member!r}")
    E = np.stack([W[member][sigs.tokens] for W in stacks]).astype(np.float64)  # (S, T, d)
    config = rundir.read_json(run_dir, "summary.json") if (run_dir / "summary.json").is_file() else {}
    paths = pca_paths(E) if E.shape[1] >= 2 else None  # one task token (label-law) has no PCA picture
    return {
        "kind": "run", "unit": "epoch", "member": int(member), "members": int(members),
        "title": _title(run_dir, config, member, members),
        "lead": typeset("Move the slider or press play: the cosine matrix of the task tokens' embeddings, S^emb, "
                        "starts near the order-0 signatures' geometry and moves towards the order-1 one "
                        "(SPEC §3, docs/science.md). Hover a cell for its pair of tokens and value, a point for its "
                        "token."),
        "times": [int(t) for t in times], "tokens": [str(int(t)) for t in sigs.tokens],
        "S_emb": rounded(stacked_cosines(E)), "S_sig0": rounded(signature_cosine(sigs.orders[0])),
        "sig1": _order1(sigs), **_curves(run_dir, member),
        "loss": _loss(run_dir, member),
        "pca": paths and {"fixed": rounded(paths["fixed"]), "procrustes": rounded(paths["procrustes"])},
        "report": report_link(run_dir, page_dir or run_dir),
    }


def report_link(run_dir: Path, page_dir: str | Path) -> str | None:
    """The link from a page in ``page_dir`` to the report of ``run_dir``: its own ``report.html``,
    or that of the recipe output it is a part of; None when there is none."""
    for folder in (run_dir, run_dir.parent):
        if (folder / "report.html").is_file() and (folder == run_dir or (folder / "recipe.json").is_file()):
            return Path(os.path.relpath(folder / "report.html", page_dir)).as_posix()
    return None


def _title(run_dir: Path, summary: dict, member: int, members: int) -> str:
    config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""
    recipe = summary.get("recipe") or next((line.split(":", 1)[1].strip() for line in config.splitlines()
                                            if line.startswith("recipe:")), "run")
    return f"{recipe}: the embeddings over training" + (f" (member {member} of {members})" if members > 1 else "")


def _order1(sigs) -> dict | None:
    """``S^sig,(1)`` through every Fourier probe c_k, k = 0..P/2 (SPEC §3 Fourier view)."""
    if len(sigs.orders) < 2 or sigs.tokens.size < 2:  # one token has no order-1 geometry to compare
        return None
    ks = np.arange(sigs.context.size // 2 + 1)
    views = fourier_signatures(sigs.orders[1], ks)  # (n_k, T, K_l)
    return {"ks": ks.tolist(), "default_k": int(ks[-1]),
            "S": {str(int(k)): rounded(signature_cosine(view)) for k, view in zip(ks, views)}}


def _curves(run_dir: Path, member: int) -> dict:
    """The alignment series of ``alignment.csv`` (order 0, the probes) and the Fourier ones by k."""
    if not (run_dir / "alignment.csv").is_file():
        return {"curves": [], "fourier": {}}
    table = rundir.read_alignment(run_dir)
    curves = []
    epochs, r0 = rundir.alignment_series(table, "order0", member)
    if epochs.size:
        defined = rundir.alignment_series(table, "order0", member, "defined")[1].astype(bool)
        if defined.any():
            curves.append(series("order 0: Pearson ρ_(0) with S^sig,(0)", epochs, r0))
        else:
            curves.append(series("order 0: 1 − MSE (correlation undefined: all order-0 signatures equal)",
                                  epochs, rundir.alignment_series(table, "order0", member, "one_minus_mse")[1]))
    for key, name in (("order1_probe", "order-1 probe (held-out Pearson)"),
                      ("order1_probe_zero_mean", "order-1 probe, v ⟂ 1 (held-out Pearson)")):
        epochs, values = rundir.alignment_series(table, key, member)
        if epochs.size:
            curves.append(series(name, epochs, values))
    fourier = {}
    for signature in np.unique(table["signature"]):
        if str(signature).startswith("fourier_k"):
            epochs, values = rundir.alignment_series(table, str(signature), member)
            fourier[str(signature)[len("fourier_k"):]] = series("order 1 through c_k (Pearson)", epochs, values)
    return {"curves": curves, "fourier": fourier}


def series(name: str, x, y) -> dict:
    """A curve for the page: ``{"name"`` (typeset, :func:`~ctxstair.report.typeset.typeset`),
    ``"x": times (int), "y": values (5 decimals, None where not finite)}``."""
    return {"name": typeset(name), "x": [int(v) for v in x],
            "y": [None if not np.isfinite(v) else round(float(v), 5) for v in y]}


def _loss(run_dir: Path, member: int) -> dict:
    metrics = rundir.read_metrics(run_dir)
    keep = np.flatnonzero(metrics["member"] == member)
    if keep.size > MAX_LOSS_POINTS:
        keep = keep[np.unique(np.linspace(0, keep.size - 1, MAX_LOSS_POINTS).round().astype(int))]
    return {"x": metrics["epoch"][keep].tolist(),
            "loss": [round(float(v), 6) for v in metrics["loss"][keep]],
            "acc": [round(float(v), 5) for v in metrics["acc"][keep]]}


def rounded(a: np.ndarray) -> list:
    """A float array as nested lists rounded to :data:`DIGITS` decimals (+0.0 for -0.0)."""
    return (np.round(np.asarray(a, dtype=np.float64), DIGITS) + 0.0).tolist()
