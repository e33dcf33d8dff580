"""Executors: who counts the units of a corpus count (:func:`ctxstair.corpus.units.count_unit`).

* local processes (the default): ``workers = 1`` counts in this process; more start that many
  worker processes (``spawn``, so a host's threads and locks are never forked);
* Ray: ``ray="local"`` starts a Ray instance on this machine, ``ray="auto"`` joins the cluster
  started with ``ray start`` (Ray's own rule for ``address="auto"``), any other value is the
  cluster's address; a process that already called ``ray.init`` is used as it is.

Workers return each unit's arrays to this process (over a pipe or Ray's object store), which
writes them; so a cluster needs the sources readable at the same paths on every node, but no
shared output folder. Results arrive in completion order; the sum does not depend on it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import numpy as np

from ctxstair.corpus.units import Job, Unit, count_unit
from ctxstair.errors import InputError

Done = Callable[[Unit, dict[str, np.ndarray]], None]


def run_units(job: Job, units: Iterable[Unit], done: Done, *, workers: int = 1, ray: str | None = None) -> None:
    """Count every unit of ``units`` and hand each result to ``done(unit, arrays)`` as it arrives."""
    units = list(units)
    if not units:
        return
    if ray is not None:
        _run_ray(job, units, done, ray)
    elif workers == 1:
        for unit in units:
            done(unit, count_unit(job, unit))
    else:
        _run_processes(job, units, done, workers)


def _limit_threads() -> None:
    """Worker processes count with one BLAS thread each: the workers are the parallelism."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def _run_processes(job: Job, units: list[Unit], done: Done, workers: int) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(units)), mp_context=context,
                             initializer=_limit_threads) as pool:
        pending = {pool.submit(count_unit, job, unit): unit for unit in units}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    done(pending.pop(future), future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _run_ray(job: Job, units: list[Unit], done: Done, address: str) -> None:
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
                done(unit, arrays)
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        raise
