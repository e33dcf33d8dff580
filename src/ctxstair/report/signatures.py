"""Figures of a task's signature hierarchy: similarity heatmaps and PCA, one panel per view (SPEC §2-3).

Views: the order-0 label signature; each order m >= 1 flattened over all (ν, β_1..β_m) axes; and
order 1 contracted with the highest Fourier component ``c_{P/2}`` over the context tokens (SPEC §3
"Fourier view"), the odd/even structure that the late `add` embeddings show. The flattened order-1
view can be uninformative (for `add` every token's order-1 signature has its own support, so the
matrix is the identity); the contracted one shows what an order-1 probe can see.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ctxstair.alignment import fourier_signatures, signature_cosine
from ctxstair.report.figures import (
    DEFAULT_FIGURE_FORMAT,
    house_style,
    pca_scatter,
    save_figure,
    similarity_heatmap,
)
from ctxstair.signatures.hierarchy import SignatureHierarchy


def signature_views(sigs: SignatureHierarchy) -> list[tuple[str, np.ndarray]]:
    """SPEC §2-3 views: (title, per-token array (T, ...)) for every view drawn by :func:`write_signature_figures`."""
    views = [(f"order-{m} label signatures" + (" (flattened)" if m else ""), sig) for m, sig in enumerate(sigs.orders)]
    if len(sigs.orders) > 1:
        k = sigs.context.size // 2
        views.append((f"order 1 through the Fourier probe $c_{{{k}}}$", fourier_signatures(sigs.orders[1], [k])[0]))
    return views


@house_style
def write_signature_figures(sigs: SignatureHierarchy, task: str, out_dir: Path,
                            figure_format: str = DEFAULT_FIGURE_FORMAT) -> list[Path]:
    """Write ``signature_similarity.png`` (cosine heatmap per view, SPEC §3) and ``signature_pca.png`` (PCA of
    the task tokens per view) into ``out_dir``, each with its ``figure_format`` copy; return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    views = signature_views(sigs)
    paths = []
    for name, draw, headline in [
        ("signature_similarity.png",
         lambda ax, title, M: similarity_heatmap(ax, signature_cosine(M), sigs.tokens, title),
         "cosine similarity of the tokens' probability signatures"),
        ("signature_pca.png", lambda ax, title, M: pca_scatter(ax, M, sigs.tokens, title),
         "signatures of the task tokens on their first two principal components"),
    ]:
        fig, axes = plt.subplots(1, len(views), figsize=(2.9 * len(views), 2.8), squeeze=False, layout="constrained")
        for ax, (title, M) in zip(axes[0], views):
            draw(ax, title, M)
        fig.suptitle(f"Task '{task}': {headline}")
        paths += save_figure(fig, out_dir / name, figure_format)
    return paths
