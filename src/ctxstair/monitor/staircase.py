"""The staircase measurements of SPEC §6.4 and §7 on a model in memory, for any training loop.

:class:`StaircaseMonitor` holds the corpus side of the LM staircase measurement, a
:class:`~ctxstair.measure.staircase.StaircaseSetup` built once from a corpus sample — token windows
(n, T) and the tokens T to analyse (:func:`monitor_tokens`: the most frequent word-like ones) — or
from counts made elsewhere (:meth:`StaircaseMonitor.from_setup`). ``measure(model)`` reads the
model's weights (:func:`ctxstair.monitor.live.live_weights`) and returns the setup's rows in
the one schema of :mod:`ctxstair.measure.schema`, the numbers ``ctxstair analyze-model`` and the LM runs'
analysis compute, with the same code:

* ``rho_next``, ``rho_next_spearman`` — over V = the model's number of embedding rows;
* ``probe_heldout_mse``, ``probe_shuffled_mse`` — the prefix probe and its shuffled control;
* for a model with a view (:mod:`ctxstair.models.view`: a ``transformers`` model of a supported
  family): ``attention_path_corr/<layer>``,
  ``attention_path_null/<layer>`` and ``path_share/<path>`` on the setup's fixed sample of windows,
  computed on the model itself where it is, by hooks and autograd.

What the monitor touches in the training process, and nothing else: while it measures, numpy's and
scipy's BLAS run on one thread (:func:`_one_blas_thread`; OpenBLAS's spinning workers otherwise
slowed the next training step twice over on 2 cores) and the model is in eval mode under
``torch.no_grad`` with every module's training flag restored afterwards. Only the rows of T are
copied to the CPU for the embedding measures; the path measures run the model itself, on its
device and in its dtype, in eval mode (no dropout, so no random numbers drawn), with gradients taken
by ``torch.autograd.grad`` (never into ``.grad``) and eager attention for the pattern pass (the
model's setting restored). The weights never change, the training's random streams are not
touched, and torch's threads and deterministic-algorithms flag are left as the training set them.
So a model on CUDA works, and the training run with a monitor computes the same weights as without.
A model sharded across processes (FSDP2, FSDP1, DeepSpeed ZeRO-3) is gathered for the read by
collectives that every rank must join: every rank calls ``measure``, rank 0 gets the numbers, and
the path measures run on a float32 CPU copy built from the gathered state
(:mod:`ctxstair.monitor.live`).
"""

from __future__ import annotations

import contextlib
import functools
import time

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from ctxstair.checks import check_sequences, int_in_range
from ctxstair.errors import InputError
from ctxstair.measure import primitives
from ctxstair.measure.estimators import States
from ctxstair.measure.schema import LOG_PREFIX
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup, staircase_tokens
from ctxstair.models.view import view_of
from ctxstair.monitor import gather
from ctxstair.monitor.live import LiveWeights, evaluating, live_weights
from ctxstair.text.tokenizer import TextTokenizer
from ctxstair.train.schedule import snapshot_schedule

#: Default cadence of the callbacks (:func:`monitor_steps`): log-spaced steps up to ``EVERY``, then
#: every ``EVERY`` steps; see ``docs/monitor.md`` for what it costs.
LOG_POINTS = 24
EVERY = 250
#: Default stride of the path measures in :class:`Cadence` (the probe's default is never).
PATHS_EVERY = 1000


def monitor_tokens(tokenizer: object, windows: object, k: int = StaircaseSettings.k) -> np.ndarray:
    """The token set of SPEC §7: the ``k`` most frequent word-like tokens of ``windows``
    (:func:`ctxstair.measure.staircase.staircase_tokens`, the tokens ``ctxstair analyze-model`` and the LM
    runs pick).

    Args:
        tokenizer: a :class:`~ctxstair.text.tokenizer.TextTokenizer` or a ``transformers`` fast
            tokenizer (read through :meth:`TextTokenizer.from_transformers`).
        windows: int (n, T) token ids (numpy or torch).
        k: how many tokens, >= 4.

    Returns:
        int64 (k',) token ids, most frequent first; ``k' <= k``. InputError if fewer than 4 occur.
    """
    from ctxstair.measure.staircase import _windows_array

    text_tokenizer = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer.from_transformers(tokenizer)
    return staircase_tokens(_windows_array(windows), text_tokenizer, k)


