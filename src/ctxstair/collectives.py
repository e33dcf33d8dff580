"""What every collective of ours (``torch.distributed`` over gloo) must do before its tensors are dropped.

gloo runs each collective on a worker thread of the process group, and that thread drops the work
— and with it the work's tensors — only after the collective has returned to the caller
(``ProcessGroupGloo::runLoop`` resets its work in progress after marking it complete). A tensor
made in Python whose last reference is the worker's is freed by the worker, which must take the GIL
to release its Python object. If the interpreter has begun to exit by then (a job whose last
collective is followed by ``destroy_process_group()`` and the end of the script), the worker is
ended by ``pthread_exit`` inside a ``noexcept`` destructor and the process aborts with "terminate
called without an active exception" (SIGABRT), which torchrun reports as a failed run although
every number was written. This is torch's (its c10d atexit fix was abandoned, pytorch/pytorch pull
request 179291). The library keeps its own side clean with :func:`let_go` after each of its
collectives, and :func:`end_process_group` frees what reference cycles still hold before it destroys
the group (docs/monitor.md, "Sharded training"). Collectives that torch's own Python code issues
(FSDP1's gathers and reduce-scatters, a Trainer's gathers of the loss) are beyond both: a job that
uses them can still abort at exit (seen once, in a two-process FSDP1 test job).
"""

from __future__ import annotations

import gc
import time

import torch

__all__ = ["end_process_group", "let_go"]


def let_go(tensor: torch.Tensor) -> None:
    """Wait, the GIL released, until gloo's worker thread has let go of ``tensor`` after a collective
    (module docstring). It normally takes microseconds and is capped at a second; NCCL tensors (on
    CUDA) are left as they were. A monitored two-process FSDP2 job aborted at exit in 7 of 60 runs
    without this wait, in 0 of 60 with it (tests/reliability/test_reliability_exit.py)."""
    deadline = time.monotonic() + 1.0
    while tensor.device.type == "cpu" and tensor._use_count() > 1 and time.monotonic() < deadline:
        time.sleep(1e-4)


def end_process_group() -> None:
    """Destroy the default process group after a garbage collection, so that whatever still holds
    the group in reference cycles (a DDP-wrapped model, a trainer and its callbacks) is freed while
    the interpreter is alive rather than at its exit, where freeing it can abort the process with the
    same message: a two-process ``lm train`` that destroyed its group without the collection aborted
    rank 1 in about one run in six. Call it on every rank, after the last collective; it
    waits for no other rank (precede it with ``torch.distributed.barrier()`` where the ranks must
    finish together)."""
    gc.collect()
    torch.distributed.destroy_process_group()

