"""The tiny language-model run of the LM tests: settings that train in seconds on the CPU."""

from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig

TINY = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
        "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 30,
        "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 4, "snapshots.every": 10,
        "analysis.k": 40, "analysis.probe_steps": 30, "analysis.windows": 16}


def tiny(**extra) -> LMConfig:
    return apply_overrides(LMConfig(), {**TINY, **extra})
