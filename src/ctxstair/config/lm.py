"""Configuration of a language-model run (SPEC §5, §7, §10): corpus, model, training, snapshots and
analysis as nested dataclasses, read and written like every config (:mod:`ctxstair.config`).

    cfg = apply_overrides(LMConfig(), {"corpus.source": "shakespeare", "train.steps": 4000})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ctxstair.checks import check_key_choice, check_minimum, check_positive
from ctxstair.config import GAMMA_COMPONENTS, PROBE_METHODS, InitConfig
from ctxstair.devices import check_device_name
from ctxstair.errors import InputError

TOKENIZERS = ("bpe", "word", "gpt2")
#: Values of ``train.precision`` and ``train.sharding``.
PRECISIONS = ("float32", "bf16")
SHARDINGS = ("ddp", "fsdp2")


@dataclass
class CorpusConfig:
    """Text and tokens (SPEC §7, §10): ``source`` as :func:`ctxstair.text.corpora.load_text`
    (``synthetic``, a fetched corpus name, a path, or several joined by ``+``); ``tokenizer``: a
    byte-level BPE of ``vocab_size`` trained on it (``bpe``), its ``vocab_size`` most frequent
    lower-cased words (``word``), GPT-2's vocabulary (``gpt2``) or a saved ``tokenizer.json`` (a
    path); windows of ``window`` tokens; at most ``max_tokens`` tokens (0: all).

    ``shards``, when set, replaces the text: token files already tokenized (a path, a directory of
    shards, or several joined by ``+``; the formats of :func:`ctxstair.corpus.open_source`, a flat
    ``.bin`` read as ``dtype``, uint16 when empty), windowed by the rule of :mod:`ctxstair.corpus.sources` with
    ``documents`` (``joined`` or ``separate``) and read window by window while training
    (:mod:`ctxstair.text.shard_windows`); the tokenizer must then be ``gpt2`` or a ``tokenizer.json``."""

    source: str = "synthetic"
    tokenizer: str = "bpe"
    vocab_size: int = 1000
    window: int = 64
    max_tokens: int = 0
    shards: str = ""
    documents: str = "joined"
    dtype: str = ""


@dataclass
class LMModelConfig:
    """The decoder of SPEC §5 as a ``transformers`` model of ``family`` (any family with a model view:
    ``llama`` by default — pre-norm RMSNorm, SwiGLU, rotary positions, untied embeddings —,
    ``gpt_neox``, ``gpt2``, ``qwen2``, ``olmo2``, ...; :mod:`ctxstair.models.causal_lm`) at toy size
    (the paper's: 24 layers, d 1024, 16 heads of 96, MLP 4096), and its γ-init (SPEC §4) by role in
    ``init``, spelled as for the ensemble models (``model.init.gamma``, ``model.init.qk``, ...;
    per-role γ default to ``init.gamma``). ``hf_config``, when set, is the path of a Hugging Face
    ``config.json`` (or its directory) of that family whose architecture and sizes replace these
    (the vocabulary and the window stay the run's)."""

    family: str = "llama"
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    head_dim: int = 16
    d_mlp: int = 256
    init: InitConfig = field(default_factory=InitConfig)
    hf_config: str = ""

    #: The sizes it sets (the rest come from the family, the corpus and the training).
    SIZES: ClassVar[tuple[str, ...]] = ("d_model", "n_layers", "n_heads", "head_dim", "d_mlp")

    def embedding_key(self) -> str:
        """The name of ``W_E`` in the model's state dict, so in every snapshot of the run (the family
        adapter's, :mod:`ctxstair.models.view.families`)."""
        from ctxstair.models.view import registry

        return registry()[self.family].embedding


@dataclass
class LMTrainConfig:
    """AdamW (β = 0.9, 0.95) with warm-up over ``warmup`` of the steps and cosine decay to
    ``final_lr_fraction`` of ``lr`` (SPEC §5: 3 % warm-up, 10 % final). ``batch_size`` is the global
    batch, split evenly across data-parallel ranks. ``device``: ``auto`` (CUDA when present),
    ``cpu``, ``cuda`` or ``cuda:N``.

    Options for GPUs and large models, all off by default (a run without them is bitwise the run
    of before they existed): ``precision`` ``bf16`` runs the forward pass and the loss under bf16
    autocast (weights, gradients and optimizer state stay float32); ``tf32`` lets CUDA matmuls use
    TF32; ``fused_adamw`` takes PyTorch's fused AdamW kernel; ``compile`` runs the model through
    ``torch.compile``; ``micro_batches`` splits each rank's share of the batch into that many
    micro-batches whose gradients accumulate (the same global batch, less activation memory);
    ``sharding`` chooses, under torchrun, DDP (``ddp``) or FSDP2 (``fsdp2``: every decoder layer
    and the embeddings sharded across the ranks). ``val_windows`` caps the held-out windows of the
    validation loss (0: all of them)."""

    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    warmup: float = 0.03
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.1
    seed: int = 0
    device: str = "auto"
    precision: str = "float32"
    tf32: bool = False
    fused_adamw: bool = False
    compile: bool = False
    micro_batches: int = 1
    sharding: str = "ddp"
    val_windows: int = 0


@dataclass
class LMSnapshotConfig:
    """Snapshot steps: ``log_points`` log-spaced steps up to ``every``, then every ``every`` steps.
    The final model is also written as a Hugging Face folder (``hf_model/``); with ``export`` every
    snapshot is too (``hf_snapshots/step_XXXXXXXX/``, :mod:`ctxstair.lm.export`)."""

    log_points: int = 24
    every: int = 250
    export: bool = False


@dataclass
class LMAnalysisConfig:
    """F7 measurements (SPEC §7) after training, the settings of
    :class:`ctxstair.measure.staircase.StaircaseSettings` with its defaults (the reasons are there): ``k``
    eligible tokens, ``prefix_labels`` labels of the prefix signature, the probe's held-out token
    fraction and steps, ``windows`` sampled for the attention paths and the first ``path_windows``
    of them for the path shares. ``probe``: ``fast`` or ``reference``, how the probe's Adam steps
    are computed (:func:`ctxstair.measure.primitives.prefix_probe`). ``measures``: ``all``, or
    ``rho_next`` for ρ_next alone (about a second per run: what a sweep searching for the staircase
    needs; the probe, attention-path and path-share analyses cost seconds per snapshot). ``stats``:
    a statistics directory (``ctxstair corpus count``, counted with the run's tokenizer for these
    settings) whose counts replace those of the run's training windows (empty: the windows).
    ``max_windows``: the analysis reads at most this many training windows, a seeded sample when
    the corpus has more (a corpus of shards can be far larger than memory; 0: every window)."""

    #: Values of ``measures``.
    MEASURE_CHOICES: ClassVar[tuple[str, ...]] = ("all", "rho_next")

    enabled: bool = True
    measures: str = "all"
    k: int = 200
    prefix_labels: int = 1000
    heldout_fraction: float = 0.25
    probe: str = "fast"
    probe_steps: int = 300
    windows: int = 128
    path_windows: int = 4
    seed: int = 0
    stats: str = ""
    max_windows: int = 100_000


@dataclass
class LMConfig:
    """One language-model run: corpus, model, training, snapshots, analysis."""

    #: What the trainer counts: snapshot names, metrics rows and checkpoints are keyed by step.
    TIME_UNIT: ClassVar[str] = "step"
    #: The γ settings' spelling before they moved into ``model.init`` (read as the new one).
    RENAMED: ClassVar[dict[str, str]] = {
        "model.gamma": "model.init.gamma",
        **{f"model.gamma_{c}": f"model.init.{c}" for c in GAMMA_COMPONENTS}}

    #: Settings a resumed run may change: where and how it is spread over processes (a checkpoint is
    #: the same whole-model file under one process, DDP and FSDP2, :mod:`ctxstair.lm.fsdp`).
    RESUME_MAY_CHANGE: ClassVar[tuple[str, ...]] = ("train.device", "train.sharding")

    recipe: str = "lm-staircase"
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    model: LMModelConfig = field(default_factory=LMModelConfig)
    train: LMTrainConfig = field(default_factory=LMTrainConfig)
    snapshots: LMSnapshotConfig = field(default_factory=LMSnapshotConfig)
    analysis: LMAnalysisConfig = field(default_factory=LMAnalysisConfig)

    def validate(self) -> LMConfig:
        """Check ranges and choices; return self or raise InputError naming the key."""
        if self.corpus.tokenizer not in TOKENIZERS and not self.corpus.tokenizer.endswith(".json"):
            raise InputError(f"corpus.tokenizer must be one of {', '.join(TOKENIZERS)} or the path of a "
                             f"tokenizer.json; got {self.corpus.tokenizer!r}")
        if self.corpus.shards and self.corpus.tokenizer in ("bpe", "word"):
            raise InputError(f"corpus.shards holds token ids: corpus.tokenizer must be gpt2 or the path of the "
                             f"tokenizer.json they were made with, not {self.corpus.tokenizer!r} (trained on text)")
        check_key_choice("corpus.documents", self.corpus.documents, ("joined", "separate"))
        check_key_choice("train.precision", self.train.precision, PRECISIONS)
        check_key_choice("train.sharding", self.train.sharding, SHARDINGS)
        check_minimum([("corpus.vocab_size", self.corpus.vocab_size, 257), ("corpus.window", self.corpus.window, 2),
                       ("corpus.max_tokens", self.corpus.max_tokens, 0), ("train.steps", self.train.steps, 1),
                       ("train.batch_size", self.train.batch_size, 1), ("train.seed", self.train.seed, 0),
                       ("train.micro_batches", self.train.micro_batches, 1),
                       ("train.val_windows", self.train.val_windows, 0),
                       ("analysis.max_windows", self.analysis.max_windows, 0),
                       ("snapshots.log_points", self.snapshots.log_points, 0),
                       ("snapshots.every", self.snapshots.every, 1),
                       ("analysis.k", self.analysis.k, 4), ("analysis.probe_steps", self.analysis.probe_steps, 0),
                       ("analysis.prefix_labels", self.analysis.prefix_labels, 1),
                       ("analysis.windows", self.analysis.windows, 1),
                       ("analysis.path_windows", self.analysis.path_windows, 1)])
        if self.analysis.path_windows > self.analysis.windows:
            raise InputError(f"analysis.path_windows ({self.analysis.path_windows}) must not exceed analysis.windows "
                             f"({self.analysis.windows}): the path shares use the first of the sampled windows")
        check_positive([("train.lr", self.train.lr)])
        self.model.init.validate()
        for key, value in [("train.warmup", self.train.warmup),
                           ("train.final_lr_fraction", self.train.final_lr_fraction),
                           ("analysis.heldout_fraction", self.analysis.heldout_fraction)]:
            if not 0 <= value < 1:
                raise InputError(f"{key} must be in [0, 1), got {value}")
        check_device_name("train.device", self.train.device)
        check_key_choice("analysis.probe", self.analysis.probe, PROBE_METHODS)
        check_key_choice("analysis.measures", self.analysis.measures, LMAnalysisConfig.MEASURE_CHOICES)
        check_minimum([(f"model.{name}", getattr(self.model, name), 1) for name in LMModelConfig.SIZES])
        self.model_config(vocab_size=257)  # the family's own checks (its name, head sizes)
        return self

    def model_config(self, vocab_size: int):
        """The ``transformers`` config of this run's model for a tokenizer of ``vocab_size``
        (:func:`ctxstair.models.causal_lm.family_config`)."""
        from ctxstair.models.causal_lm import family_config

        sizes = {name: getattr(self.model, name) for name in LMModelConfig.SIZES}
        return family_config(self.model.family, vocab_size, self.corpus.window, sizes, self.model.hf_config)
