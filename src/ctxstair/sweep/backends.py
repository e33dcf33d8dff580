"""Where the cells of a sweep run: ``local`` (a process pool on this machine) or
``ray`` (one Ray task per cell, on a local Ray instance or a cluster).

Both call ``done(i, ...)`` in the driver as each cell finishes, so finished cells are kept when a
later one fails or the sweep is interrupted. ``local`` workers write their cell straight into the
sweep directory; a Ray task trains into a temporary directory on whichever node runs it and returns
the cell as an in-memory tar archive that the driver unpacks, so a cluster needs no shared file
system — only ctxstair installed in the same version on every node.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import tarfile
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxstair.errors import InputError
from ctxstair.sweep.cells import CellJob, run_cell

RAY_INSTALL = "pip install 'ctxstair[ray]'"


def run_local(jobs: list[CellJob], workers: int, done: Callable[[int], None]) -> None:
    """Run ``jobs`` in a pool of ``workers`` processes (in this process when ``workers`` is 1).

    Workers are spawned, not forked: a fork of a process whose torch has started its thread pool
    can hang. The first error stops the sweep: queued cells are cancelled, running ones finish."""
    if workers == 1:
        for i, job in enumerate(jobs):
            run_cell(job)
            done(i)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_die_with_parent) as pool:
        futures = {pool.submit(run_cell, job): i for i, job in enumerate(jobs)}
        try:
            for future in as_completed(futures):
                future.result()
                done(futures[future])
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _die_with_parent() -> None:
    """Pool worker set-up: on Linux, ask the kernel to kill this worker when the sweep process dies
    (even by SIGKILL), so that an orphan never goes on writing a cell that ``--resume`` continues."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the request was made
            os._exit(1)


def import_ray() -> Any:
    """The ``ray`` module; InputError with the install command when it is missing."""
    try:
        import ray
    except ImportError:
        raise InputError(f"--backend ray needs Ray, which is not installed; install it with: {RAY_INSTALL}") from None
    return ray


def run_ray(jobs: list[CellJob], workers: int, address: str | None, done: Callable[[int, bytes], None]) -> None:
    """Run each job as a Ray task needing ``job.threads`` CPUs; ``done(i, archive)`` gets the cell's
    files as a tar archive (:func:`unpack_cell`).

    Connects to ``address`` (or ``RAY_ADDRESS``) when given; otherwise, unless Ray is already
    initialised (as the tests do with ``ray.init(num_cpus=2)``), starts a local instance with
    ``workers`` CPUs and shuts it down at the end."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        local = address is None and "RAY_ADDRESS" not in os.environ
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({"num_cpus": workers} if local else {}))
    try:
        pending = {ray.remote(num_cpus=job.threads)(_cell_archive).remote(job): i for i, job in enumerate(jobs)}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            done(pending.pop(ready[0]), ray.get(ready[0]))
    finally:
        if started:
            ray.shutdown()


def _cell_archive(job: CellJob) -> bytes:
    """Train one cell in a temporary directory and return it as an uncompressed tar archive."""
    with tempfile.TemporaryDirectory(prefix="ctxstair-cell-") as tmp:
        cell = Path(tmp) / "cell"
        run_cell(replace(job, out=str(cell)))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(cell, arcname=".")
        return buffer.getvalue()


def unpack_cell(archive: bytes, target: Path) -> None:
    """Unpack a cell archive of :func:`run_ray` into ``target`` (which must not exist), refusing
    members that would land outside it or are not plain files and folders."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        for member in tar.getmembers():
            path = (target / member.name).resolve()
            if not (member.isfile() or member.isdir()) or not path.is_relative_to(target.resolve()):
                raise InputError(f"a cell archive holds an unexpected entry {member.name!r}")
        # The data filter (Python >= 3.10.12 / 3.11.4) also drops permissions and owners from the archive.
        tar.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
