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
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torchdiffeq import odeint

from ctxstair import numerics
from ctxstair.checks import check_dense_size
from ctxstair.config import RunConfig
from ctxstair.devices import resolve_device
from ctxstair.io import atomic_save_npz, atomic_write_text
from ctxstair.models import Ensemble, build_ensemble
from ctxstair.progress import Progress
from ctxstair.run import Run
from ctxstair.signatures import signature_hierarchy
from ctxstair.tasks import Dataset
from ctxstair.train.plan import ExecutionPlan, choose_plan, pass_plan
from ctxstair.train.schedule import snapshot_schedule

#: Called as ``hook(epoch)`` at the start of every epoch; tests use it to interrupt a run.
EpochHook = Callable[[int], None]
#: Called as ``update(epoch, losses)`` to train for one epoch; ``losses`` (K,) are the epoch's logged
#: full-batch losses, whose gradient a full-batch update finds already accumulated (the logged pass
#: ran with ``member_losses(..., backward=True)``). Returns the number of gradient evaluations it took
#: (1 for a full-batch step).
EpochUpdate = Callable[[int, torch.Tensor], int]


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


def member_losses(model: Ensemble, X: torch.Tensor, y: torch.Tensor, backward: bool = False,
                  plan: ExecutionPlan | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy loss (K,) and accuracy (K,) of every member on samples (X (n, L), y (n,)),
    both detached. With ``backward``, the gradient of the summed losses is accumulated into the
    parameters' ``.grad``, group by group as the execution ``plan`` says (default: the rule,
    :func:`ctxstair.train.plan.pass_plan`): each group's backward pass runs before the next group's
    forward, so only one group's activations are alive at a time. The plan is applied to the model
    (:meth:`~ctxstair.train.plan.ExecutionPlan.apply`) by whoever passes it."""
    K, n = model.W_E.shape[0], X.shape[0]
    group = (plan.for_samples(n) if plan is not None else pass_plan(model, n)).members_per_group
    losses, accs = [], []
    for first in range(0, K, group):
        logits = model(X, slice(first, first + group))  # (group, n, V)
        loss = _mean_losses(logits, y)
        if backward:
            loss.sum().backward()
        losses.append(loss.detach())
        accs.append(accuracies(logits.detach(), y))
    return (losses[0], accs[0]) if len(losses) == 1 else (torch.cat(losses), torch.cat(accs))


def accuracies(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accuracy (K,) float64 of logits (K, n, V) against labels y (n,): the share of samples whose
    prediction, the first index of the largest logit (NaN counting as largest), is the label.
    ``max``'s indices follow ``argmax``'s rule and take half its time on the CPU (2.3 against 4.3 ms
    at K = 32, n = 1,600, V = 81): the engine computes this every epoch."""
    return (logits.max(dim=-1).indices == y).double().mean(dim=1)


def _mean_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (K,) of logits (K, n, V) against labels y (n,)."""
    K, n, V = logits.shape
    loss = torch.nn.functional.cross_entropy(logits.reshape(K * n, V), y.repeat(K), reduction="none").view(K, n)
    return loss.mean(dim=1)


# ------------------------------------------------------------------ one epoch per optimizer family

def full_batch_step(optimizer: torch.optim.Optimizer) -> int:
    """One optimizer step on the full-batch gradient that this epoch's logged pass accumulated; returns 1."""
    optimizer.step()
    return 1


