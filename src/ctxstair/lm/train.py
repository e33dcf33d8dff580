"""Train a small decoder language model from γ-initialization on a corpus (SPEC §5, §7).

    ctxstair lm train --out runs/lm --set corpus.source=synthetic --set train.steps=2000

Read top to bottom: the corpus is tokenised (a byte-level BPE trained on it, or GPT-2's vocabulary)
and cut into windows of ``corpus.window`` tokens, 5 % of them held out; the model is a
``transformers`` causal LM of ``model.family`` (``llama`` by default: pre-norm RMSNorm, SwiGLU,
RoPE, untied embeddings; :mod:`ctxstair.models.causal_lm`) with γ-init by role; AdamW with linear
warm-up and cosine decay to ``train.final_lr_fraction`` of the peak; every step draws a batch of
windows from a seeded generator. At log-spaced steps the whole model is saved (``snapshots/step_XXXXXXXX.safetensors``)
with the held-out loss, and a checkpoint (model, optimizer, generator, step) that ``resume``
continues from with the same numbers as an uninterrupted run.

The run directory is a :class:`~ctxstair.run.Run` like every other: the same creation and resume,
checkpoint format, snapshot naming (``snapshots/step_<t:08d>.safetensors``), metrics file and
divergence record as the ensemble engine.

Devices and data parallelism: the model, batches and held-out loss live on
``train.device`` (``auto``: CUDA when present); files are written from CPU copies and the batch
generator stays on the CPU, so the data order does not depend on the device. Started by
``torchrun --nproc_per_node=N`` the run is data-parallel (DDP): every rank draws the same global
batch and trains on its slice, and only rank 0 writes to the run directory.

Run directory: ``config.yaml`` (an :class:`LMConfig`), ``tokenizer.json``, ``members.csv`` (realised
initial std of every part of every matrix, by γ role), ``metrics.jsonl`` (``step, loss, lr`` and
``val_loss`` at snapshots), ``snapshots/``, the final model as a Hugging Face folder ``hf_model/``
(:mod:`ctxstair.lm.export`); the analysis (:mod:`ctxstair.analysis.lm_staircase`) adds
``lm_analysis.csv`` and ``lm_tokens.json``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ctxstair import numerics
from ctxstair.checks import check_dense_size
from ctxstair.collectives import end_process_group, let_go
from ctxstair.config.lm import LMConfig, LMTrainConfig
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.io import atomic_write_text
from ctxstair.lm import fsdp
from ctxstair.lm.export import export_run
from ctxstair.models import causal_lm
from ctxstair.models.loss import next_token_loss
from ctxstair.progress import Progress
from ctxstair.run import Run
from ctxstair.text.tokenizer import TextTokenizer
from ctxstair.text.windows import corpus_windows, sample_indices, split_indices
from ctxstair.train.engine import flush_denormals
from ctxstair.train.schedule import snapshot_schedule

# ------------------------------------------------------------------------------------ schedule

def lr_factor(step: int, cfg: LMTrainConfig) -> float:
    """Multiplier of the peak lr at ``step``: linear warm-up, then cosine to ``final_lr_fraction``."""
    warm = max(1, round(cfg.warmup * cfg.steps))
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, cfg.steps - warm)
    return cfg.final_lr_fraction + (1 - cfg.final_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


# ------------------------------------------------------------------------------------ training

def check_memory(cfg: LMConfig, vocab_size: int) -> None:
    """Refuse, before anything is allocated or written, a model whose largest weight matrices or
    one batch's logits (float32) exceed the memory budget of one dense array
    (:func:`ctxstair.checks.default_max_bytes`, ``CTXSTAIR_MAX_GIB``)."""
    config = cfg.model_config(vocab_size)
    d = config.hidden_size
    d_mlp = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d
    for shape, what in [((vocab_size, d), "the embedding W_E (vocab, model.d_model)"),
                        ((d_mlp, d), "an MLP matrix (model.d_mlp, model.d_model)"),
                        ((cfg.train.batch_size, cfg.corpus.window, vocab_size),
                         "the logits of one batch (batch, window, vocab)")]:
        check_dense_size(shape, None, what, "lower the model or batch sizes", itemsize=4)


def build_model(cfg: LMConfig, vocab_size: int) -> torch.nn.Module:
    """The γ-initialised float32 ``transformers`` model of ``cfg`` (:mod:`ctxstair.models.causal_lm`)."""
    return causal_lm.build(cfg.model_config(vocab_size), causal_lm.gammas_of(cfg.model.init), cfg.train.seed)


def logits_of(forward: Callable, batch: torch.Tensor) -> torch.Tensor:
    """The logits (n, T, V) of windows (n, T) through ``forward`` (the model, or its DDP or compiled
    wrapper)."""
    return forward(input_ids=batch).logits


@dataclass(frozen=True)
class Ranks:
    """Where this process trains: its ``device`` and its place (``rank`` of ``world``) in a
    data-parallel run; ``world`` is 1 outside torchrun."""

    device: torch.device
    rank: int = 0
    world: int = 1


def torchrun_world() -> int:
    """Number of processes of the torchrun job this process belongs to (1 when not under torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextmanager
def data_parallel(cfg: LMTrainConfig) -> Iterator[Ranks]:
    """This process's :class:`Ranks`. Under torchrun (WORLD_SIZE > 1) join the process group (gloo
    on CPU, NCCL on CUDA) unless the caller already has, and leave the one it opened at the end."""
    if torchrun_world() == 1 and not (dist.is_available() and dist.is_initialized()):
        yield Ranks(resolve_device(cfg.device))
        return
    device = resolve_device(cfg.device, int(os.environ.get("LOCAL_RANK", "0")))
    opened = not dist.is_initialized()
    if opened:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        ranks = Ranks(device, dist.get_rank(), dist.get_world_size())
        if cfg.batch_size % ranks.world:
            # DDP averages the ranks' gradients of their slice-mean losses, which is the gradient of the
            # global mean loss only when every slice has the same size.
            raise InputError(f"train.batch_size={cfg.batch_size} is not divisible by the {ranks.world} "
                             "data-parallel processes")
        yield ranks
    finally:
        if opened:
            end_process_group()


def train_lm(cfg: LMConfig, out: str | Path, *, resume: bool = False, force: bool = False,
             hook: Callable[[int], None] | None = None, progress: bool | None = None) -> Path:
    """Train ``cfg`` into run directory ``out`` (see the module docstring); return its path.

    ``resume`` continues an interrupted run (same config required; a completed run is left as is).
    ``hook(step)`` is called before every step (tests use it to interrupt a run). ``progress``:
    report the steps on stderr (:class:`ctxstair.progress.Progress`; default: inside
    :func:`ctxstair.progress.shown`, as the command line does; rank 0 only). Under torchrun every
    process calls this; only rank 0 writes files."""
    out = Path(out)
    cfg = cfg.validate()
    with data_parallel(cfg.train) as ranks:
        return _train(cfg, out, ranks, resume, force, hook, progress)


def _train(cfg: LMConfig, out: Path, ranks: Ranks, resume: bool, force: bool,
           hook: Callable[[int], None] | None, progress: bool | None) -> Path:
    lead, started, run = ranks.rank == 0, time.perf_counter(), Run(out, cfg)
    if (cfg.train.batch_size // ranks.world) % cfg.train.micro_batches:
        raise InputError(f"train.micro_batches={cfg.train.micro_batches} does not divide the "
                         f"{cfg.train.batch_size // ranks.world} windows each of {ranks.world} process(es) trains on")
    numerics.apply_to_torch()
    if cfg.train.tf32:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    tokenizer, windows, resumed = _prepare_ranks(run, ranks, resume, force)
    if resumed and not run.has_checkpoint() and any(r["step"] == cfg.train.steps and "val_loss" in r
                                                    for r in run.metric_rows()):
        if lead:  # trained; a run killed while it exported or finished gets its folders and record now
            export_run(run, cfg.snapshots.export, missing_only=True)
            run.finish_if_interrupted(time.perf_counter() - started)
        return out  # complete
    train, val = split_indices(len(windows), cfg.train.seed, cfg.train.val_windows)
    model = build_model(cfg, tokenizer.vocab_size).to(ranks.device)
    stds = causal_lm.init_stds(model, causal_lm.gammas_of(cfg.model.init))  # of the whole matrices, before sharding
    net = _parallel(model, cfg.train, ranks)
    sharded = net is model and ranks.world > 1  # FSDP2: every rank joins every forward pass and gather
    fused = {"fused": True} if cfg.train.fused_adamw else {}  # absent, not False: the default kernel choice
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.train.weight_decay, **fused)
    forward = torch.compile(net) if cfg.train.compile else net
    batches = torch.Generator().manual_seed(cfg.train.seed)  # on the CPU whatever the device: same data order
    schedule = set(snapshot_schedule(cfg.train.steps, cfg.snapshots.log_points, cfg.snapshots.every))
    val_t = torch.from_numpy(windows[val]).to(ranks.device)
    per_rank = cfg.train.batch_size // ranks.world
    mine = slice(ranks.rank * per_rank, (ranks.rank + 1) * per_rank)

    start, rows = 0, []
    resumed = resumed and run.has_checkpoint()
    if resumed:
        if sharded:
            start, tensors = run.read_checkpoint()
            fsdp.restore(model, optimizer, batches, tensors)
        else:
            start = run.load_checkpoint(model, optimizer, batches)
        # The checkpoint of step s is written before step s trains: keep rows of earlier steps and the
        # val loss of step s itself, which the loop does not recompute.
        rows = [r for r in run.metric_rows() if r["step"] < start or (r["step"] == start and "val_loss" in r)]
    elif lead:  # a new run, or one killed before its first checkpoint
        atomic_write_text(run.path / "members.csv", "tensor,role,init_std,target_std\n" + "".join(
            f"{name},{role},{std:.6g},{target:.6g}\n" for name, role, std, target in stds))
    if ranks.world > 1:
        dist.barrier()  # every rank has read the checkpoint before rank 0 writes the next one
    with flush_denormals(), Progress(cfg.train.steps, f"lm train {out.name}", "step", initial=start,
                                     show=progress if lead else False) as bar:
        for step in range(start, cfg.train.steps + 1):
            if hook is not None:
                hook(step)
            if step in schedule and not (resumed and step == start):  # a resumed checkpoint step is saved
                _save(run, step, model, optimizer, batches, val_t, rows, lead, sharded, cfg.train)
            if step == cfg.train.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = cfg.train.lr * lr_factor(step, cfg.train)
            # Every rank draws the whole global batch, so the generator and the data order are those of
            # a single-process run; each trains on its own slice.
            mine_ids = train[torch.randint(len(train), (cfg.train.batch_size,), generator=batches)[mine].numpy()]
            loss = _step(forward, net, windows, mine_ids, optimizer, cfg.train, ranks.device)
            rows.append({"step": step, "loss": _global_mean(loss, ranks), "lr": optimizer.param_groups[0]["lr"]})
            if not math.isfinite(rows[-1]["loss"]):  # every rank sees the same global mean and stops
                raise _divergence(run, model, step, rows, lead, sharded)
            bar.set_postfix(loss=f"{rows[-1]['loss']:.4f}")
            bar.update(1)
    if lead:
        run.write_metrics(rows)
        export_run(run, cfg.snapshots.export)
        run.finish(time.perf_counter() - started)
    if ranks.world > 1:
        dist.barrier()  # the run directory is complete when any rank returns
    return out


def _parallel(model: torch.nn.Module, cfg: LMTrainConfig, ranks: Ranks) -> torch.nn.Module:
    """What trains: ``model`` itself in one process, DDP around it, or ``model`` sharded in place by FSDP2."""
    if ranks.world == 1:
        return model
    if cfg.sharding == "fsdp2":
        return fsdp.shard(model, ranks.device)
    return torch.nn.parallel.DistributedDataParallel(model)


def _autocast(cfg: LMTrainConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast of ``train.precision`` (the forward pass and the loss), or nothing."""
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _step(forward: Callable, net: torch.nn.Module, windows, ids: np.ndarray, optimizer: torch.optim.Optimizer,
          cfg: LMTrainConfig, device: torch.device) -> torch.Tensor:
    """One optimizer step on this rank's windows ``ids`` (b,), in ``train.micro_batches`` parts whose
    gradients accumulate (equal parts: the mean of their mean losses is the slice's mean loss, and
    only the last part's backward reduces gradients across the ranks); returns the slice's mean loss."""
    optimizer.zero_grad()
    parts = np.split(ids, cfg.micro_batches)
    total = None
    for i, part in enumerate(parts):
        batch = torch.from_numpy(windows[part]).to(device)
        with fsdp.gradient_sync(net, i == len(parts) - 1), _autocast(cfg, device):
            loss = next_token_loss(logits_of(forward, batch), batch)
        (loss / len(parts) if len(parts) > 1 else loss).backward()  # DDP averages the gradients over the ranks here
        total = loss.detach() if total is None else total + loss.detach()
    optimizer.step()
    return total / len(parts) if len(parts) > 1 else total


def _save(run: Run, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: torch.Generator,
          val_t: torch.Tensor, rows: list[dict], lead: bool, sharded: bool, cfg: LMTrainConfig) -> None:
    """Snapshot, val loss and checkpoint of ``step``, written by rank 0; a sharded model's tensors are
    first gathered whole on every rank and every rank runs the val loss's forward passes."""
    if not (lead or sharded):
        return
    state = fsdp.full_state(model) if sharded else causal_lm.state_of(model)
    tensors = fsdp.checkpoint_tensors(model, optimizer, batches) if sharded else None
    with _autocast(cfg, val_t.device):
        val_loss = _mean_loss(model, val_t)
    if lead:
        run.save_snapshot(step, state)
        rows.append({"step": step, "val_loss": val_loss})
        run.write_metrics(rows)
        if sharded:
            run.write_checkpoint(step, tensors)
        else:
            run.save_checkpoint(step, model, optimizer, batches)


def _divergence(run: Run, model: torch.nn.Module, step: int, rows: list[dict], lead: bool, sharded: bool) -> Exception:
    """The TrainingDiverged of a non-finite loss at ``step``, recorded by rank 0
    (:meth:`ctxstair.run.Run.diverged`): it names the step, the non-finite tensors and the likely
    cause."""
    lr = run.config.train.lr
    weights = fsdp.full_state(model) if sharded else dict(model.named_parameters())  # gathered on every rank
    tensors = [name for name, p in weights.items() if not bool(torch.isfinite(p).all())]
    losses = [r["loss"] for r in rows if "loss" in r]
    where = f"non-finite values in {', '.join(tensors)}" if tensors else "every parameter is still finite"
    cause = (f"the loss went from {losses[0]:.4g} (step 0) to {losses[-2]:.4g} (step {step - 1}); the likely cause is "
             f"a learning rate train.lr={lr:g} too large for this initialization (or a float32 overflow): "
             "try a smaller train.lr" if len(losses) > 1 else
             "the loss of the very first step is not finite: check the initialization (model.init) and "
             f"train.lr={lr:g}")
    message = (f"training diverged at step {step}: the loss is not finite; {where}; {cause}. "
               f"Written so far is kept in {run.path}")
    if lead:
        return run.diverged(message, {"step": step, "tensors": tensors}, rows)
    return TrainingDiverged(message, run.path)


def _global_mean(value: torch.Tensor, ranks: Ranks) -> float:
    """The mean of a scalar over the ranks (the global batch's loss when slices are equal-sized)."""
    if ranks.world > 1:
        value = value.clone()
        dist.all_reduce(value)
        let_go(value)
        value /= ranks.world
    return float(value)


def _prepare_ranks(run: Run, ranks: Ranks, resume: bool, force: bool) -> tuple[TextTokenizer, object, bool]:
    """:func:`_prepare` on rank 0; the other ranks wait for it, raise its InputError if it failed,
    then read the tokenizer it wrote where it writes the run (so every rank has the same vocabulary)."""
    if ranks.world == 1:
        return _prepare(run, resume, force)
    prepared, shared = None, [None, None]  # rank 0's error, or the folder it writes the run in
    if ranks.rank == 0:
        try:
            prepared = _prepare(run, resume, force)
            shared[1] = str(run.path)
        except InputError as failure:
            shared[0] = str(failure)
    dist.broadcast_object_list(shared, src=0)
    if shared[0] is not None:
        raise InputError(shared[0])
    run.path = Path(shared[1])  # rank 0 may write a replacement next to the run it replaces
    return prepared or (*corpus_windows(run.config, run.path), resume)


def _prepare(run: Run, resume: bool, force: bool) -> tuple[TextTokenizer, object, bool]:
    """Open the run directory (:meth:`ctxstair.run.Run.open`) and tokenise; a new directory appears
    with its ``tokenizer.json`` and ``config.yaml``. Returns the tokenizer, the windows and whether an
    existing run is continued. Bad input (corpus, sizes) fails before anything is written."""
    cfg = run.config
    if resume and run.path.exists():
        run.open(resume, force, lambda staging: None)
        return (*corpus_windows(cfg, run.path), True)
    tokenizer, windows = corpus_windows(cfg)
    check_memory(cfg, tokenizer.vocab_size)
    if cfg.analysis.enabled:
        _check_analysable(cfg, tokenizer, windows)
    run.open(resume, force, lambda staging: tokenizer.save(staging / "tokenizer.json"))
    return tokenizer, windows, False


def _check_analysable(cfg: LMConfig, tokenizer: TextTokenizer, windows) -> None:
    """Refuse before training a corpus whose training windows hold fewer than 4 word-like tokens:
    the analysis (:mod:`ctxstair.analysis.lm_staircase`) could not compare any geometry after the run."""
    from ctxstair.measure.primitives import eligible_tokens

    train, _ = split_indices(len(windows), cfg.train.seed)
    train = windows[sample_indices(train, cfg.analysis.max_windows, cfg.analysis.seed)]
    found = eligible_tokens(train, tokenizer.word_like(np.arange(tokenizer.vocab_size)), cfg.analysis.k).size
    if found < 4:
        raise InputError(f"corpus {cfg.corpus.source!r} has {found} word-like token(s) in its training windows; the "
                         "analysis needs at least 4: use a larger or more varied corpus, or analysis.enabled=false")


@torch.no_grad()
def _mean_loss(model: torch.nn.Module, windows: torch.Tensor, batch: int = 64) -> float:
    """Mean next-token loss over ``windows`` (n, T), in batches."""
    losses = [float(next_token_loss(logits_of(model, part), part)) * len(part) for part in windows.split(batch)]
    return sum(losses) / len(windows)
