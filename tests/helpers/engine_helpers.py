"""The ensemble engine's update, run for a few epochs under a chosen execution plan, for the tests that
compare weights bit for bit across plans and kernels."""

from __future__ import annotations

import torch

from ctxstair import numerics, tasks
from ctxstair.config import RunConfig
from ctxstair.models import build_ensemble
from ctxstair.train import engine, plan
from ctxstair.train.plan import ExecutionPlan, PassPlan


def trained(cfg: RunConfig, execution: ExecutionPlan, epochs: int = 4) -> dict[str, torch.Tensor]:
    """The weights after ``epochs`` updates, ``ctxstair run``'s update made under ``execution``."""
    numerics.apply_to_torch()
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    torch.manual_seed(0)
    model = build_ensemble(cfg, dataset)
    execution.apply(model)
    optimizer = engine.make_optimizer(cfg, model.parameters())
    update = engine.epoch_update(cfg, model, optimizer, X, y, torch.Generator().manual_seed(1), execution)
    for epoch in range(epochs):
        optimizer.zero_grad()
        losses, _ = engine.member_losses(model, X, y, backward=engine.reuses_forward(cfg, X.shape[0]),
                                         plan=execution)
        update(epoch, losses)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def grouped(cfg: RunConfig, group: int, embedding_sum: str | None) -> ExecutionPlan:
    """A plan running ``group`` members at a time in every pass of ``cfg``, summing embeddings by
    ``embedding_sum`` (``gather``, ``counts``, or None for a model without the sum)."""
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    return ExecutionPlan(tuple(PassPlan(size, group, embedding_sum)
                               for size in plan.pass_sizes(cfg, dataset.n_samples)))
