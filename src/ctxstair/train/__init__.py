"""Training engine: ensembles, optimizers, snapshots, checkpoints, resumable runs."""

from ctxstair.train.engine import member_losses, train_run
from ctxstair.train.schedule import snapshot_schedule

__all__ = ["member_losses", "snapshot_schedule", "train_run"]
