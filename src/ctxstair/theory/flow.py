"""How far small-step gradient descent is from the exact gradient flow (SPEC §1, §5 "Training", §6).

The theory of SPEC §6 is about the gradient flow dθ/dt = −∇L(θ). Full-batch gradient descent with
step η is its explicit Euler discretisation: after k steps it approximates θ(t = kη) with a global
error O(η). :func:`gd_flow_distance` measures that error on a real configuration, from one shared
initialization, with the engine's own updates (``train.optimizer=gd`` and ``flow``)::

    from ctxstair.config import RunConfig, apply_overrides
    from ctxstair.theory.flow import gd_flow_distance
    cfg = apply_overrides(RunConfig(), {"task.N": 8, "model.d": 32, "model.activation": "tanh", "train.lr": 0.5})
    out = gd_flow_distance(cfg, epochs=20)
    out["distance"]          # (21,): ||θ_GD(e) − θ_flow(e·lr)|| / ||θ_flow(e·lr)||, 0 at e = 0

Halving ``train.lr`` and doubling ``epochs`` (the same flow time) roughly halves the distance.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ctxstair import tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.models import build_ensemble
from ctxstair.train.engine import epoch_update, make_optimizer, member_losses

__all__ = ["gd_flow_distance"]


def gd_flow_distance(cfg: RunConfig, epochs: int) -> dict[str, Any]:
    """Train ``cfg`` with full-batch GD (step ``train.lr``) and with the exact gradient flow, from the
    same initialization, for ``epochs`` epochs each; compare them at every epoch (SPEC §5, §6).

    Both runs use ``cfg``'s task, model, seeds, members and ``train.lr`` / ``weight_decay`` /
    ``flow_*`` settings, with ``train.optimizer`` set to ``gd`` and ``flow``, ``train.dtype`` forced
    to float64 (so that rounding does not blur small distances), full batch and no momentum. Epoch
    e of GD (e steps of size lr) is compared with the flow at time t = e·lr (the engine's meaning of
    "epoch" for ``flow``). Nothing is written to disk.

    Returns a dict:
        ``lr``: float; ``epoch``: (E+1,) ints 0..E; ``t``: (E+1,) flow times e·lr;
        ``distance``: (E+1,) relative distance ||θ_GD − θ_flow|| / ||θ_flow|| over all parameters
        (``W_E`` and ``W_U`` of every member, concatenated);
        ``member_distance``: (K, E+1) the same per ensemble member;
        ``loss_gd``, ``loss_flow``: (K, E+1) each member's full-batch mean loss;
        ``seconds_gd``, ``seconds_flow``: wall-clock training time of each run;
        ``flow_evaluations``: total number of gradient evaluations of the ODE solver.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    common = {"train.dtype": "float64", "train.batch_size": 0, "train.momentum": 0.0, "train.epochs": epochs}
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    traces, losses, seconds = {}, {}, {}
    evaluations = 0
    for optimizer_name in ("gd", "flow"):
        run_cfg = apply_overrides(cfg, {**common, "train.optimizer": optimizer_name})
        model = build_ensemble(run_cfg, dataset)
        optimizer = make_optimizer(run_cfg, model.parameters())
        update = epoch_update(run_cfg, model, optimizer, X, y, torch.Generator().manual_seed(run_cfg.train.seed))
        states, member_loss = [], []
        start = time.perf_counter()
        for epoch in range(epochs + 1):
            if optimizer is not None:  # gd: the update steps on the gradient this logged pass accumulates
                optimizer.zero_grad()
            loss, _ = member_losses(model, X, y, backward=optimizer is not None)
            states.append(torch.cat([model.W_E.detach().flatten(1), model.W_U.detach().flatten(1)], dim=1).clone())
            member_loss.append(loss.detach().numpy().copy())
            if epoch < epochs:
                count = update(epoch, loss)
                evaluations += count if optimizer_name == "flow" else 0
        seconds[optimizer_name] = time.perf_counter() - start
        traces[optimizer_name] = torch.stack(states).numpy()  # (E+1, K, P)
        losses[optimizer_name] = np.stack(member_loss, axis=1)  # (K, E+1)
    gd, flow = traces["gd"], traces["flow"]
    diff = gd - flow
    distance = (np.linalg.norm(diff.reshape(epochs + 1, -1), axis=1)
                / np.linalg.norm(flow.reshape(epochs + 1, -1), axis=1))
    member_distance = (np.linalg.norm(diff, axis=2) / np.linalg.norm(flow, axis=2)).T
    return {
        "lr": float(cfg.train.lr), "epoch": np.arange(epochs + 1), "t": np.arange(epochs + 1) * float(cfg.train.lr),
        "distance": distance, "member_distance": member_distance,
        "loss_gd": losses["gd"], "loss_flow": losses["flow"],
        "seconds_gd": seconds["gd"], "seconds_flow": seconds["flow"], "flow_evaluations": evaluations,
    }