def minibatch_epoch(model: Ensemble, optimizer: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor,
                    batch_size: int, generator: torch.Generator, plan: ExecutionPlan | None = None) -> int:
    """One pass over samples X (n, L), y (n,) in minibatches of ``batch_size``, shuffled by
    ``generator``, each pass run as the execution ``plan`` says (:func:`member_losses`); returns the
    number of minibatch steps."""
    batches = torch.randperm(X.shape[0], generator=generator).split(batch_size)
    for idx in batches:
        optimizer.zero_grad()
        member_losses(model, X[idx], y[idx], backward=True, plan=plan)
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
                 X: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
                 plan: ExecutionPlan | None = None) -> EpochUpdate:
    """The update of one epoch for ``cfg.train`` (SPEC §5 "Training"), as ``update(epoch, losses)``.

    ``flow``: integrate the gradient flow from t = epoch·lr to (epoch+1)·lr (:func:`gradient_flow`);
    full batch (``batch_size`` 0 or ≥ n): one step on the gradient of the logged pass; otherwise one shuffled
    minibatch pass (:func:`minibatch_epoch`, its passes run as the execution ``plan`` says). X (n, L),
    y (n,) are the training samples. The update returns the number of gradient evaluations it took.
    The flow's gradient is always taken over all members at once (the ODE solver needs all of θ).
    """
    t, n = cfg.train, X.shape[0]
    if t.optimizer == "flow":
        def flow(epoch: int, losses: torch.Tensor) -> int:
            return gradient_flow(model, X, y, epoch * t.lr, (epoch + 1) * t.lr, rtol=t.flow_rtol,
                                 atol=t.flow_atol, method=t.flow_method, weight_decay=t.weight_decay)
        return flow
    if reuses_forward(cfg, n):  # full batch: reuse this epoch's forward pass for the update
        return lambda epoch, losses: full_batch_step(optimizer)
    return lambda epoch, losses: minibatch_epoch(model, optimizer, X, y, t.batch_size, generator, plan)


def prepare(run: Run, resume: bool, force: bool) -> tuple[Dataset, bool]:
    """Validate everything and set up the run directory; nothing is written if the input is bad.
    Returns the dataset and whether an existing run is continued.

    A new run directory appears whole, with the task's signatures and ``config.yaml``
    (:meth:`ctxstair.run.Run.open`)."""
    cfg = run.config.validate()
    resolve_device(cfg.train.device)  # refuses CUDA where there is none, before anything is written
    dataset = run.dataset
    check_memory(cfg, dataset)

    def write_signatures(staging: Path) -> None:
        sigs = signature_hierarchy(dataset, 1 if dataset.seq_len > 1 else 0)
        atomic_save_npz(staging / "signatures.npz", sigs.as_arrays())

    return dataset, run.open(resume, force, write_signatures)


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
    ``resources.json`` records the peak memory, the seconds of this call and the execution plan
    (:func:`execution_plan`; a resumed run keeps the plan it started with).
    ``progress``: report the epochs on stderr (:class:`ctxstair.progress.Progress`; default: inside
    :func:`ctxstair.progress.shown`, as the command line does). Denormal floats are flushed to zero
    while training (:func:`flush_denormals`).
    """
    with flush_denormals():
        return _train_run(cfg, Path(out), resume, force, hook, progress)


def _train_run(cfg: RunConfig, out: Path, resume: bool, force: bool, hook: EpochHook | None,
               progress: bool | None) -> Path:
    started = time.perf_counter()
    numerics.apply_to_torch()
    run = Run(out, cfg)
    dataset, resumed = prepare(run, resume, force)
    if resumed and not run.has_checkpoint() and _completed(run, cfg.train.epochs):
        run.finish_if_interrupted(time.perf_counter() - started, run.recorded_plan())
        return out  # complete
    device = resolve_device(cfg.train.device)
    model = build_ensemble(cfg, dataset).to(device)
    optimizer = make_optimizer(cfg, model.parameters())
    batches = torch.Generator().manual_seed(cfg.train.seed)  # on the CPU whatever the device: same data order
    X, y = torch.from_numpy(dataset.X).to(device), torch.from_numpy(dataset.y).to(device)
    plan = execution_plan(run, resumed, model, X.shape[0])
    update = epoch_update(cfg, model, optimizer, X, y, batches, plan)
    reuse_forward = reuses_forward(cfg, X.shape[0])  # otherwise the logged forward pass needs no graph
    schedule = set(snapshot_schedule(cfg.train.epochs, cfg.snapshots.log_points, cfg.snapshots.every))

    start, rows = 0, []
    if resumed and run.has_checkpoint():
        start = run.load_checkpoint(model, optimizer, batches)
        rows = [r for r in run.metric_rows() if r["epoch"] < start]
    else:
        _write_members(run.path, model)

    with Progress(cfg.train.epochs, f"{cfg.recipe}: training {out.name}", "epoch", initial=start,
                  show=progress) as bar:
        for epoch in range(start, cfg.train.epochs + 1):
            if hook is not None:
                hook(epoch)
            if epoch in schedule:
                run.write_metrics(rows)
                run.save_checkpoint(epoch, model, optimizer, batches)
                if cfg.snapshots.save:
                    run.save_snapshot(epoch, model)
            if reuse_forward:
                optimizer.zero_grad()
            with torch.set_grad_enabled(reuse_forward):
                losses, accs = member_losses(model, X, y, backward=reuse_forward, plan=plan)
            rows += [{"member": k, "epoch": epoch, "loss": float(loss), "acc": float(acc)}
                     for k, (loss, acc) in enumerate(zip(losses, accs))]
            if not bool(torch.isfinite(losses).all()):
                raise _divergence(run, model, epoch, rows)
            bar.set_postfix(loss=f"{float(losses.mean()):.4f}", acc=f"{float(accs.mean()):.3f}")
            if epoch == cfg.train.epochs:
                break
            update(epoch, losses)
            bar.update(1)
    run.write_metrics(rows)
    run.finish(time.perf_counter() - started, plan.as_dict())
    return out


def execution_plan(run: Run, resumed: bool, model: Ensemble, n: int) -> ExecutionPlan:
    """The execution plan of the run (:mod:`ctxstair.train.plan`), applied to ``model`` (trained on
    ``n`` samples): on a resume the one ``resources.json`` recorded when the run started, otherwise
    the rule's (:func:`ctxstair.train.plan.choose_plan`), recorded now."""
    recorded = run.recorded_plan() if resumed else None
    plan = ExecutionPlan.from_dict(recorded) if recorded is not None else choose_plan(run.config, model, n)
    if recorded is None:
        run.record_plan(plan.as_dict())
    plan.apply(model)
    return plan


