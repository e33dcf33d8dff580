"""Train a small decoder language model from γ-initialization on a corpus (SPEC §5, §7).

    ctxstair lm train --out runs/lm --set corpus.source=synthetic --set train.steps=2000

Read top to bottom: the corpus is tokenised (a byte-level BPE trained on it, or GPT-2's vocabulary)
and cut into windows of ``corpus.window`` tokens, 5 % of them held out; the model is the
Llama/Qwen2-style :class:`~ctxstair.models.DecoderLM` (pre-norm RMSNorm, SwiGLU, RoPE, untied
embeddings) with γ-init per component; AdamW with linear warm-up and cosine decay to
``train.final_lr_fraction`` of the peak; every step draws a batch of windows from a seeded
generator. At log-spaced steps the whole model is saved (``snapshots/step_XXXXXXXX.safetensors``)
with the held-out loss, and a checkpoint (model, optimizer, generator, step) that ``resume``
continues from with the same numbers as an uninterrupted run.

Devices and data parallelism (issue 8, items 4 and 5): the model, batches and held-out loss live on
``train.device`` (``auto``: CUDA when present); files are written from CPU copies and the batch
generator stays on the CPU, so the data order does not depend on the device. Started by
``torchrun --nproc_per_node=N`` the run is data-parallel (DDP): every rank draws the same global
batch and trains on its slice, and only rank 0 writes to the run directory.

Run directory: ``config.yaml`` (an :class:`LMConfig`), ``tokenizer.json``, ``members.csv`` (realised
initial std of every matrix), ``metrics.jsonl`` (``step, loss, lr`` and ``val_loss`` at snapshots),
``snapshots/``; the analysis (:mod:`ctxstair.lm.staircase`) adds ``alignment.csv`` and
``lm_analysis.csv``.
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ctxstair import numerics
from ctxstair.config import check_minimum, check_positive, dump_yaml, load_yaml
from ctxstair.checks import check_dense_size
from ctxstair.devices import check_device_name, resolve_device
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.rundir import write_resources
from ctxstair.integrity import check_digest, check_progress, digest, read_verified, write_verified
from ctxstair.io import atomic_write_bytes, atomic_write_text, fresh_output_dir, remove_stale_temporaries
from ctxstair.lm.corpus import load_text
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.models.decoder import DecoderConfig, DecoderLM, next_token_loss
from ctxstair.models.decoder_hf import decoder_config_from_hf
from ctxstair.train.engine import flush_denormals
from ctxstair.train.schedule import snapshot_schedule

TOKENIZERS = ("bpe", "gpt2")


@dataclass
class CorpusConfig:
    """Text and tokens (SPEC §7, §10): ``source`` as :func:`ctxstair.lm.corpus.load_text`
    (``synthetic``, a fetched corpus name, or a path); a BPE of ``vocab_size`` trained on it or
    GPT-2's vocabulary; windows of ``window`` tokens; at most ``max_tokens`` tokens (0: all)."""

    source: str = "synthetic"
    tokenizer: str = "bpe"
    vocab_size: int = 1000
    window: int = 64
    max_tokens: int = 0


