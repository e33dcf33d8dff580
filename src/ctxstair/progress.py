"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines in a log file.

Every long command (``ctxstair run``, ``lm train``, ``analyze-model``, ``corpus count``, ``corpus
tokenize``, ``sweep``, and the analysis after training) reports through :class:`Progress`, and only
inside :func:`shown`, which the command line opens around every command that has ``--quiet``
(docs/reliability.md, "Progress"). Outside it — the Python API, the monitor inside someone else's
training — nothing is printed unless a caller asks (``shown()``, or ``progress=True`` where a
function takes it).

Where stderr is a terminal the bar is tqdm's. Where it is not (a cluster job's log file), a line
such as ``staircase-add: training: 45% (450/1000 epoch), 9.41 epoch/s, 00:37 elapsed, 00:58 left``
is written at most every :data:`INTERVAL` seconds (``CTXSTAIR_PROGRESS_SECONDS`` overrides it),
counted over the whole command so that a series of short stages still shows one line per interval,
and a last line when a stage that printed finishes. The rate is the average since the stage started
(resumed work excluded), the time left the rest at that rate. Progress only prints: it never touches
a file or a random number, so outputs stay bitwise the same whether it is shown or not.

    with progress.Progress(total=epochs, desc="training", unit="epoch") as bar:
        for epoch in range(epochs):
            ...
            bar.update(1)
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

#: Seconds between two plain lines (a log file); a terminal gets tqdm's live bar instead.
INTERVAL = 30.0
#: The environment variable that sets the interval (seconds, >= 0; tests use 0: a line at every update).
INTERVAL_VARIABLE = "CTXSTAIR_PROGRESS_SECONDS"
#: One plain line: what, percent, counts, rate, elapsed and left, then the stage's own numbers.
LINE_FORMAT = "{desc}: {percentage:.0f}% ({n_fmt}/{total_fmt} {unit}), {rate_fmt}, {elapsed} elapsed, " \
              "{remaining} left{postfix}"


@dataclass
class _Reporting:
    """What is shared by the stages of one command: the interval and when the last line was written."""

    interval: float
    last_line: float = field(default_factory=lambda: time.monotonic())


_reporting: contextvars.ContextVar[_Reporting | None] = contextvars.ContextVar("ctxstair_progress", default=None)


def interval() -> float:
    """The seconds between plain lines: ``CTXSTAIR_PROGRESS_SECONDS`` when set, else :data:`INTERVAL`."""
    value = os.environ.get(INTERVAL_VARIABLE)
    try:
        return max(0.0, float(value)) if value else INTERVAL
    except ValueError:
        return INTERVAL


@contextlib.contextmanager
def shown(enabled: bool = True) -> Iterator[None]:
    """Within this block, every :class:`Progress` whose ``show`` is None reports on stderr (``enabled``
    False: nothing does, as outside any block). The ``ctxstair`` command opens it around a command
    unless ``--quiet``; a script may open it around its own calls."""
    token = _reporting.set(_Reporting(interval()) if enabled else None)
    try:
        yield
    finally:
        _reporting.reset(token)


class Progress:
    """Progress of one stage of ``total`` units on stderr (module docstring), or nothing.

    Args:
        total: units of the whole stage (epochs, steps, tokens, cells, ...).
        desc: what is progressing, the start of every line.
        unit: the unit's name; unit_scale: write large counts as 4.50M (tokens, bytes).
        initial: units already done before (a resumed run), left out of the rate.
        show: True or False to decide here; None (default) follows :func:`shown`.
    """

    def __init__(self, total: int, desc: str, unit: str = "it", *, initial: int = 0, unit_scale: bool = False,
                 show: bool | None = None):
        self.total, self.desc, self.unit, self.unit_scale = int(total), desc, unit, unit_scale
        self.n = self.initial = int(initial)
        self.postfix, self.printed_at, self.bar = "", None, None  # printed_at: the count of its last line
        self.reporting = _reporting.get() if show is None else (_Reporting(interval()) if show else None)
        self.started = time.monotonic()
        if self.reporting is not None and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=self.initial, desc=desc, unit=unit, unit_scale=unit_scale,
                            file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int = 1, *, done_before: bool = False) -> None:
        """``n`` more units are done; ``done_before``: they were done by an earlier run (read back), so
        they do not count in the rate."""
        if self.reporting is None:
            return
        self.n += n
        if done_before:
            self.initial += n
        if self.bar is not None:
            self.bar.update(n)
        elif time.monotonic() - self.reporting.last_line >= self.reporting.interval:
            self._line()

    def set_postfix(self, **numbers: object) -> None:
        """Numbers of the stage shown after the rate (``loss=0.0123``), as given."""
        if self.reporting is None:
            return
        self.postfix = ", ".join(f"{key}={value}" for key, value in numbers.items())
        if self.bar is not None:
            self.bar.set_postfix_str(self.postfix, refresh=False)

    def close(self, finished: bool = True) -> None:
        """End the stage: a terminal's bar is closed; in a log, a stage that wrote a line writes its
        last one when ``finished`` and it has moved since (not after an error, whose one line stays
        the last)."""
        if self.bar is not None:
            self.bar.close()
        elif self.printed_at not in (None, self.n) and finished:
            self._line()
        self.reporting = None

    def line(self) -> str:
        """The plain line of the stage now (:data:`LINE_FORMAT`)."""
        from tqdm import tqdm

        text = tqdm.format_meter(self.n, self.total, time.monotonic() - self.started, prefix=self.desc,
                                 unit=self.unit, unit_scale=self.unit_scale, initial=self.initial,
                                 postfix=self.postfix or None, bar_format=LINE_FORMAT)
        return " ".join(text.split())

    def _line(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)
        self.printed_at = self.n
        self.reporting.last_line = time.monotonic()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close(finished=kind is None)
