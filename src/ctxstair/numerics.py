"""Floating-point set-up of the process: which threads and CPU code paths the math libraries use.

Two promises rest on it (docs/reliability.md, "Same numbers"):

* **Within one machine, always**: the same command gives byte-identical files, also under load and
  across kill-and-resume. The thread count is fixed for the whole process (``CTXSTAIR_THREADS``,
  else ``OMP_NUM_THREADS``, else the usable cores), dynamic threading is off (MKL and OpenMP may
  otherwise shrink a team when the machine is busy), MKL runs in conditional-numerical-
  reproducibility mode ``AUTO``, whose results do not depend on how an array happens to be aligned
  in memory (two processes lay out the same tensors differently), and torch uses its deterministic
  kernels (the CPU backward of advanced indexing otherwise accumulates with atomics in thread
  order: the attention ensemble's gradients differed between repeated identical calls under load).
* **Across machines, in reproducible mode** (``CTXSTAIR_REPRODUCIBLE=1`` or ``--reproducible``):
  every library that picks a code path from the CPU is pinned to one that all x86-64 CPUs with AVX2
  run identically: MKL's ``COMPATIBLE`` branch (the only one that MKL keeps identical on Intel and
  on AMD processors: asked for ``AVX2`` on an AMD CPU it falls back to ``AUTO``), ATen's ``avx2``
  kernels, oneDNN up to AVX2, OpenBLAS's ``Haswell`` kernels and numpy's AVX2 loops; and the thread
  count is 2 unless ``CTXSTAIR_THREADS`` says otherwise, since parallel reductions split their sums
  by thread and the core count differs between machines. Its cost is in benchmarks/RESULTS.md.

The libraries read these settings when they load, so :func:`configure` must run before numpy or
torch is imported: the ``ctxstair`` command calls it first thing (it sees ``--reproducible`` before
it imports anything numerical), and so should a notebook or script that wants these promises
(``from ctxstair import numerics; numerics.configure()`` at its top). Importing ctxstair never
calls it: a library that runs inside someone else's training (the monitor) must not change that
process's threads, determinism or environment. The trainers and the run analyses call
:func:`apply_to_torch` when they start, so a run made from Python still gets fixed threads and
deterministic kernels. This module imports neither library.
No SPEC section: this is the engineering under every number the SPEC's experiments produce.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from pathlib import Path

from ctxstair.errors import InputError

REPRODUCIBLE_VARIABLE = "CTXSTAIR_REPRODUCIBLE"
THREADS_VARIABLE = "CTXSTAIR_THREADS"
#: Thread count of reproducible mode when ``CTXSTAIR_THREADS`` is not set: the same on every machine.
REPRODUCIBLE_THREADS = 2

#: Always: fixed thread teams.
_ALWAYS = {"MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}
#: cuBLAS needs a fixed workspace to be deterministic (PyTorch's reproducibility notes); kept if set.
_DEFAULT_EVERYWHERE = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
#: Default mode: MKL results that do not depend on memory alignment (a user's own MKL_CBWR is kept).
_DEFAULT_MODE = {"MKL_CBWR": "AUTO"}
#: Reproducible mode overrides whatever the environment says about code paths.
_REPRODUCIBLE_MODE = {
    "MKL_CBWR": "COMPATIBLE",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    # numpy >= 2.4 names its AVX-512 groups X86_V4, AVX512_ICL, AVX512_SPR; older ones the rest
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_KNL AVX512_KNM "
                                "AVX512_SKX AVX512_CLX AVX512_CNL",
}
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_NUMERICAL_LIBRARIES = ("numpy", "torch", "scipy")

_state: dict = {}


def configure(reproducible: bool | None = None) -> dict:
    """Fix the thread count and the floating-point code paths of this process; return
    :func:`settings`. ``reproducible=None`` reads ``CTXSTAIR_REPRODUCIBLE`` (``1``/``true``/``yes``).

    Idempotent; reproducible mode, once on, stays on. Switching to it after numpy or torch has
    loaded raises InputError, since their code paths are already chosen, unless the environment
    already holds every pin of the mode (a worker process started by a reproducible parent inherits
    them, and its libraries loaded with them). If torch was imported
    first, its threads and MKL's dynamic threading are still fixed, but MKL's alignment-independent
    mode is not (MKL read its variables when torch loaded); :func:`settings` says so. Sets the
    variables in ``os.environ``, so child processes (sweep workers, torchrun ranks) inherit the
    same mode and thread count."""
    if reproducible is None:
        reproducible = _flag(os.environ.get(REPRODUCIBLE_VARIABLE, ""))
    reproducible = reproducible or _state.get("reproducible", False)  # once on, it stays on
    if reproducible and not _state.get("reproducible"):
        loaded = [name for name in _NUMERICAL_LIBRARIES if name in sys.modules]
        inherited = all(os.environ.get(name) == value for name, value in _REPRODUCIBLE_MODE.items())
        if loaded and not inherited:
            raise InputError(f"reproducible mode must be chosen before {', '.join(loaded)} loads: set "
                             f"{REPRODUCIBLE_VARIABLE}=1 in the environment, or import ctxstair first")
        machine = platform.machine().lower()
        if machine not in ("x86_64", "amd64"):
            raise InputError(f"reproducible mode pins x86-64 code paths; this machine is {machine}")
    threads = _thread_count(reproducible)
    _state.setdefault("torch_first", "torch" in sys.modules)
    environment = {**_ALWAYS, **(_REPRODUCIBLE_MODE if reproducible else {})}
    environment.update({name: str(threads) for name in _THREAD_VARIABLES})
    os.environ.update(environment)
    if reproducible:
        os.environ[REPRODUCIBLE_VARIABLE] = "1"
    for name, value in {**_DEFAULT_EVERYWHERE, **({} if reproducible else _DEFAULT_MODE)}.items():
        os.environ.setdefault(name, value)
    _state.update(reproducible=bool(reproducible), threads=threads)
    if "torch" in sys.modules:  # loaded before this call: its pool was sized from the old settings
        apply_to_torch()
    return settings()


def add_reproducible_option(parser) -> None:
    """Add ``--reproducible`` to a command that computes (an ``argparse`` parser)."""
    parser.add_argument("--reproducible", action="store_true",
                        help=f"pin the CPU code paths so that any x86-64 CPU with AVX2 gives byte-identical "
                             f"files (slower; same as {REPRODUCIBLE_VARIABLE}=1)")


def apply_to_torch() -> None:
    """The first time: give torch the configured thread count (later calls leave a deliberate
    ``torch.set_num_threads``, e.g. a sweep worker's share of the cores, alone), turn on torch's
    deterministic algorithms (warning only where none exists), and if torch was
    loaded before :func:`configure` ran, turn MKL's dynamic threading off through MKL's own service call (MKL
    read ``MKL_DYNAMIC`` when torch loaded). In reproducible mode, check that torch runs the AVX2
    kernels: InputError on a CPU without AVX2."""
    import torch

    if "threads" not in _state:
        configure()
    if not _state.get("torch_threads_set"):
        torch.set_num_threads(_state["threads"])
        # Deterministic kernels where torch has a choice: on the CPU, the backward of advanced
        # indexing (index_put_ with accumulate) otherwise adds with atomics from several threads in
        # whatever order they run. warn_only: an op without a deterministic kernel (some CUDA ones)
        # warns instead of stopping a run.
        torch.use_deterministic_algorithms(True, warn_only=True)
        if _state["torch_first"]:
            _mkl_dynamic_off(torch)
        _state["torch_threads_set"] = True
    capability = torch.backends.cpu.get_cpu_capability()
    if _state["reproducible"] and capability != "AVX2":
        raise InputError(f"reproducible mode needs a CPU with AVX2; torch runs its {capability} kernels here")


def settings() -> dict:
    """What a run records in ``resources.json``: ``mode`` ('default' or 'reproducible'),
    ``threads``, ``cpu`` (the processor's model name), and, for each library already loaded, its
    BLAS and CPU code path (``torch_blas``, ``torch_cpu_capability``, ``numpy_blas``)."""
    if "threads" not in _state:
        configure()
    cbwr = "unset: torch was loaded before numerics.configure()" if _state["torch_first"] else \
        os.environ.get("MKL_CBWR", "")
    record = {"mode": "reproducible" if _state["reproducible"] else "default", "threads": _state["threads"],
              "cpu": cpu_model(), "mkl_cbwr": cbwr}
    if "torch" in sys.modules:
        import torch

        record["threads"] = torch.get_num_threads()  # a sweep worker runs with its share of the cores
        record["torch_blas"] = _torch_blas(torch)
        record["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if "numpy" in sys.modules:
        record["numpy_blas"] = _numpy_blas()
    return record


def describe(record: dict) -> str:
    """One sentence for a report: the mode, threads, CPU, BLAS and code path of ``record``
    (a :func:`settings` dict, as read back from ``resources.json``)."""
    parts = [f"{record.get('mode', 'default')} floating-point mode", f"{record.get('threads', '?')} thread(s)"]
    if record.get("torch_cpu_capability"):
        parts.append(f"torch {record['torch_cpu_capability']} kernels with {record.get('torch_blas', 'its BLAS')}")
    if record.get("mkl_cbwr"):
        parts.append(f"MKL_CBWR={record['mkl_cbwr']}")
    if record.get("numpy_blas"):
        parts.append(f"numpy with {record['numpy_blas']}")
    return "Computed in " + ", ".join(parts) + f" on {record.get('cpu', 'an unknown CPU')}."


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _thread_count(reproducible: bool) -> int:
    """``CTXSTAIR_THREADS``; else, in the default mode, the ``OMP_NUM_THREADS`` this process started
    with (torchrun sets it per rank) or the usable cores; else, in reproducible mode, :data:`REPRODUCIBLE_THREADS`."""
    _state.setdefault("inherited_omp_threads", os.environ.get("OMP_NUM_THREADS", "").strip())
    for name, value in ((THREADS_VARIABLE, os.environ.get(THREADS_VARIABLE, "").strip()),
                        ("OMP_NUM_THREADS", "" if reproducible else _state["inherited_omp_threads"])):
        if value:
            if not value.isdigit() or int(value) < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
            return int(value)
    if reproducible:
        return REPRODUCIBLE_THREADS
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _mkl_dynamic_off(torch) -> None:
    """``MKL_Set_Dynamic(0)`` (the C entry; lower-case ``mkl_set_dynamic`` is the Fortran one, taking
    a pointer) in the MKL linked into torch (its symbols are not global, so through
    the loaded ``libtorch_cpu``); nothing where torch has no MKL."""
    import ctypes

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or torch built without MKL
        ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_LAZY).MKL_Set_Dynamic(0)


def _flag(value: str) -> bool:
    value = value.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise InputError(f"{REPRODUCIBLE_VARIABLE} must be 1 or 0, got {value!r}")


def _torch_blas(torch) -> str:
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library Version" in line:
            return "MKL " + line.split("Version", 1)[1].split("-", 1)[0].strip()
    return "BLAS_INFO=" + next((part.split("=", 1)[1] for part in torch.__config__.show().replace(",", " ").split()
                                if part.startswith("BLAS_INFO=")), "unknown")


def _numpy_blas() -> str:
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (TypeError, KeyError):  # numpy < 1.26 prints only
        return "its BLAS"
    core = os.environ.get("OPENBLAS_CORETYPE")
    return f"{blas.get('name', 'BLAS')} {blas.get('version', '')}".strip() + (f" ({core} kernels)" if core else "")