@dataclass
class LMModelConfig:
    """The decoder of SPEC §5 at toy size (the paper's: 24 layers, d 1024, 16 heads of 96, MLP 4096)
    and its γ-init (SPEC §4; per-component γ default to ``gamma``). ``hf_config``, when set, is the
    path of a Hugging Face Llama ``config.json`` (or its directory) whose sizes replace ``d_model``,
    ``n_layers``, ``n_heads``, ``head_dim`` and ``d_mlp``
    (:func:`~ctxstair.models.decoder_hf.decoder_config_from_hf`)."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    head_dim: int = 16
    d_mlp: int = 256
    gamma: float = 1.0
    gamma_embedding: float | None = None
    gamma_unembedding: float | None = None
    gamma_qk: float | None = None
    gamma_ov: float | None = None
    gamma_mlp: float | None = None
    hf_config: str = ""


@dataclass
class LMTrainConfig:
    """AdamW (β = 0.9, 0.95) with warm-up over ``warmup`` of the steps and cosine decay to
    ``final_lr_fraction`` of ``lr`` (SPEC §5: 3 % warm-up, 10 % final). ``batch_size`` is the global
    batch, split evenly across data-parallel ranks. ``device``: ``auto`` (CUDA when present),
    ``cpu``, ``cuda`` or ``cuda:N`` (issue 8 item 5)."""

    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    warmup: float = 0.03
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.1
    seed: int = 0
    device: str = "auto"


@dataclass
class LMSnapshotConfig:
    """Snapshot steps: ``log_points`` log-spaced steps up to ``every``, then every ``every`` steps."""

    log_points: int = 24
    every: int = 250


@dataclass
class LMAnalysisConfig:
    """F7 measurements (SPEC §7): ``k`` eligible tokens, the probe's held-out token fraction and
    steps, and how many windows the attention and path analyses read."""

    enabled: bool = True
    k: int = 200
    heldout_fraction: float = 0.25
    probe_steps: int = 300
    windows: int = 128
    seed: int = 0


@dataclass
class LMConfig:
    """One language-model run: corpus, model, training, snapshots, analysis."""

    recipe: str = "lm-staircase"
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    model: LMModelConfig = field(default_factory=LMModelConfig)
    train: LMTrainConfig = field(default_factory=LMTrainConfig)
    snapshots: LMSnapshotConfig = field(default_factory=LMSnapshotConfig)
    analysis: LMAnalysisConfig = field(default_factory=LMAnalysisConfig)

    def validate(self) -> "LMConfig":
        """Check ranges and choices; return self or raise InputError naming the key."""
        if self.corpus.tokenizer not in TOKENIZERS:
            raise InputError(f"corpus.tokenizer must be one of {', '.join(TOKENIZERS)}; got {self.corpus.tokenizer!r}")
        check_minimum([("corpus.vocab_size", self.corpus.vocab_size, 257), ("corpus.window", self.corpus.window, 2),
                       ("corpus.max_tokens", self.corpus.max_tokens, 0), ("train.steps", self.train.steps, 1),
                       ("train.batch_size", self.train.batch_size, 1), ("train.seed", self.train.seed, 0),
                       ("snapshots.log_points", self.snapshots.log_points, 0), ("snapshots.every", self.snapshots.every, 1),
                       ("analysis.k", self.analysis.k, 4), ("analysis.probe_steps", self.analysis.probe_steps, 0),
                       ("analysis.windows", self.analysis.windows, 1)])
        check_positive([("train.lr", self.train.lr), ("model.gamma", self.model.gamma)])
        for key, value in [("train.warmup", self.train.warmup), ("train.final_lr_fraction", self.train.final_lr_fraction),
                           ("analysis.heldout_fraction", self.analysis.heldout_fraction)]:
            if not 0 <= value < 1:
                raise InputError(f"{key} must be in [0, 1), got {value}")
        check_device_name("train.device", self.train.device)
        self.decoder_config(vocab_size=256)  # the model's own checks (head sizes, γ's)
        return self

    def decoder_config(self, vocab_size: int) -> DecoderConfig:
        """The :class:`DecoderConfig` of this run for a tokenizer of ``vocab_size``."""
        model = asdict(self.model)
        hf_config = model.pop("hf_config")
        settings = {"vocab_size": vocab_size, "max_seq_len": self.corpus.window, "seed": self.train.seed}
        if hf_config:  # its sizes replace ours; the vocabulary, window, seed and γ's stay the run's
            gammas = {key: value for key, value in model.items() if key.startswith("gamma")}
            return decoder_config_from_hf(hf_config, **settings, **gammas)
        return DecoderConfig(**settings, **model)


# ---------------------------------------------------------------------------------------- data

def build_tokenizer(cfg: CorpusConfig, text: str) -> TextTokenizer:
    """A byte-level BPE of ``cfg.vocab_size`` trained on ``text``, or GPT-2's vocabulary (SPEC §10)."""
    return TextTokenizer.gpt2() if cfg.tokenizer == "gpt2" else TextTokenizer.train_bpe(text, cfg.vocab_size)