def _divergence(run: Run, model: Ensemble, epoch: int, rows: list[dict]) -> Exception:
    """The TrainingDiverged of a non-finite loss at ``epoch``, recorded in the run directory
    (:meth:`ctxstair.run.Run.diverged`): it names the epoch, the members, the non-finite tensors and
    the likely cause."""
    cfg = run.config
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
             f"train.lr={t.lr:g} ({t.optimizer}) is likely too large for this γ = {init.gamma:g} and "
             f"d = {cfg.model.d}: try a smaller train.lr" if epoch > 0 and last > first else
             f"the loss was {last:.4g} at epoch {max(epoch - 1, 0)} and had not been rising: a float overflow is "
             f"likely (train.dtype={t.dtype}; try float64 or a smaller train.lr)")
    message = (f"training diverged at epoch {epoch}: the loss of member(s) {members} is not finite; "
               f"{where}; {cause}. Written so far is kept in {run.path}")
    return run.diverged(message, {"epoch": epoch, "members": members, "tensors": tensors}, rows)


def _completed(run: Run, epochs: int) -> bool:
    """Whether ``metrics.jsonl`` reaches the last epoch (an interruption before the first checkpoint
    was committed can leave an empty one behind)."""
    return any(r["epoch"] == epochs for r in run.metric_rows())


def _write_members(out: Path, model: Ensemble) -> None:
    buffer = io.StringIO()
    rows = model.member_rows()
    writer = csv.DictWriter(buffer, ["member", *rows[0]], lineterminator="\n")
    writer.writeheader()
    writer.writerows({"member": k, **{key: f"{v:.6g}" if key.startswith("init_std") else v for key, v in row.items()}}
                     for k, row in enumerate(rows))
    atomic_write_text(out / "members.csv", buffer.getvalue())
