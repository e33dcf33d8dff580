"""What the two lineage recipes of SPEC §9 share (``composite``, :mod:`ctxstair.recipes.composite`, and
``reason-memory``, :mod:`ctxstair.recipes.reason_memory`): the anchor-lineage machinery.

Both recipes train one part per γ (:func:`part_name`: ``gamma-0.3``, ...; the ensemble engine shares
one γ among its members) with the seeds as ensemble members (``--seeds K``, default 3) and the same
optimiser and snapshots (:func:`lineage_config`), skip the alignment analysis and read the snapshots
themselves: the conclusion rebuilds each snapshot's model (:func:`snapshot_model`) and evaluates it
on the task's samples and held-out sets (:func:`logits`). ``summary.csv`` has one row per (γ, seed).

*Order along PC1* (:func:`order_along_pc1`): |Spearman| between the tokens' coordinates on the first
principal component of their embedding rows and their values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.stats
import torch

from ctxstair.alignment.pca import pca
from ctxstair.analysis import measures as ms
from ctxstair.config import AnalysisConfig, ModelConfig, RunConfig, SnapshotConfig, TaskConfig, TrainConfig
from ctxstair.models import Ensemble
from ctxstair.report.formats import fmt
from ctxstair.run import Run
from ctxstair.tasks import Dataset

#: A held-out answer "is the model's answer" when at least this fraction of the held-out samples get it.
MAJORITY = 0.5


def part_name(gamma: float) -> str:
    """The part (run directory) of one γ: ``gamma-0.8``."""
    return f"gamma-{gamma:g}"


def snapshot_model(run: Path, epoch: int) -> tuple[Dataset, Ensemble]:
    """The dataset of ``run`` and its ensemble with the weights of the snapshot at ``epoch``."""
    run = Run(run)
    return run.dataset, run.model_at(epoch)


def logits(model: Ensemble, X: np.ndarray) -> torch.Tensor:
    """Logits (K, n, V) of every member on token ids X (n, L), without gradients."""
    with torch.no_grad():
        return model(torch.from_numpy(X))


def order_along_pc1(rows: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(|Spearman| between the rows' coordinates on their first principal component and ``values``,
    the fraction of the rows' variance that PC1 explains)."""
    coords, explained = pca(rows, 1)
    return float(abs(scipy.stats.spearmanr(coords[:, 0], values)[0])), float(explained[0])


def gamma_of(run: Path) -> float:
    """The γ of a part's run directory."""
    return float(Run(run).config.model.init.gamma)


def values_text(values: list[float], digits: int = 2) -> str:
    """'0.62 [0.52, 0.66, 0.70]': the median over members, then every member's value."""
    return f"{fmt(ms.median(values), digits)} [{', '.join(fmt(v, digits) for v in values)}]"


def gammas_text(parts: list[dict], sep: str = " → ") -> str:
    """The parts' γ values, '0.3 → 0.5 → 1'."""
    return sep.join(f"{p['gamma']:g}" for p in parts)


def lineage_config(name: str, task: TaskConfig, model: ModelConfig, epochs: int, every: int) -> RunConfig:
    """The configuration of one γ part of recipe ``name``: ``model`` on ``task``, 3 seeds, full-batch Adam
    lr 1e-3 for ``epochs``, snapshots every ``every`` epochs (and 16 early), no alignment analysis."""
    return RunConfig(recipe=name, task=task, model=model,
                     train=TrainConfig(optimizer="adam", lr=1e-3, epochs=epochs, members=3),
                     snapshots=SnapshotConfig(log_points=16, every=every), analysis=AnalysisConfig(enabled=False))