def make_windows(ids: np.ndarray, window: int) -> np.ndarray:
    """Consecutive non-overlapping windows (n, window) of a token stream (the tail is dropped)."""
    n = len(ids) // window
    if n < 2:
        raise InputError(f"the corpus has {len(ids)} tokens: fewer than two windows of {window}")
    return np.ascontiguousarray(ids[: n * window].reshape(n, window))


def split_windows(windows: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) windows: a seeded 5 % (at least one window) is held out for the val loss."""
    order = np.random.default_rng(seed).permutation(len(windows))
    n_val = max(1, len(windows) // 20)
    return windows[np.sort(order[n_val:])], windows[np.sort(order[:n_val])]


def corpus_windows(cfg: LMConfig, out: Path | None = None) -> tuple[TextTokenizer, np.ndarray]:
    """Tokenizer and all windows (n, T) of the run's corpus; the tokenizer is read from ``out``
    when the run directory has one (so a resumed or analysed run uses the same vocabulary)."""
    text = load_text(cfg.corpus.source)
    saved = out / "tokenizer.json" if out is not None else None
    tokenizer = TextTokenizer.load(saved) if saved is not None and saved.is_file() else build_tokenizer(cfg.corpus, text)
    ids = tokenizer.encode(text, max_tokens=cfg.corpus.max_tokens or None)
    try:
        return tokenizer, make_windows(ids, cfg.corpus.window)
    except InputError as error:
        raise InputError(f"corpus {cfg.corpus.source!r}: {error} (corpus.window={cfg.corpus.window})") from None


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
    dec = cfg.decoder_config(vocab_size)
    for shape, what in [((vocab_size, dec.d_model), "the embedding W_E (vocab, model.d_model)"),
                        ((dec.d_mlp, dec.d_model), "an MLP matrix (model.d_mlp, model.d_model)"),
                        ((dec.n_heads * dec.head_dim, dec.d_model), "an attention matrix (heads × head_dim, model.d_model)"),
                        ((cfg.train.batch_size, cfg.corpus.window, vocab_size), "the logits of one batch (batch, window, vocab)")]:
        check_dense_size(shape, None, what, "lower the model or batch sizes", itemsize=4)


def build_model(cfg: LMConfig, vocab_size: int) -> DecoderLM:
    """The γ-initialised decoder of ``cfg`` (float32)."""
    return DecoderLM(cfg.decoder_config(vocab_size))


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
            raise InputError(f"train.batch_size={cfg.batch_size} is not divisible by the {ranks.world} data-parallel processes")
        yield ranks
    finally:
        if opened:
            # DDP's reducer sits in reference cycles; freed after the group (at interpreter exit) it
            # aborted rank 1 in about one two-process run in six ("terminate called without an active exception").
            gc.collect()
            dist.destroy_process_group()


def train_lm(cfg: LMConfig, out: str | Path, *, resume: bool = False, force: bool = False,
             hook: Callable[[int], None] | None = None) -> Path:
    """Train ``cfg`` into run directory ``out`` (see the module docstring); return its path.

    ``resume`` continues an interrupted run (same config required; a completed run is left as is).
    ``hook(step)`` is called before every step (tests use it to interrupt a run). Under torchrun
    every process calls this; only rank 0 writes files (issue 8 item 4)."""
    out = Path(out)
    cfg = cfg.validate()
    with data_parallel(cfg.train) as ranks:
        return _train(cfg, out, ranks, resume, force, hook)


def _train(cfg: LMConfig, out: Path, ranks: Ranks, resume: bool, force: bool,
           hook: Callable[[int], None] | None) -> Path:
    lead, started = ranks.rank == 0, time.perf_counter()
    numerics.apply_to_torch()
    tokenizer, windows = _prepare_ranks(cfg, out, ranks, resume, force)
    if resume and not (out / "checkpoint" / "state.json").is_file() and any(
            r["step"] == cfg.train.steps and "val_loss" in r for r in read_metrics(out)):
        return out  # already complete
    train, val = split_windows(windows, cfg.train.seed)
    model = build_model(cfg, tokenizer.vocab_size).to(ranks.device)
    net = model if ranks.world == 1 else torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.train.weight_decay)
    batches = torch.Generator().manual_seed(cfg.train.seed)  # on the CPU whatever the device: same data order
    schedule = set(snapshot_schedule(cfg.train.steps, cfg.snapshots.log_points, cfg.snapshots.every))
    train_t, val_t = torch.from_numpy(train), torch.from_numpy(val).to(ranks.device)
    per_rank = cfg.train.batch_size // ranks.world
    mine = slice(ranks.rank * per_rank, (ranks.rank + 1) * per_rank)

    start, rows, resumed = 0, [], resume and (out / "checkpoint" / "state.json").is_file()
    if resumed:
        start, rows = _load_checkpoint(out, model, optimizer, batches)
    elif lead:  # a new run, or one killed before its first checkpoint
        atomic_write_text(out / "members.csv", "tensor,init_std,target_std\n" + "".join(
            f"{name},{std:.6g},{model.target_stds()[name]:.6g}\n" for name, std in model.init_stds().items()))
    if ranks.world > 1:
        dist.barrier()  # every rank has read the checkpoint before rank 0 writes the next one
    with flush_denormals():
        for step in range(start, cfg.train.steps + 1):
            if hook is not None:
                hook(step)
            if lead and step in schedule and not (resumed and step == start):  # a resumed checkpoint step is saved
                _save_snapshot(out, step, model)
                rows.append({"step": step, "val_loss": _mean_loss(model, val_t)})
                _save_checkpoint(out, step, model, optimizer, batches, rows)
            if step == cfg.train.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = cfg.train.lr * lr_factor(step, cfg.train)
            # Every rank draws the whole global batch, so the generator and the data order are those of
            # a single-process run; each trains on its own slice.
            batch = train_t[torch.randint(len(train_t), (cfg.train.batch_size,), generator=batches)[mine]]
            batch = batch.to(ranks.device)
            loss = next_token_loss(net(batch), batch)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            rows.append({"step": step, "loss": _global_mean(loss.detach(), ranks), "lr": optimizer.param_groups[0]["lr"]})
            if not math.isfinite(rows[-1]["loss"]):  # every rank sees the same global mean and stops
                _stop_diverged(cfg, out, model, step, rows, lead)
    if lead:
        _write_metrics(out, rows)
        (out / "checkpoint" / "state.json").unlink(missing_ok=True)  # the commit point goes first
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
        write_resources(out, time.perf_counter() - started)
    if ranks.world > 1:
        dist.barrier()  # the run directory is complete when any rank returns
    return out


def _stop_diverged(cfg: LMConfig, out: Path, model: DecoderLM, step: int, rows: list[dict], lead: bool) -> None:
    """Keep what was written, add ``failure.json`` (rank 0) and raise TrainingDiverged naming the
    step, the non-finite tensors and the likely cause (issue 9 item 4)."""
    tensors = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    losses = [r["loss"] for r in rows if "loss" in r]
    where = f"non-finite values in {', '.join(tensors)}" if tensors else "every parameter is still finite"
    cause = (f"the loss went from {losses[0]:.4g} (step 0) to {losses[-2]:.4g} (step {step - 1}); the likely cause is "
             f"a learning rate train.lr={cfg.train.lr:g} too large for this initialization (or a float32 overflow): "
             "try a smaller train.lr" if len(losses) > 1 else
             f"the loss of the very first step is not finite: check the initialization (model.init) and train.lr={cfg.train.lr:g}")
    message = f"training diverged at step {step}: the loss is not finite; {where}; {cause}. Written so far is kept in {out}"
    if lead:
        _write_metrics(out, rows)
        atomic_write_text(out / "failure.json", json.dumps({"reason": "diverged", "step": step, "tensors": tensors,
                                                            "message": message}, indent=2) + "\n")
        (out / "checkpoint" / "state.json").unlink(missing_ok=True)  # nothing to resume: it would diverge again
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    raise TrainingDiverged(message, out)


def _global_mean(value: torch.Tensor, ranks: Ranks) -> float:
    """The mean of a scalar over the ranks (the global batch's loss when slices are equal-sized)."""
    if ranks.world > 1:
        value = value.clone()
        dist.all_reduce(value)
        value /= ranks.world
    return float(value)


def _prepare_ranks(cfg: LMConfig, out: Path, ranks: Ranks, resume: bool,
                   force: bool) -> tuple[TextTokenizer, np.ndarray]:
    """:func:`_prepare` on rank 0; the other ranks wait for it, raise its InputError if it failed,
    then read the tokenizer it wrote (so every rank has the same vocabulary)."""
    if ranks.world == 1:
        return _prepare(cfg, out, resume, force)
    prepared, error = None, [None]
    if ranks.rank == 0:
        try:
            prepared = _prepare(cfg, out, resume, force)
        except InputError as failure:
            error = [str(failure)]
    dist.broadcast_object_list(error, src=0)
    if error[0] is not None:
        raise InputError(error[0])
    return prepared or corpus_windows(cfg, out)


def _prepare(cfg: LMConfig, out: Path, resume: bool, force: bool) -> tuple[TextTokenizer, np.ndarray]:
    """Check the run directory against ``resume``/``force``, then tokenise; write config and tokenizer.

    A new run directory appears whole (tokenizer and config, assembled under a temporary name);
    ``resume`` of a directory that does not exist starts the run (issue 9 item 1)."""
    if resume and out.exists():
        if not (out / "config.yaml").is_file():
            raise InputError(f"cannot resume {out}: no run there (config.yaml missing)")
        if load_yaml((out / "config.yaml").read_text(), LMConfig) != cfg:
            raise InputError(f"cannot resume {out}: its config.yaml differs from the requested configuration")
        remove_stale_temporaries(out)
        return corpus_windows(cfg, out)
    if out.exists() and not force:
        raise InputError(f"run directory {out} already exists; use --resume to continue it or --force to replace it")
    tokenizer, windows = corpus_windows(cfg)  # bad input fails here, before anything is written
    check_memory(cfg, tokenizer.vocab_size)
    if cfg.analysis.enabled:
        _check_analysable(cfg, tokenizer, windows)
    with fresh_output_dir(out, force=force) as staging:
        tokenizer.save(staging / "tokenizer.json")
        atomic_write_text(staging / "config.yaml", dump_yaml(cfg))
    return tokenizer, windows


def _check_analysable(cfg: LMConfig, tokenizer: TextTokenizer, windows: np.ndarray) -> None:
    """Refuse before training a corpus whose training windows hold fewer than 4 word-like tokens:
    the analysis (:mod:`ctxstair.lm.staircase`) could not compare any geometry after the run."""
    from ctxstair.lm.analysis import eligible_tokens

    train, _ = split_windows(windows, cfg.train.seed)
    found = eligible_tokens(train, tokenizer.word_like(np.arange(tokenizer.vocab_size)), cfg.analysis.k).size
    if found < 4:
        raise InputError(f"corpus {cfg.corpus.source!r} has {found} word-like token(s) in its training windows; the "
                         "analysis needs at least 4: use a larger or more varied corpus, or analysis.enabled=false")


@torch.no_grad()
def _mean_loss(model: DecoderLM, windows: torch.Tensor, batch: int = 64) -> float:
    """Mean next-token loss over ``windows`` (n, T), in batches."""
    losses = [float(next_token_loss(model(part), part)) * len(part) for part in windows.split(batch)]
    return sum(losses) / len(windows)


def snapshot_file(out: Path, step: int) -> Path:
    """Path of the snapshot of ``step``."""
    return out / "snapshots" / f"step_{step:08d}.safetensors"


def snapshot_steps(out: str | Path) -> list[int]:
    """Steps that have a snapshot, ascending."""
    return sorted(int(p.stem[5:]) for p in (Path(out) / "snapshots").glob("step_*.safetensors"))


def load_snapshot(out: str | Path, step: int) -> dict[str, torch.Tensor]:
    """The model state of a snapshot (a DecoderLM state_dict), after checking its SHA-256 against
    ``snapshots/manifest.json``; InputError naming the file if it is corrupted or truncated."""
    path = snapshot_file(Path(out), step)
    data = read_verified(path)
    try:
        return load_safetensors(data)
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise InputError(f"snapshot file {path} is unreadable: {error}") from None


def check_snapshot_progress(out: str | Path) -> None:
    """InputError if two neighbouring snapshots are byte-identical although some step between them
    had a learning rate above zero (AdamW then moves every weight): a stuck writer."""
    steps, rows = snapshot_steps(out), read_metrics(out)
    lrs = {r["step"]: r["lr"] for r in rows if "lr" in r}
    names = {snapshot_file(Path(out), s).name: s for s in steps}
    check_progress(Path(out) / "snapshots", list(names),
                   lambda a, b: any(lrs.get(s, 0.0) > 0 for s in range(names[a], names[b])))


def _save_snapshot(out: Path, step: int, model: DecoderLM) -> None:
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_verified(snapshot_file(out, step), save_safetensors(state))


def _save_checkpoint(out: Path, step: int, model: DecoderLM, optimizer: torch.optim.Optimizer,
                     generator: torch.Generator, rows: list[dict]) -> None:
    """Write model, optimizer and generator state, then ``state.json`` last (the commit point)."""
    ckpt = out / "checkpoint"
    ckpt.mkdir(exist_ok=True)
    buffer = io.BytesIO()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "generator": generator.get_state()}
    torch.save(_on_cpu(state), buffer)
    atomic_write_bytes(ckpt / f"state_{step:08d}.pt", buffer.getvalue())
    _write_metrics(out, rows)
    atomic_write_text(ckpt / "state.json", json.dumps({"step": step, "file": f"state_{step:08d}.pt",
                                                       "sha256": digest(buffer.getvalue())}))
    for old in ckpt.glob("state_*.pt"):
        if old.name != f"state_{step:08d}.pt":
            old.unlink()


