"""Executors: who counts the units of a corpus count (:func:`ctxstair.corpus.units.count_unit`).

* local processes (the default): ``workers = 1`` counts in this process; more start that many
  worker processes (``spawn``, so a host's threads and locks are never forked);
* Ray: ``ray="local"`` starts a Ray instance on this machine, ``ray="auto"`` joins the cluster
  started with ``ray start`` (Ray's own rule for ``address="auto"``), any other value is the
  cluster's address; a process that already called ``ray.init`` is used as it is.

Local workers write each unit's file into the work folder themselves (a unit's dense counts, about
240 MB at the defaults, took about a second to pass through a pipe, during which the parent did
nothing else); Ray workers return the arrays through Ray's object store and this process writes
them, so a cluster needs the sources readable at the same paths on every node, but no shared output
folder. Units finish in any order; the sum does not depend on it.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from ctxstair.corpus.units import Job, Unit, count_and_save, count_unit, save_unit
from ctxstair.errors import InputError

Done = Callable[[Unit], None]


class Executor:
    """Counts units, in this process, on local worker processes or on Ray (module docstring); a
    context manager, so that the worker processes start once for all the passes of a count (a spawned
    worker takes about a third of a second to import numpy, numba and ctxstair) and stop at its end.

    Args:
        workers: local processes (1: this process); ray: a Ray address (``local``, ``auto`` or an
            address), instead of local processes.
    """

    def __init__(self, workers: int = 1, ray: str | None = None):
        self.workers, self.ray, self._pool = workers, ray, None
        self._closing: list[threading.Thread] = []

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        for closing in self._closing:
            closing.join()
        self._closing = []

    def release(self) -> None:
        """Let the local worker processes go once the count's passes are done: they are shut down in a
        thread, so that they exit (≈ 0.2 s, and the memory they hold) while this process writes the
        statistics; leaving the block waits for them. A later pass would start new ones."""
        if self._pool is not None:
            self._closing.append(threading.Thread(target=self._pool.shutdown, kwargs={"cancel_futures": True}))
            self._closing[-1].start()
            self._pool = None

    def start(self) -> None:
        """Start the local worker processes now, without waiting for them (they import numpy, numba
        and ctxstair, about a third of a second, while this process goes on: it hashes the sources
        meanwhile); nothing for one worker or Ray."""
        if self.ray is None and self.workers > 1 and self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker)
            for _ in range(self.workers):  # the pool spawns a process per task submitted while none is idle
                self._pool.submit(int)

    def run(self, job: Job, units: Iterable[Unit], work: Path, done: Done) -> None:
        """Count every unit of ``units`` into its file in ``work``
        (:func:`~ctxstair.corpus.units.save_unit`) and call ``done(unit)`` once that file is written."""
        units = list(units)
        if not units:
            return
        if self.ray is not None:
            _run_ray(job, units, work, done, self.ray)
        elif self.workers == 1:
            for unit in units:
                count_and_save(job, unit, str(work))
                done(unit)
        else:
            self._run_processes(job, units, work, done)

    def _run_processes(self, job: Job, units: list[Unit], work: Path, done: Done) -> None:
        self.start()  # when not started yet
        pending = {self._pool.submit(count_and_save, job, unit, str(work)): unit for unit in units}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    unit = pending.pop(future)
                    future.result()  # a worker's error is raised here
                    done(unit)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _start_worker() -> None:
    """Worker processes count with one BLAS thread each (the workers are the parallelism), and import
    the compiled counting loops before their first unit arrives."""
    from threadpoolctl import threadpool_limits

    import ctxstair.signatures.kernels  # noqa: F401  (numba's import, ≈ 0.3 s, while the parent hashes)

    threadpool_limits(1)


def _run_ray(job: Job, units: list[Unit], work: Path, done: Done, address: str) -> None:
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'ctxstair[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    remote = ray.remote(num_cpus=1)(count_unit)
    job_ref = ray.put(job)
    pending = {remote.remote(job_ref, unit): unit for unit in units}
    try:
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                unit = pending.pop(ref)
                try:
                    arrays = ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    cause = getattr(error, "cause", None)
                    raise (cause if isinstance(cause, InputError) else error) from None
                save_unit(work, unit, arrays)
                done(unit)
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        raise
