"""Train a CBOW ensemble on a task and write the run directory (SPEC §4-5; docs/run-directory.md).

Read top to bottom: build the dataset and the model, prepare the run directory (fresh, forced or
resumed), then one loop over epochs that logs loss and accuracy, takes snapshots, checkpoints,
and updates the parameters. Bitwise deterministic on CPU under ``train.seed``; a run interrupted
at any point and resumed finishes with exactly the numbers of an uninterrupted run.

    from ctxstair.config import RunConfig
    from ctxstair.train import train_run
    train_run(RunConfig(), "runs/add")          # what `ctxstair run` calls before analysis
"""

from __future__ import annotations

import csv
import io
import shutil
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from ctxstair import rundir, tasks
from ctxstair.config import RunConfig, dump_yaml, load_yaml
from ctxstair.errors import InputError
from ctxstair.io import atomic_save_npz, atomic_write_text
from ctxstair.models import CBOWEnsemble, MemberSpec
from ctxstair.signatures import signature_hierarchy
from ctxstair.tasks import Dataset
from ctxstair.train.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from ctxstair.train.schedule import snapshot_schedule

#: Called as ``hook(epoch)`` at the start of every epoch; tests use it to interrupt a run.
EpochHook = Callable[[int], None]


def member_specs(cfg: RunConfig) -> list[MemberSpec]:
    """Ensemble members of a config: ``train.members`` seeds from ``train.seed`` (SPEC §4 γ per tensor)."""
    init = cfg.model.init
    return [
        MemberSpec(
            seed=cfg.train.seed + k, d=cfg.model.d,
            gamma_embedding=init.gamma if init.embedding is None else init.embedding,
            gamma_unembedding=init.gamma if init.unembedding is None else init.unembedding,
        )
        for k in range(cfg.train.members)
    ]


def build_model(cfg: RunConfig, dataset: Dataset) -> CBOWEnsemble:
    """The CBOW ensemble of ``cfg`` for ``dataset``'s vocabulary."""
    return CBOWEnsemble(dataset.vocab_size, member_specs(cfg), cfg.model.activation, cfg.model.coeffs,
                        cfg.model.power, dtype=getattr(torch, cfg.train.dtype))


def make_optimizer(cfg: RunConfig, params) -> torch.optim.Optimizer:
    """``gd``/``sgd``: torch SGD (gd = full batch); ``adam``/``adamw``: torch Adam/AdamW.

    Adam's per-coordinate update makes stacked members independent of each other."""
    t = cfg.train
    if t.optimizer in ("gd", "sgd"):
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    optimizer = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
    return optimizer(params, lr=t.lr, weight_decay=t.weight_decay)