def _on_cpu(state):
    """``state`` (nested dicts and lists of tensors) with every tensor on the CPU (CPU ones as they are)."""
    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {key: _on_cpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_on_cpu(value) for value in state)
    return state


def _load_checkpoint(out: Path, model: DecoderLM, optimizer: torch.optim.Optimizer,
                     generator: torch.Generator) -> tuple[int, list[dict]]:
    folder = out / "checkpoint"
    try:
        info = json.loads((folder / "state.json").read_text())
        path = folder / info["file"]
        if path.resolve().parent != folder.resolve():
            raise ValueError(f"it names {info['file']!r}, outside the checkpoint folder")
        data = path.read_bytes()
    except (OSError, KeyError, TypeError, ValueError) as error:
        raise InputError(f"cannot resume {out}: its checkpoint is missing or unreadable ({error})") from None
    if "sha256" in info:  # checkpoints written before hashes were recorded have none
        check_digest(path, data, info["sha256"])
    try:  # weights_only: tensors and plain containers, never arbitrary objects
        state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")  # copied onto the model's device
    except Exception as error:  # pickle.UnpicklingError, RuntimeError: a file that is not our checkpoint
        raise InputError(f"cannot resume {out}: {path} is not a loadable checkpoint ({type(error).__name__})") from None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    generator.set_state(state["generator"])
    step = info["step"]
    # The checkpoint of step s is written before step s trains: keep rows of earlier steps and the
    # val loss of step s itself, which the loop does not recompute.
    rows = [r for r in read_metrics(out) if r["step"] < step or (r["step"] == step and "val_loss" in r)]
    return step, rows


def _write_metrics(out: Path, rows: list[dict]) -> None:
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def read_metrics(out: str | Path) -> list[dict]:
    """Rows of ``metrics.jsonl``: ``{"step", "loss", "lr"}`` per step and ``{"step", "val_loss"}`` per snapshot."""
    path = Path(out) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
