"""Train an ensemble (CBOW or attention-only) on a task and write the run directory (SPEC §4-5; docs/run-directory.md).

Read top to bottom: build the dataset and the model, prepare the run directory (fresh, forced or
resumed), then one loop over epochs that logs loss and accuracy, takes snapshots, checkpoints,
and updates the parameters. The update of one epoch is a small function per optimizer family
(:func:`epoch_update`): one full-batch step, one pass of shuffled minibatches, or — for
``train.optimizer=flow`` — an exact integration of the gradient flow over ``t ∈ [e·lr, (e+1)·lr]``
(:func:`gradient_flow`). Bitwise deterministic on CPU under ``train.seed``; a run interrupted at
any point and resumed finishes with exactly the numbers of an uninterrupted run. Training flushes
denormal floats to zero (:func:`flush_denormals`). ``train.device`` picks the device (``auto``:
CUDA when present); files are always written from CPU copies.

    from ctxstair.config import RunConfig
    from ctxstair.train import train_run
    train_run(RunConfig(), "runs/add")          # what `ctxstair run` calls before analysis
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torchdiffeq import odeint
from tqdm import tqdm

from ctxstair import numerics, rundir, tasks
from ctxstair.checks import check_dense_size
from ctxstair.config import RunConfig, dump_yaml, load_yaml
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.io import atomic_save_npz, atomic_write_text, fresh_output_dir, remove_stale_temporaries
from ctxstair.models import AttentionEnsemble, CBOWEnsemble, MemberSpec
from ctxstair.signatures import label_signature, signature_hierarchy
from ctxstair.tasks import Dataset
from ctxstair.train.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from ctxstair.train.schedule import snapshot_schedule

#: Called as ``hook(epoch)`` at the start of every epoch; tests use it to interrupt a run.
EpochHook = Callable[[int], None]
#: Called as ``update(epoch, losses)`` to train for one epoch; ``losses`` (K,) is the epoch's
#: full-batch forward pass (with its autograd graph), which full-batch steps reuse. Returns the
#: number of gradient evaluations it took (1 for a full-batch step).
EpochUpdate = Callable[[int, torch.Tensor], int]
#: The models the engine trains: stacked members, ``forward(X (n, L)) -> logits (K, n, V)``.
Ensemble = CBOWEnsemble | AttentionEnsemble


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


def build_model(cfg: RunConfig, dataset: Dataset) -> Ensemble:
    """The ensemble of ``cfg.model.kind`` (CBOW or attention-only, SPEC §5) for ``dataset``; a CBOW
    ensemble with ``model.embedding=signature`` gets the dataset's order-1 label signature."""
    m, dtype = cfg.model, getattr(torch, cfg.train.dtype)
    if m.kind == "attention":
        qk, ov = (m.init.gamma if g is None else g for g in (m.init.qk, m.init.ov))
        return AttentionEnsemble(dataset.vocab_size, dataset.seq_len, member_specs(cfg), gamma_qk=qk, gamma_ov=ov,
                                 d_k=m.d_k, positional=m.positional, dtype=dtype)
    # F8b signature embeddings: φ^{y;1} of every token id over the labels and context ids that occur.
    phi1 = (label_signature(dataset.X, dataset.y, 1, dataset.vocab_size, labels=np.unique(dataset.y),
                            context=np.unique(dataset.X)) if m.embedding == "signature" else None)
    return CBOWEnsemble(dataset.vocab_size, member_specs(cfg), m.activation, m.coeffs, m.power, dtype=dtype,
                        embedding=m.embedding, phi1=phi1)


def make_optimizer(cfg: RunConfig, params) -> torch.optim.Optimizer | None:
    """``gd``/``sgd``: torch SGD (gd = full batch); ``adam``/``adamw``: torch Adam/AdamW; ``flow``:
    None (the ODE solver keeps no state between epochs; SPEC §5 "Training").

    Adam's per-coordinate update makes stacked members independent of each other."""
    t = cfg.train
    if t.optimizer == "flow":
        return None
    if t.optimizer in ("gd", "sgd"):
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    optimizer = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
    return optimizer(params, lr=t.lr, weight_decay=t.weight_decay)