def member_losses(model: CBOWEnsemble, X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy loss (K,) and accuracy (K,) of every member on samples (X (n, L), y (n,))."""
    logits = model(X)  # (K, n, V)
    K, n, V = logits.shape
    loss = torch.nn.functional.cross_entropy(logits.reshape(K * n, V), y.repeat(K), reduction="none").view(K, n)
    acc = (logits.argmax(dim=-1) == y).double().mean(dim=1)
    return loss.mean(dim=1), acc


def prepare(cfg: RunConfig, out: Path, resume: bool, force: bool) -> Dataset:
    """Validate everything and set up ``out``; nothing is written if the input is bad."""
    cfg.validate()
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    if resume:
        if not (out / "config.yaml").is_file():
            raise InputError(f"cannot resume {out}: no run there (config.yaml missing)")
        saved = load_yaml((out / "config.yaml").read_text())
        if saved != cfg:
            raise InputError(f"cannot resume {out}: its config.yaml differs from the requested configuration")
        return dataset
    if out.exists():
        if not force:
            raise InputError(f"run directory {out} already exists; use --resume to continue it or --force to replace it")
        shutil.rmtree(out)
    sigs = signature_hierarchy(dataset, 1 if dataset.seq_len > 1 else 0)
    out.mkdir(parents=True)
    atomic_save_npz(out / "signatures.npz", sigs.as_arrays())
    atomic_write_text(out / "config.yaml", dump_yaml(cfg))
    return dataset


def train_run(cfg: RunConfig, out: str | Path, *, resume: bool = False, force: bool = False,
              hook: EpochHook | None = None, progress: bool | None = None) -> Path:
    """Train ``cfg`` into run directory ``out`` (config, members, metrics, snapshots); return its path.

    ``resume`` continues an interrupted run (same config required); a completed run is left as is.
    ``progress``: show a progress bar (default: when stderr is a terminal).
    """
    out = Path(out)
    dataset = prepare(cfg, out, resume, force)
    if resume and not has_checkpoint(out) and _completed(out, cfg.train.epochs):
        return out  # already complete
    model = build_model(cfg, dataset)
    optimizer = make_optimizer(cfg, model.parameters())
    batches = torch.Generator().manual_seed(cfg.train.seed)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    n = X.shape[0]
    batch_size = cfg.train.batch_size or n
    schedule = set(snapshot_schedule(cfg.train.epochs, cfg.snapshots.log_points, cfg.snapshots.every))

    start, rows = 0, []
    if resume and has_checkpoint(out):
        start = load_checkpoint(out, model, optimizer, batches)
        rows = [r for r in _metric_rows(out) if r["epoch"] < start]
    else:
        _write_members(out, model)

    bar = tqdm(range(start, cfg.train.epochs + 1), disable=not (sys.stderr.isatty() if progress is None else progress),
               desc=cfg.recipe, unit="epoch", initial=start, total=cfg.train.epochs + 1)
    for epoch in bar:
        if hook is not None:
            hook(epoch)
        if epoch in schedule:
            rundir.write_metrics(out, rows)
            save_checkpoint(out, epoch, model, optimizer, batches)
            rundir.save_snapshot(out, epoch, {k: v.detach().numpy() for k, v in model.state_dict().items()})
        losses, accs = member_losses(model, X, y)
        rows += [{"member": k, "epoch": epoch, "loss": float(l), "acc": float(a)}
                 for k, (l, a) in enumerate(zip(losses.detach(), accs))]
        bar.set_postfix(loss=f"{float(losses.detach().mean()):.4f}", acc=f"{float(accs.mean()):.3f}")
        if epoch == cfg.train.epochs:
            break
        if batch_size >= n:  # full batch: reuse this epoch's forward pass for the update
            optimizer.zero_grad()
            losses.sum().backward()
            optimizer.step()
        else:
            for idx in torch.randperm(n, generator=batches).split(batch_size):
                optimizer.zero_grad()
                member_losses(model, X[idx], y[idx])[0].sum().backward()
                optimizer.step()
    rundir.write_metrics(out, rows)
    (out / "checkpoint" / "state.json").unlink(missing_ok=True)  # the commit point goes first
    shutil.rmtree(out / "checkpoint", ignore_errors=True)
    return out


def _completed(out: Path, epochs: int) -> bool:
    """Whether ``metrics.jsonl`` reaches the last epoch (an interruption before the first checkpoint
    was committed can leave an empty one behind)."""
    if not (out / "metrics.jsonl").is_file():
        return False
    logged = rundir.read_metrics(out)["epoch"]
    return bool(logged.size) and int(logged.max()) == epochs


def _write_members(out: Path, model: CBOWEnsemble) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["member", "seed", "d", "gamma_embedding", "gamma_unembedding", "init_std_W_E", "init_std_W_U"])
    for k, (m, std) in enumerate(zip(model.members, model.init_stds())):
        writer.writerow([k, m.seed, m.d, m.gamma_embedding, m.gamma_unembedding, f"{std['W_E']:.6g}", f"{std['W_U']:.6g}"])
    atomic_write_text(out / "members.csv", buffer.getvalue())


def _metric_rows(out: Path) -> list[dict]:
    table = rundir.read_metrics(out)
    return [{"member": int(m), "epoch": int(e), "loss": float(l), "acc": float(a)}
            for m, e, l, a in zip(table["member"], table["epoch"], table["loss"], table["acc"])]