def monitor_steps(max_steps: int, log_points: int = LOG_POINTS, every: int = EVERY) -> list[int]:
    """The steps to measure at (SPEC §7, over training) in a run of ``max_steps`` steps: 0 (the initialization),
    ``log_points`` log-spaced steps in ``1..every`` (rounded, duplicates dropped), every multiple of
    ``every`` and the last step — the LM runs' snapshot schedule
    (:func:`ctxstair.train.schedule.snapshot_schedule`).

    Returns:
        sorted list of ints in ``0..max_steps``.
    """
    max_steps = int_in_range("max_steps", max_steps, 1)
    log_points = int_in_range("log_points", log_points, 0)
    every = int_in_range("every", every, 1)
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
        log_points: as :func:`monitor_steps` (default 24).
        every: as :func:`monitor_steps` (default 250).
        paths_every: the path measures' stride, default 1000.
        probe_every: the probe's stride, default None (never: each probe measurement costs
            about a hundred training steps of a small model; the probe's curve comes afterwards from
            the saved checkpoints, with ``ctxstair analyze-model``, outside the training).
    """

    def __init__(self, max_steps: int, log_points: int = LOG_POINTS, every: int = EVERY,
                 paths_every: int | None = PATHS_EVERY, probe_every: int | None = None):
        self.max_steps = int_in_range("max_steps", max_steps, 1)
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
    return None if value is None else int_in_range(name, value, 1)


class StaircaseMonitor:
    """SPEC §6.4/§7 measurements of a model during training (module docstring).

    Args:
        windows: int (n, T) token ids, T >= 2 (numpy or torch): the corpus sample. The signatures
            are counted over all n windows; keep it the size you would give ``analyze-model``
            (e.g. 2,000 windows of 128 tokens: the prefix signatures take a few seconds).
        tokens: int (k,) distinct token ids to analyse, k >= 4 (:func:`monitor_tokens`).
        vocab_size: V, when known: the next-token signature is then computed now; otherwise at the
            first :meth:`measure`, over the model's number of embedding rows.
        probe: measure the prefix probe and its shuffled control (the most expensive part: two
            fits of ``probe_steps`` Adam steps on arrays of k · labels · k entries). Its prefix
            signatures (k · labels · k float64: 320 MB at k = 200 and 1000 labels) are counted at
            the first probe measurement, so a monitor whose cadence never asks for the probe never
            builds them.
        paths: measure the attention paths and path shares (models with a view only).
        **settings: the :class:`~ctxstair.measure.staircase.StaircaseSettings` of the measurement, with
            its defaults (the same as ``analyze-model`` and the LM runs): ``attention_windows`` (the first
            windows of a permutation of all windows seeded with ``seed``, each cut to the model's
            ``max_seq_len``), ``path_windows`` (the first of them, for the path shares, which cost
            2L + 1 backward passes for L layers), ``prefix_labels``, ``probe_steps``,
            ``heldout_fraction``, ``seed``.

    Attributes:
        setup: the :class:`~ctxstair.measure.staircase.StaircaseSetup`.
        skipped: why the path measures were not taken at the last :meth:`measure` (None when they
            were, or were switched off).
        seconds: wall time of each part of the last :meth:`measure` (``embeddings``, ``probe``,
            ``paths``); on a rank other than 0 of a model sharded by FSDP2 or ZeRO-3, ``paths`` is the
            time it spent counting its share of the attention paths.
    """

    def __init__(self, windows: object, tokens: object, *, vocab_size: int | None = None, probe: bool = True,
                 paths: bool = True, **settings):
        settings = StaircaseSettings(**{**settings, "probe": bool(probe), "paths": bool(paths)})
        self._attach(StaircaseSetup.from_windows(windows, None, settings, vocab_size=vocab_size, tokens=tokens))

    @classmethod
    def from_setup(cls, setup: StaircaseSetup) -> StaircaseMonitor:
        """A monitor on a setup already built (e.g. from counts made elsewhere,
        :meth:`~ctxstair.measure.staircase.StaircaseSetup.from_counts`)."""
        monitor = cls.__new__(cls)
        monitor._attach(setup)
        return monitor

    @classmethod
    def from_stats(cls, stats: object, tokenizer: object = None, *, vocab_size: int | None = None,
                   probe: bool = True, paths: bool = True, **settings) -> StaircaseMonitor:
        """A monitor on a statistics directory (``ctxstair corpus count``, a
        :class:`~ctxstair.corpus.CorpusStats` or its path) instead of windows in memory: the same
        numbers as a monitor on those windows. ``tokenizer`` names the tokens and must be the one
        the statistics were counted with; ``vocab_size``: the model's embedding rows (default the
        statistics'); ``settings``: fields of :class:`~ctxstair.measure.staircase.StaircaseSettings`."""
        chosen = StaircaseSettings(probe=probe, paths=paths, **settings)
        return cls.from_setup(StaircaseSetup.from_stats(stats, chosen, tokenizer=tokenizer, vocab_size=vocab_size))

    def _attach(self, setup: StaircaseSetup) -> None:
        self.setup = setup
        self.tokens = setup.tokens
        self.probe, self.paths = setup.settings.probe, setup.settings.paths
        self.skipped: str | None = None
        self.seconds: dict[str, float] = {}

    def settings(self) -> dict:
        """The monitor's setup (:meth:`~ctxstair.measure.staircase.StaircaseSetup.record`), JSON-ready (what the
        Trainer callback records)."""
        return self.setup.record()

    def measure(self, model: torch.nn.Module, *, probe: bool | None = None, paths: bool | None = None,
                root: torch.nn.Module | None = None) -> dict[str, float]:
        """The measurements of the module docstring for ``model`` in its current state.

        Args:
            model: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``) or any module
                with a ``W_E`` attribute (V, d)
                (a TransformerLens ``HookedTransformer``); wrapped in ``DistributedDataParallel``
                or ``torch.compile`` is fine. On any device, in any float dtype. Sharded by FSDP2
                (``fully_shard``), FSDP1 (``FullyShardedDataParallel``: pass the wrapper it returned,
                or the network inside with ``root=``) or DeepSpeed ZeRO-3: every rank must call
                ``measure`` at the same steps (the weights it reads are gathered by collectives that
                every rank joins), and only rank 0 gets the numbers; the others get ``{}``.
            probe: take the probe this time (default: the monitor's setting; True for a monitor
                built without it is an InputError).
            paths: take the path measures this time (the same way).
            root: the FSDP1 ``FullyShardedDataParallel`` root that holds ``model`` (the callbacks
                pass the training's wrapper); anything else given here is ignored.

        Returns:
            name -> float (the schema of :mod:`ctxstair.measure.schema`): ``rho_next``,
            ``rho_next_spearman`` (NaN when a cosine triangle is constant); with the probe:
            ``probe_heldout_mse``, ``probe_shuffled_mse``; with the paths and a model with a view:
            ``attention_path_corr/<ℓ>``, ``attention_path_null/<ℓ>`` per layer and ``path_share/<path>``
            (``embed``, ``attn.ℓ``, ``mlp.ℓ``). Other models get no path keys and :attr:`skipped`
            says why. ``{}`` on every rank but 0 of a sharded model.
        """
        probe = self.probe if probe is None else bool(probe)
        paths = self.paths if paths is None else bool(paths)
        if probe and not self.probe:
            raise InputError("this monitor was built with probe=False: it has no prefix signatures to fit")
        start = time.perf_counter()
        with _one_blas_thread(), evaluating(model):  # the whole measurement in eval mode: no dropout
            with torch.no_grad():
                read = live_weights(model, self.tokens, paths, root)
            seconds = {"embeddings": time.perf_counter() - start}
            start, counts = time.perf_counter(), None
            if read is not None and read.shared:
                counts = self._shared_path_counts(read)
                seconds["paths"] = time.perf_counter() - start
            measures = gather.measuring()
            self.skipped, self.seconds = (read.why if paths else None) if measures and read else None, seconds
            if read is None or read.rows is None:  # a rank other than 0: it took part in any gather and
                return {}                          # counted its share of the paths; rank 0 measures
            # Under FSDP2 the network is the sharded model itself: every rank runs the path measures,
            # whose passes and reads are collectives; the probe, which reads rows only, is rank 0's.
            states = States(read.V, read.rows[None], model=lambda i: read.decoder, counts=lambda i: counts)
            (values,) = self.setup.measure(states, probe=probe and measures, paths=paths, seconds=seconds)
            return values if measures else {}

    def _shared_path_counts(self, read: LiveWeights) -> np.ndarray:
        """The attention-path counts of a sharded model's path sample, each rank counting its share
        of the windows' chunks on the network it holds (``read.shared``); every rank gets the sum.
        Every rank calls."""
        network, V = read.decoder, read.V
        view = view_of(network)
        sample = self.setup.path_sample(view.positions)
        gather.same_on_every_rank(sample, "attention-path windows")
        check_sequences(sample, V, "the window sample")
        parts = path_parts(sample, primitives.pattern_windows(view, sample.shape[1]),
                           torch.distributed.get_world_size())

        def join() -> None:  # the forward pass of a model sharded by FSDP2 is a collective
            view.attention_pattern(torch.from_numpy(parts[0]).to(view.embedding.device), average_heads=True)

        return gather.summed_over_ranks(lambda part: primitives.attention_path_counts(network, part, self.tokens, V),
                                        parts, (view.n_layers, self.tokens.size, V + 1),
                                        idle=join if read.collective else None)

    def measure_at(self, model: torch.nn.Module, step: int, cadence: Cadence,
                   root: torch.nn.Module | None = None) -> dict[str, float] | None:
        """:meth:`measure` with the parts ``cadence`` asks for at ``step`` (and the monitor has); None
        when nothing is due at this step — then the model is not looked at, so a sharded model
        gathers nothing."""
        parts = cadence.parts(step)
        if parts is None:
            return None
        return self.measure(model, probe=self.probe and parts["probe"], paths=self.paths and parts["paths"],
                            root=root)

    def log(self, writer: object, model: torch.nn.Module, step: int,
            cadence: Cadence | None = None) -> dict[str, float]:
        """Measure (SPEC §6.4, §7) and write each number as ``writer.add_scalar("staircase/<name>", value, step)``
        (a ``torch.utils.tensorboard.SummaryWriter``, tensorboardX, or anything with that method).

        With a :class:`Cadence`, only at its steps and only its parts (:meth:`measure_at`; call it
        after every optimizer step); without one, every part the monitor has, now. Returns what was
        written (``{}`` when nothing was due). A sharded model: call it on every rank; only rank 0
        writes (the others may pass ``writer=None``)."""
        values = self.measure(model) if cadence is None else self.measure_at(model, step, cadence) or {}
        for name, value in values.items():
            writer.add_scalar(LOG_PREFIX + name, value, step)
        return values


def path_parts(sample: np.ndarray, chunk: int, world: int) -> list[np.ndarray]:
    """The windows (n, T) of the path sample cut into consecutive parts for ``world`` ranks to count:
    at most ``chunk`` windows each (one forward pass), and as many parts as ranks where there are as
    many windows, so that no rank waits while another counts the whole sample."""
    size = max(1, min(chunk, -(-len(sample) // world)))
    return [sample[first:first + size] for first in range(0, len(sample), size)]


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


def callback_schedule(monitor: StaircaseMonitor, log_points: int, every: int, paths_every: int | None,
                      probe_every: int | None) -> dict:
    """Check a training callback's monitor and cadence settings when the callback is built (not at
    the start of training) and return the settings, for ``Cadence(max_steps, **settings)``."""
    if not isinstance(monitor, StaircaseMonitor):
        raise InputError(f"monitor must be a StaircaseMonitor, got {type(monitor).__name__}")
    schedule = {"log_points": log_points, "every": every, "paths_every": paths_every, "probe_every": probe_every}
    Cadence(1, **schedule)
    return schedule