def member_losses(model: Ensemble, X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy loss (K,) and accuracy (K,) of every member on samples (X (n, L), y (n,))."""
    logits = model(X)  # (K, n, V)
    acc = (logits.argmax(dim=-1) == y).double().mean(dim=1)
    return _mean_losses(logits, y), acc


def _mean_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (K,) of logits (K, n, V) against labels y (n,)."""
    K, n, V = logits.shape
    loss = torch.nn.functional.cross_entropy(logits.reshape(K * n, V), y.repeat(K), reduction="none").view(K, n)
    return loss.mean(dim=1)


# ------------------------------------------------------------------ one epoch per optimizer family

def full_batch_step(optimizer: torch.optim.Optimizer, losses: torch.Tensor) -> int:
    """One optimizer step on the summed full-batch losses (K,) of this epoch's forward pass; returns 1."""
    optimizer.zero_grad()
    losses.sum().backward()
    optimizer.step()
    return 1


def minibatch_epoch(model: Ensemble, optimizer: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor,
                    batch_size: int, generator: torch.Generator) -> int:
    """One pass over samples X (n, L), y (n,) in minibatches of ``batch_size``, shuffled by
    ``generator``; returns the number of minibatch steps."""
    batches = torch.randperm(X.shape[0], generator=generator).split(batch_size)
    for idx in batches:
        optimizer.zero_grad()
        member_losses(model, X[idx], y[idx])[0].sum().backward()
        optimizer.step()
    return len(batches)


def gradient_flow(model: Ensemble, X: torch.Tensor, y: torch.Tensor, t0: float, t1: float, *,
                  rtol: float = 1e-6, atol: float = 1e-8, method: str = "dopri5", weight_decay: float = 0.0) -> int:
    """Integrate the gradient flow dθ/dt = −∇_θ Σ_k L_k(θ) − weight_decay·θ from t0 to t1 (SPEC §1, §5).

    θ = all parameters of ``model`` (``W_E``, ``W_U``, each (K, V, d)) and L_k the mean
    cross-entropy of member k on samples X (n, L), y (n,); members do not interact through the
    loss, so this is each member's own flow (they share the solver's step sizes, so members agree
    with separate runs to the tolerance, not bitwise). One ``torchdiffeq.odeint`` call with the
    adaptive ``method`` and tolerances ``rtol``/``atol``, in float64 whatever the model's dtype; the
    result θ(t1) is written back into the model (rounded to its dtype). The solve depends only on
    θ(t0), t0 and t1, so it is deterministic and a resumed run repeats it bitwise. Returns the
    number of gradient evaluations (0, and nothing changes, when t1 == t0).
    """
    if t1 == t0:
        return 0
    params = dict(model.named_parameters())
    shapes = [p.shape for p in params.values()]
    sizes = [p.numel() for p in params.values()]
    theta0 = torch.cat([p.detach().reshape(-1) for p in params.values()]).to(torch.float64)
    evaluations = 0

    def rhs(t: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        nonlocal evaluations
        evaluations += 1
        with torch.enable_grad():
            theta = theta.detach().requires_grad_(True)
            tensors = {name: part.view(shape) for name, part, shape in zip(params, theta.split(sizes), shapes)}
            loss = _mean_losses(torch.func.functional_call(model, tensors, (X,)), y).sum()
            (grad,) = torch.autograd.grad(loss, theta)
        return -(grad + weight_decay * theta.detach()) if weight_decay else -grad

    times = torch.tensor([t0, t1], dtype=torch.float64, device=theta0.device)
    theta1 = odeint(rhs, theta0, times, rtol=rtol, atol=atol, method=method)[-1]
    with torch.no_grad():
        for p, part, shape in zip(params.values(), theta1.split(sizes), shapes):
            p.copy_(part.view(shape))
    return evaluations


def reuses_forward(cfg: RunConfig, n: int) -> bool:
    """Whether the epoch's update is one full-batch optimizer step on the logged forward pass over
    ``n`` samples (``batch_size`` 0 or ≥ n, any optimizer but ``flow``)."""
    return cfg.train.optimizer != "flow" and (cfg.train.batch_size or n) >= n


def epoch_update(cfg: RunConfig, model: Ensemble, optimizer: torch.optim.Optimizer | None,
                 X: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> EpochUpdate:
    """The update of one epoch for ``cfg.train`` (SPEC §5 "Training"), as ``update(epoch, losses)``.

    ``flow``: integrate the gradient flow from t = epoch·lr to (epoch+1)·lr (:func:`gradient_flow`);
    full batch (``batch_size`` 0 or ≥ n): one step reusing ``losses`` (K,); otherwise one shuffled
    minibatch pass (:func:`minibatch_epoch`). X (n, L), y (n,) are the training samples. The
    update returns the number of gradient evaluations it took.
    """
    t, n = cfg.train, X.shape[0]
    if t.optimizer == "flow":
        def flow(epoch: int, losses: torch.Tensor) -> int:
            return gradient_flow(model, X, y, epoch * t.lr, (epoch + 1) * t.lr, rtol=t.flow_rtol,
                                 atol=t.flow_atol, method=t.flow_method, weight_decay=t.weight_decay)
        return flow
    if reuses_forward(cfg, n):  # full batch: reuse this epoch's forward pass for the update
        return lambda epoch, losses: full_batch_step(optimizer, losses)
    return lambda epoch, losses: minibatch_epoch(model, optimizer, X, y, t.batch_size, generator)


def prepare(cfg: RunConfig, out: Path, resume: bool, force: bool) -> Dataset:
    """Validate everything and set up ``out``; nothing is written if the input is bad.

    A new run directory appears whole (signatures and config.yaml, assembled under a temporary
    name), so a directory of ours always has its config.yaml. ``resume`` of a directory that does
    not exist starts the run: a job script can always pass ``--resume`` (issue 9 item 1)."""
    cfg.validate()
    resolve_device(cfg.train.device)  # refuses CUDA where there is none, before anything is written
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    check_memory(cfg, dataset)
    if resume and out.exists():
        if not (out / "config.yaml").is_file():
            raise InputError(f"cannot resume {out}: no run there (config.yaml missing)")
        saved = load_yaml((out / "config.yaml").read_text())
        if saved != cfg:
            raise InputError(f"cannot resume {out}: its config.yaml differs from the requested configuration")
        remove_stale_temporaries(out)
        return dataset
    if out.exists() and not force:
        raise InputError(f"run directory {out} already exists; use --resume to continue it or --force to replace it")
    sigs = signature_hierarchy(dataset, 1 if dataset.seq_len > 1 else 0)
    with fresh_output_dir(out, force=force) as staging:
        atomic_save_npz(staging / "signatures.npz", sigs.as_arrays())
        atomic_write_text(staging / "config.yaml", dump_yaml(cfg))
    return dataset


def check_memory(cfg: RunConfig, dataset: Dataset) -> None:
    """Refuse, before anything is allocated or written, a model whose stacked weights (K, V, d) or
    one forward pass's logits (K, batch, V) exceed the memory budget of one dense array
    (:func:`ctxstair.checks.default_max_bytes`, ``CTXSTAIR_MAX_GIB``)."""
    K, V, itemsize = cfg.train.members, dataset.vocab_size, torch.finfo(getattr(torch, cfg.train.dtype)).bits // 8
    batch = min(cfg.train.batch_size or dataset.n_samples, dataset.n_samples)
    check_dense_size((K, V, cfg.model.d), None, "the stacked embedding W_E (train.members, vocab, model.d)",
                     "lower model.d or train.members", itemsize)
    check_dense_size((K, batch, V), None, "the logits of one forward pass (train.members, batch, vocab)",
                     "lower train.members or train.batch_size", itemsize)


@contextlib.contextmanager
def flush_denormals():
    """Flush denormal floats (|x| < 1.2e-38 in float32) to zero inside the block, then restore
    torch's default. On a plateau gradients vanish and their squares (Adam's second moment) become
    denormal, and CPU arithmetic on denormals is about 100 times slower: a 200-epoch run of a
    6-token task took 22 s instead of 2.7 s. Flushing changes only values below 1.2e-38."""
    changed = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if changed:
            torch.set_flush_denormal(False)


def train_run(cfg: RunConfig, out: str | Path, *, resume: bool = False, force: bool = False,
              hook: EpochHook | None = None, progress: bool | None = None) -> Path:
    """Train ``cfg`` into run directory ``out`` (config, members, metrics, snapshots unless
    ``snapshots.save`` is false); return its path.

    ``resume`` continues an interrupted run (same config required); a completed run is left as is.
    ``resources.json`` records the peak memory and the seconds of this call.
    ``progress``: show a progress bar (default: when stderr is a terminal). Denormal floats are
    flushed to zero while training (:func:`flush_denormals`).
    """
    with flush_denormals():
        return _train_run(cfg, Path(out), resume, force, hook, progress)


def _train_run(cfg: RunConfig, out: Path, resume: bool, force: bool, hook: EpochHook | None,
               progress: bool | None) -> Path:
    started = time.perf_counter()
    numerics.apply_to_torch()
    dataset = prepare(cfg, out, resume, force)
    if resume and not has_checkpoint(out) and _completed(out, cfg.train.epochs):
        return out  # already complete
    device = resolve_device(cfg.train.device)
    model = build_model(cfg, dataset).to(device)
    optimizer = make_optimizer(cfg, model.parameters())
    batches = torch.Generator().manual_seed(cfg.train.seed)  # on the CPU whatever the device: same data order
    X, y = torch.from_numpy(dataset.X).to(device), torch.from_numpy(dataset.y).to(device)
    update = epoch_update(cfg, model, optimizer, X, y, batches)
    reuse_forward = reuses_forward(cfg, X.shape[0])  # otherwise the logged forward pass needs no graph
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
            if cfg.snapshots.save:
                rundir.save_snapshot(out, epoch, {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})
        with torch.set_grad_enabled(reuse_forward):
            losses, accs = member_losses(model, X, y)
        rows += [{"member": k, "epoch": epoch, "loss": float(l), "acc": float(a)}
                 for k, (l, a) in enumerate(zip(losses.detach(), accs))]
        if not bool(torch.isfinite(losses.detach()).all()):
            _stop_diverged(cfg, out, model, epoch, rows)
        bar.set_postfix(loss=f"{float(losses.detach().mean()):.4f}", acc=f"{float(accs.mean()):.3f}")
        if epoch == cfg.train.epochs:
            break
        update(epoch, losses)
    rundir.write_metrics(out, rows)
    (out / "checkpoint" / "state.json").unlink(missing_ok=True)  # the commit point goes first
    shutil.rmtree(out / "checkpoint", ignore_errors=True)
    rundir.write_resources(out, time.perf_counter() - started)
    return out


def _stop_diverged(cfg: RunConfig, out: Path, model: Ensemble, epoch: int, rows: list[dict]) -> None:
    """Keep what was written, add ``failure.json`` and raise TrainingDiverged naming the epoch, the
    members, the non-finite tensors and the likely cause (issue 9 item 4)."""
    rundir.write_metrics(out, rows)
    losses = {(r["member"], r["epoch"]): r["loss"] for r in rows}
    members = sorted(k for (k, e), loss in losses.items() if e == epoch and not np.isfinite(loss))
    tensors = {name: [k for k in range(p.shape[0]) if not bool(torch.isfinite(p[k]).all())]
               for name, p in model.named_parameters()}
    tensors = {name: ks for name, ks in tensors.items() if ks}
    first, last = losses[members[0], 0], losses.get((members[0], epoch - 1), float("nan"))
    t, init = cfg.train, cfg.model.init
    where = (f"non-finite values in {', '.join(f'{name} (members {ks})' for name, ks in tensors.items())}"
             if tensors else "every parameter is still finite (the loss itself overflowed)")
    cause = (f"the loss rose from {first:.4g} at epoch 0 to {last:.4g} at epoch {epoch - 1}, so the learning rate "
             f"train.lr={t.lr:g} ({t.optimizer}) is likely too large for this γ = {init.gamma:g} and d = {cfg.model.d}: "
             "try a smaller train.lr" if epoch > 0 and last > first else
             f"the loss was {last:.4g} at epoch {max(epoch - 1, 0)} and had not been rising: a float overflow is likely "
             f"(train.dtype={t.dtype}; try float64 or a smaller train.lr)")
    message = (f"training diverged at epoch {epoch}: the loss of member(s) {members} is not finite; "
               f"{where}; {cause}. Written so far is kept in {out}")
    rundir.write_json(out, "failure.json", {"reason": "diverged", "epoch": epoch, "members": members,
                                            "tensors": tensors, "message": message})
    (out / "checkpoint" / "state.json").unlink(missing_ok=True)  # nothing to resume: it would diverge again
    shutil.rmtree(out / "checkpoint", ignore_errors=True)
    raise TrainingDiverged(message, out)


def _completed(out: Path, epochs: int) -> bool:
    """Whether ``metrics.jsonl`` reaches the last epoch (an interruption before the first checkpoint
    was committed can leave an empty one behind)."""
    if not (out / "metrics.jsonl").is_file():
        return False
    logged = rundir.read_metrics(out)["epoch"]
    return bool(logged.size) and int(logged.max()) == epochs


def _write_members(out: Path, model: Ensemble) -> None:
    buffer = io.StringIO()
    rows = model.member_rows()
    writer = csv.DictWriter(buffer, ["member", *rows[0]], lineterminator="\n")
    writer.writeheader()
    writer.writerows({"member": k, **{key: f"{v:.6g}" if key.startswith("init_std") else v for key, v in row.items()}}
                     for k, row in enumerate(rows))
    atomic_write_text(out / "members.csv", buffer.getvalue())


def _metric_rows(out: Path) -> list[dict]:
    table = rundir.read_metrics(out)
    return [{"member": int(m), "epoch": int(e), "loss": float(l), "acc": float(a)}
            for m, e, l, a in zip(table["member"], table["epoch"], table["loss"], table["acc"])]
