"""Training engine: ensembles, optimizers, snapshots, checkpoints, resumable runs (issue 3)."""

from ctxstair.train.engine import build_model, member_losses, member_specs, train_run
from ctxstair.train.schedule import snapshot_schedule

__all__ = ["build_model", "member_losses", "member_specs", "snapshot_schedule", "train_run"]
