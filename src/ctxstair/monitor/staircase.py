"""The staircase measurements of SPEC §6.4 and §7 on a model in memory, for any training loop.

:class:`StaircaseMonitor` is built once from a corpus sample — token windows (n, T) and the tokens
``T`` to analyse (:func:`monitor_tokens`: the most frequent word-like ones) — and keeps what
depends on the corpus only: the next-token signatures' cosines, the probe's token split, the
sample of windows for the attention paths and, from the first probe measurement on, the
first-order prefix signatures. ``measure(model)`` then reads the model's weights and returns the
numbers ``ctxstair analyze-model`` (:func:`ctxstair.lm.hf.analyze_model`) and the LM
runs' analysis (:mod:`ctxstair.analysis.lm_staircase`) compute, with the same functions of
:mod:`ctxstair.lm.analysis`:

* ``rho_next``, ``rho_next_spearman`` — :func:`~ctxstair.lm.analysis.rho_next`: Pearson and
  Spearman between the upper triangles of the cosine matrix of the input-embedding rows of ``T``
  and of their next-token signatures ``φ^{y;nt}`` over V = the model's number of embedding rows
  (the same three functions of :mod:`ctxstair.alignment`, with the signatures' cosines kept);
* ``probe_heldout_mse``, ``probe_shuffled_mse`` — :func:`~ctxstair.lm.analysis.prefix_probe` and
  :func:`~ctxstair.lm.analysis.shuffled_baseline` on the prefix signatures ``φ^{y;1}`` over the
  labels :func:`~ctxstair.lm.analysis.prefix_labels` and context ``T``, split by
  :func:`~ctxstair.lm.analysis.token_split`;
* for Llama-family models (a :class:`~ctxstair.models.DecoderLM`, or a Hugging Face Llama that
  :func:`~ctxstair.models.decoder_hf.from_hf_weights` accepts): ``attention_path_corr/<layer>``,
  ``attention_path_null/<layer>`` (:func:`~ctxstair.lm.analysis.attention_path_scores`) and
  ``path_share/<path>`` (:func:`~ctxstair.lm.analysis.path_shares`) on a fixed sample of windows.

The model is never run and never changed: its weights are copied to the CPU in float32 (only the
rows of ``T`` for the embedding measures; the whole network, as a DecoderLM, for the path
measures) under ``torch.no_grad`` with the model in eval mode, and every module's training flag is
restored afterwards. So a model on CUDA works, the training's random streams are not touched, and
the training run with a monitor computes the same weights as without.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from ctxstair.alignment.similarity import signature_cosine
from ctxstair.checks import as_array, check_id_subset, check_sequences, int_in_range, positive_float
from ctxstair.errors import InputError
from ctxstair.lm import analysis
from ctxstair.lm.hf import ATTENTION_WINDOWS, NEEDS_LLAMA, PATH_WINDOWS, SAMPLE_SEED
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.monitor import KEY_PREFIX
from ctxstair.signatures import next_token_signature, prefix_signature
from ctxstair.train.schedule import snapshot_schedule

#: Default cadence of the callbacks (:func:`monitor_steps`): log-spaced steps up to ``EVERY``, then
#: every ``EVERY`` steps; see ``docs/monitor.md`` for what it costs.
LOG_POINTS = 24
EVERY = 250
#: Default stride of the path measures in :class:`Cadence` (the probe's default is never).
PATHS_EVERY = 1000
#: The probe's Adam steps (SPEC §3 settings, as the LM runs and ``analyze-model``).
PROBE_STEPS = 300


def monitor_tokens(tokenizer: object, windows: object, k: int = 200) -> np.ndarray:
    """The token set of SPEC §7: the ``k`` most frequent word-like tokens of ``windows``.

    Word-like: the token decodes to letters only once one leading space marker is stripped
    (:meth:`ctxstair.lm.tokenizer.TextTokenizer.word_like`); equal counts are broken by the smaller
    id (:func:`ctxstair.lm.analysis.eligible_tokens`) — the tokens ``ctxstair analyze-model`` picks.

    Args:
        tokenizer: a :class:`~ctxstair.lm.tokenizer.TextTokenizer` or a ``transformers`` fast
            tokenizer (read through :meth:`TextTokenizer.from_transformers`).
        windows: int (n, T) token ids (numpy or torch).
        k: how many tokens, >= 4.

    Returns:
        int64 (k',) token ids, most frequent first; ``k' <= k``. InputError if fewer than 4 occur.
    """
    k = int_in_range(k, "k", 4)
    text_tokenizer = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer.from_transformers(tokenizer)
    X = _windows_array(windows)
    n_known = text_tokenizer.vocab_size
    word_like = np.zeros(max(n_known, int(X.max()) + 1), dtype=bool)
    # Only ids that occur can be chosen, so only they are decoded (a 50k vocabulary takes seconds).
    present = np.unique(X)
    present = present[present < n_known]
    word_like[present] = text_tokenizer.word_like(present)
    tokens = analysis.eligible_tokens(X, word_like, k)
    if tokens.size < 4:
        raise InputError(f"the windows hold only {tokens.size} distinct word-like tokens; need at least 4")
    return tokens


def monitor_steps(max_steps: int, log_points: int = LOG_POINTS, every: int = EVERY) -> list[int]:
    """The steps to measure at (SPEC §7, over training) in a run of ``max_steps`` steps: 0 (the initialization),
    ``log_points`` log-spaced steps in ``1..every`` (rounded, duplicates dropped), every multiple of
    ``every`` and the last step — the LM runs' snapshot schedule
    (:func:`ctxstair.train.schedule.snapshot_schedule`).

    Returns:
        sorted list of ints in ``0..max_steps``.
    """
    max_steps = int_in_range(max_steps, "max_steps", 1)
    log_points = int_in_range(log_points, "log_points", 0)
    every = int_in_range(every, "every", 1)
    return snapshot_schedule(max_steps, log_points, every)


class Cadence:
    """When to measure what (SPEC §6.4, §7) in a run of ``max_steps`` steps (the callbacks' schedule).

    ρ_next is measured at every step of :func:`monitor_steps` (``log_points``, ``every``); the
    path measures (attention paths, path shares) only at those of its steps that are multiples of
    ``paths_every`` and at the last step, and the prefix probe likewise with ``probe_every``. The
    expensive parts get their own, sparser cadence because they cost far more than a training step
    of a small model (``docs/monitor.md``: ρ_next about a tenth of a step, the path measures one to
    ten steps, the probe about a hundred); 1 measures them at every step of the schedule, None never.

    Args:
        max_steps: the run's number of optimizer steps, >= 1.
        log_points, every: as :func:`monitor_steps` (defaults 24 and 250).
        paths_every: default 1000; probe_every: default None (never: the probe's curve is cheaper
            from saved checkpoints with ``ctxstair analyze-model``, which fits them all at once).
    """

    def __init__(self, max_steps: int, log_points: int = LOG_POINTS, every: int = EVERY,
                 paths_every: int | None = PATHS_EVERY, probe_every: int | None = None):
        self.max_steps = int_in_range(max_steps, "max_steps", 1)
        self.steps = monitor_steps(self.max_steps, log_points, every)
        self._steps = set(self.steps)
        self.paths_every = _optional_stride(paths_every, "paths_every")
        self.probe_every = _optional_stride(probe_every, "probe_every")

    def __contains__(self, step: int) -> bool:
        return step in self._steps

    def parts(self, step: int) -> dict[str, bool] | None:
        """None when nothing is measured at ``step``; else ``{"probe": ..., "paths": ...}`` — the
        switches of :meth:`StaircaseMonitor.measure` at this step."""
        if step not in self._steps:
            return None

        def due(stride: int | None) -> bool:
            return stride is not None and (step % stride == 0 or step == self.max_steps)

        return {"probe": due(self.probe_every), "paths": due(self.paths_every)}


def _optional_stride(value: int | None, name: str) -> int | None:
    return None if value is None else int_in_range(value, name, 1)


class StaircaseMonitor:
    """SPEC §6.4/§7 measurements of a model during training (module docstring).

    Args:
        windows: int (n, T) token ids, T >= 2 (numpy or torch): the corpus sample. The signatures
            are counted over all n windows; keep it the size you would give ``analyze-model``
            (e.g. 2,000 windows of 128 tokens: the prefix signatures take about a second).
        tokens: int (k,) distinct token ids to analyse, k >= 4 (:func:`monitor_tokens`).
        vocab_size: V, when known: the next-token signature is then computed now; otherwise at the
            first :meth:`measure`, over the model's number of embedding rows.
        probe: measure the prefix probe and its shuffled control (the most expensive part: two
            fits of ``probe_steps`` Adam steps on arrays of k · labels · k entries). Its prefix
            signatures (k · labels · k float64: 128 MB at k = 200) are counted at the first probe
            measurement, so a monitor whose cadence never asks for the probe never builds them.
        paths: measure the attention paths and path shares (Llama-family models only).
        attention_windows: windows in the attention-path sample (the first ones of a permutation of
            all windows seeded with ``seed``, as ``analyze-model``; each cut to the model's
            ``max_seq_len``); path_windows: the first of them used for the path shares, which cost
            2L + 1 backward passes for L layers.
        n_labels: labels of the prefix signature (:func:`~ctxstair.lm.analysis.prefix_labels`);
            default ``2 k``, as the LM runs (``analyze-model`` uses 1000).
        probe_steps: Adam steps of each probe fit (SPEC §3: 300).
        heldout_fraction: share of held-out tokens of the probe (:func:`~ctxstair.lm.analysis.token_split`).
        seed: seeds the token split, the probe's start, the shuffled control and the window sample.

    Attributes:
        skipped: why the path measures were not taken at the last :meth:`measure` (None when they
            were, or were switched off).
        seconds: wall time of each part of the last :meth:`measure` (``embeddings``, ``probe``,
            ``attention_paths``, ``path_shares``).
    """

    def __init__(self, windows: object, tokens: object, *, vocab_size: int | None = None, probe: bool = True,
                 paths: bool = True, attention_windows: int = ATTENTION_WINDOWS, path_windows: int = PATH_WINDOWS,
                 n_labels: int | None = None, probe_steps: int = PROBE_STEPS, heldout_fraction: float = 0.25,
                 seed: int = SAMPLE_SEED):
        self.windows = _windows_array(windows)
        bound = int(self.windows.max()) + 1
        ids = as_array(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens, "tokens")
        if ids.dtype.kind in "iu" and ids.ndim == 1 and ids.size:
            bound = max(bound, int(ids.max()) + 1)
        self.tokens = check_id_subset(ids, bound, "tokens")
        if self.tokens.size < 4:
            raise InputError(f"tokens must hold at least 4 token ids (the probe holds out pairs), "
                             f"got {self.tokens.size}")
        self.probe, self.paths = bool(probe), bool(paths)
        self.probe_steps = int_in_range(probe_steps, "probe_steps", 0)
        self.seed = int_in_range(seed, "seed", 0)
        self.attention_windows = int_in_range(attention_windows, "attention_windows", 1)
        self.path_windows = int_in_range(path_windows, "path_windows", 1, self.attention_windows)
        self.vocab_size: int | None = None
        self._S_next: np.ndarray | None = None
        if vocab_size is not None:
            self._next_token_cosines(int_in_range(vocab_size, "vocab_size", 1))
        self.n_labels = 2 * self.tokens.size if n_labels is None else int_in_range(n_labels, "n_labels", 1)
        self._label_bound = bound
        self.labels: np.ndarray | None = None  # of the prefix signature, with it (phi_prefix)
        self._phi_prefix: np.ndarray | None = None
        if self.probe:
            fraction = positive_float(heldout_fraction, "heldout_fraction")
            self.train_idx, self.heldout_idx = analysis.token_split(self.tokens.size, fraction, self.seed)
        chosen = np.random.default_rng(self.seed).permutation(self.windows.shape[0])[: self.attention_windows]
        self.sample = chosen  # in the permutation's order, as analyze-model's sample
        self.skipped: str | None = None
        self.seconds: dict[str, float] = {}

    def settings(self) -> dict:
        """The monitor's settings and token set, JSON-ready (what the Trainer callback records)."""
        return {"windows": list(self.windows.shape), "tokens": self.tokens.tolist(), "vocab_size": self.vocab_size,
                "probe": self.probe, "paths": self.paths, "probe_steps": self.probe_steps, "seed": self.seed,
                "prefix_labels": self.n_labels if self.probe else None,
                "heldout_tokens": self.tokens[self.heldout_idx].tolist() if self.probe else [],
                "attention_windows": int(self.sample.size), "path_windows": min(self.path_windows, self.sample.size),
                "sample": self.sample.tolist()}

    def measure(self, model: torch.nn.Module, *, probe: bool | None = None,
                paths: bool | None = None) -> dict[str, float]:
        """The measurements of the module docstring for ``model`` in its current state.

        Args:
            model: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``), a
                :class:`~ctxstair.models.DecoderLM`, or any module with a ``W_E`` attribute (V, d)
                (a TransformerLens ``HookedTransformer``); wrapped in ``DistributedDataParallel``
                or ``torch.compile`` is fine. On any device, in any float dtype.
            probe, paths: take the probe / the path measures this time (default: the monitor's
                settings; True for a part the monitor was built without is an InputError).

        Returns:
            name -> float: ``rho_next``, ``rho_next_spearman`` (NaN when a cosine triangle is
            constant); with the probe: ``probe_heldout_mse``, ``probe_shuffled_mse``; with the
            paths and a Llama-family model: ``attention_path_corr/<ℓ>``, ``attention_path_null/<ℓ>``
            per layer and ``path_share/<path>`` (``embed``, ``attn.ℓ``, ``mlp.ℓ``). Other models
            get no path keys and :attr:`skipped` says why.
        """
        probe = self.probe if probe is None else bool(probe)
        paths = self.paths if paths is None else bool(paths)
        if probe and not self.probe:
            raise InputError("this monitor was built with probe=False: it has no prefix signatures to fit")
        start = time.perf_counter()
        with _one_blas_thread():
            with _reading(model):
                W_E, rows, decoder, why = _weights(model, self.tokens, paths)
            V = W_E.shape[0]
            if self.vocab_size not in (None, V):
                raise InputError(f"the model has {V} embedding rows, but this monitor's signatures are over "
                                 f"vocab_size={self.vocab_size}")
            if self.windows.max() >= V:
                raise InputError(f"the windows hold token id {self.windows.max()}, but the model has only {V} "
                                 "embedding rows")
            rho = analysis.rho_next_against(rows, self._next_token_cosines(V))  # the signature cosines kept
            values = {"rho_next": float(rho["pearson"][0]), "rho_next_spearman": float(rho["spearman"][0])}
            self.seconds = {"embeddings": time.perf_counter() - start}
            if probe:
                values.update(self._probe(rows))
            self.skipped = why if paths else None
            if decoder is not None:
                values.update(self._path_measures(decoder, V))
            return values

    def measure_at(self, model: torch.nn.Module, step: int, cadence: Cadence) -> dict[str, float] | None:
        """:meth:`measure` with the parts ``cadence`` asks for at ``step`` (and the monitor has); None
        when nothing is due at this step."""
        parts = cadence.parts(step)
        if parts is None:
            return None
        return self.measure(model, probe=self.probe and parts["probe"], paths=self.paths and parts["paths"])

    def log(self, writer: object, model: torch.nn.Module, step: int,
            cadence: Cadence | None = None) -> dict[str, float]:
        """Measure (SPEC §6.4, §7) and write each number as ``writer.add_scalar("staircase/<name>", value, step)``
        (a ``torch.utils.tensorboard.SummaryWriter``, tensorboardX, or anything with that method).

        With a :class:`Cadence`, only at its steps and only its parts (:meth:`measure_at`; call it
        after every optimizer step); without one, every part the monitor has, now. Returns what was
        written (``{}`` when nothing was due)."""
        values = self.measure(model) if cadence is None else self.measure_at(model, step, cadence) or {}
        for name, value in values.items():
            writer.add_scalar(KEY_PREFIX + name, value, step)
        return values

    def _next_token_cosines(self, V: int) -> np.ndarray:
        """S^next (k, k): the cosine matrix of the tokens' next-token signatures over V next tokens
        (:func:`~ctxstair.signatures.next_token_signature`), computed once."""
        if self._S_next is None:
            check_sequences(self.windows, V, "windows")
            self._S_next = signature_cosine(next_token_signature(self.windows, V, tokens=self.tokens))
            self.vocab_size = V
        return self._S_next

    @property
    def phi_prefix(self) -> np.ndarray:
        """φ^{y;1} (k, labels, k): the tokens' prefix signatures over :attr:`labels` and context ``tokens``
        (:func:`~ctxstair.signatures.prefix_signature`), counted on first use."""
        if self._phi_prefix is None:
            # The labels do not depend on V beyond the largest id (ids above it never occur).
            self.labels = analysis.prefix_labels(self.windows, self.tokens, self._label_bound, total=self.n_labels)
            self._phi_prefix = prefix_signature(self.windows, self.tokens, self.labels, self.tokens)
        return self._phi_prefix

    def _probe(self, rows: np.ndarray) -> dict[str, float]:
        """Held-out MSE of the prefix probe and of its shuffled control for embedding rows (k, d)."""
        start = time.perf_counter()
        args = dict(steps=self.probe_steps, seed=self.seed)
        probe = analysis.prefix_probe(self.phi_prefix, rows, self.train_idx, self.heldout_idx, **args)
        control = analysis.shuffled_baseline(self.phi_prefix, rows, self.train_idx, self.heldout_idx, **args)
        self.seconds["probe"] = time.perf_counter() - start
        return {"probe_heldout_mse": float(probe["heldout_mse"][0]),
                "probe_shuffled_mse": float(control["heldout_mse"][0])}

    def _path_measures(self, decoder, V: int) -> dict[str, float]:
        """Attention-path correlation and null per layer, and path shares, of a float32 CPU DecoderLM."""
        start = time.perf_counter()
        sample = self.windows[self.sample, : decoder.cfg.max_seq_len]
        values = {}
        for layer, corr, null in analysis.attention_path_scores(decoder, sample, self.tokens, V):
            values[f"attention_path_corr/{layer}"] = float(corr)
            values[f"attention_path_null/{layer}"] = float(null)
        self.seconds["attention_paths"] = time.perf_counter() - start
        start = time.perf_counter()
        shares = analysis.path_shares(decoder, sample[: self.path_windows], self.tokens)
        values.update({f"path_share/{name}": float(share) for name, share in shares.items()})
        self.seconds["path_shares"] = time.perf_counter() - start
        return values


@functools.cache
def _blas_pools() -> ThreadpoolController:
    """The BLAS libraries loaded in this process (numpy's and scipy's OpenBLAS), found once."""
    return ThreadpoolController()


def _one_blas_thread() -> contextlib.AbstractContextManager:
    """numpy and scipy on one BLAS thread while the monitor measures. After a multi-threaded call,
    OpenBLAS's worker threads keep spinning for a while and take the cores from the training's
    next step: on 2 cores that step took twice as long after each measurement
    (``benchmarks/RESULTS.md``). The monitor's arrays are small, so one thread costs it little;
    torch's own thread pool, which the path measures use, is left as it is."""
    return _blas_pools().limit(limits=1, user_api="blas")


def _windows_array(windows: object) -> np.ndarray:
    """``windows`` (numpy or torch, any device) as an int64 (n, T) array with T >= 2 and ids >= 0."""
    if isinstance(windows, torch.Tensor):
        windows = windows.detach().cpu().numpy()
    X = as_array(windows, "windows")
    if X.dtype.kind not in "iu" or X.ndim != 2:
        raise InputError(f"windows must be a 2-D integer array (n windows, T tokens), got {X.dtype} shape {X.shape}")
    if X.shape[0] < 1 or X.shape[1] < 2:
        raise InputError(f"windows must hold at least one window of T >= 2 tokens, got shape {X.shape}")
    if X.min() < 0:
        raise InputError(f"windows contain the negative token id {X.min()}")
    return X.astype(np.int64, copy=False)


def _unwrap(model: object) -> object:
    """The module inside ``DistributedDataParallel`` / ``DataParallel`` and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


@contextlib.contextmanager
def _reading(model: object) -> Iterator[None]:
    """Eval mode and ``torch.no_grad`` while the weights are read; every module's own training flag is
    restored afterwards (a model may keep frozen parts in eval mode)."""
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    flags = [module.training for module in modules]
    try:
        for module in modules:
            module.training = False
        with torch.no_grad():
            yield
    finally:
        for module, flag in zip(modules, flags):
            module.training = flag


def _weights(model: object, tokens: np.ndarray, paths: bool) -> tuple[torch.Tensor, np.ndarray, object, str | None]:
    """``(W_E, rows, decoder, why)``: the input-embedding matrix (V, d) as the model holds it, the rows
    of ``tokens`` as float64 numpy (k, d) (float32 values unless the model is float64, as
    ``analyze-model`` reads a checkpoint),
    and with ``paths`` a float32 CPU :class:`~ctxstair.models.DecoderLM` copy of the network, or None
    and why not."""
    from ctxstair.models import DecoderLM
    from ctxstair.models.decoder_hf import decoder_config_from_hf, from_hf_weights

    model = _unwrap(model)
    decoder, why = None, None
    if isinstance(model, DecoderLM):
        W_E = model.W_E
        if paths:
            decoder = DecoderLM(model.cfg)
            decoder.load_state_dict(_cpu_float32(model.state_dict()))
            decoder.eval()
    elif callable(getattr(model, "get_input_embeddings", None)) and hasattr(model, "config"):
        try:
            W_E = model.get_input_embeddings().weight
        except (AttributeError, NotImplementedError) as error:
            raise InputError(f"{type(model).__name__}.get_input_embeddings() gives no embedding weight: "
                             f"{error}") from None
        if paths:
            try:
                decoder_config_from_hf(model.config, pretrained=True)  # cheap: refuse before copying weights
                decoder = from_hf_weights(model.config, _cpu_float32(model.state_dict()))
            except InputError as error:
                why = f"{NEEDS_LLAMA}: {error}"
    elif getattr(model, "W_E", None) is not None:
        W_E = model.W_E
        why = f"{NEEDS_LLAMA}: {type(model).__name__} is neither a DecoderLM nor a Hugging Face Llama model"
    else:
        raise InputError(f"{type(model).__name__} has no input embeddings: pass a Hugging Face PreTrainedModel "
                         "(get_input_embeddings()), a ctxstair DecoderLM, or a module with a W_E attribute (V, d)")
    W_E = torch.as_tensor(W_E).detach()
    if W_E.ndim != 2 or not W_E.is_floating_point():
        raise InputError(f"the input embeddings must be a float matrix (V, d), got {W_E.dtype} "
                         f"shape {tuple(W_E.shape)}")
    if tokens.max() >= W_E.shape[0]:
        raise InputError(f"tokens hold id {tokens.max()}, but the model has only {W_E.shape[0]} embedding rows")
    rows = W_E[torch.from_numpy(tokens).to(W_E.device)].cpu()
    rows = (rows if rows.dtype == torch.float64 else rows.float()).numpy().astype(np.float64)
    return W_E, rows, decoder, why


def _cpu_float32(state: dict) -> dict:
    """A state dict's floating tensors as float32 CPU copies (integer buffers as they are, on the CPU)."""
    return {name: tensor.detach().to("cpu", torch.float32 if tensor.is_floating_point() else tensor.dtype)
            for name, tensor in state.items()}


def callback_schedule(monitor: StaircaseMonitor, log_points: int, every: int, paths_every: int | None,
                      probe_every: int | None) -> dict:
    """Check a training callback's monitor and cadence settings when the callback is built (not at
    the start of training) and return the settings, for ``Cadence(max_steps, **settings)``."""
    if not isinstance(monitor, StaircaseMonitor):
        raise InputError(f"monitor must be a StaircaseMonitor, got {type(monitor).__name__}")
    schedule = {"log_points": log_points, "every": every, "paths_every": paths_every, "probe_every": probe_every}
    Cadence(1, **schedule)
    return schedule
