"""The floating-point set-up (ctxstair.numerics): thread count and mode recorded per run, bad
settings refused, and reproducible mode giving byte-identical files whatever code path the
environment asks the libraries for (emulating other CPUs on this one)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import SRC
from short_runs import PNG_ONLY

from ctxstair import cli, numerics

# Variables that steer the libraries' CPU code paths: cleared so that each case sets only its own.
PATH_VARIABLES = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                  "NPY_DISABLE_CPU_FEATURES", "CTXSTAIR_REPRODUCIBLE", "CTXSTAIR_THREADS", "OMP_NUM_THREADS",
                  "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_DYNAMIC", "OMP_DYNAMIC")
# Another CPU's code paths, emulated here: AVX2 kernels where this CPU may have AVX-512 (what an
# older Xeon or a Zen 2 runs), and ATen's unvectorised kernels with MKL's compatible branch, OpenBLAS's
# SSE4.2 (Nehalem) kernels and one thread (which differs from the default on every CPU with AVX2, so
# the control can fail). Each variable asks only for instructions every CPU with AVX2 has: the
# default-mode control keeps them, and a kernel this CPU lacks would end it with SIGILL.
EMULATED = {
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "unvectorised": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Nehalem",
                     "OMP_NUM_THREADS": "1"},
}


def ctxstair(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "ctxstair", *args], env=env, capture_output=True, text=True,
                          timeout=900)


def key_numbers(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())["key_numbers"]


def run_under(tmp_path: Path, name: str, recipe: str, overrides: list[str], *flags: str,
              extra_env: dict[str, str] | None = None) -> Path:
    out = tmp_path / name
    result = ctxstair("run", recipe, *overrides, "--out", str(out), *flags, extra_env=extra_env)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.extended  # a run under each emulated CPU code path: ≈ 1 min each on 2 cores
@pytest.mark.parametrize("recipe, overrides", [
    ("staircase-add", ["--set", "train.epochs=300", "--set", "task.N=20"]),
    ("attention-arith", ["--set", "train.epochs=300", "--set", "analysis.probe_steps=60"]),
])
def test_reproducible_mode_gives_the_same_bytes_under_every_emulated_code_path(tmp_path, recipe, overrides):
    reference = run_under(tmp_path, "reference", recipe, overrides, "--reproducible")
    for name, env in EMULATED.items():
        out = run_under(tmp_path, name, recipe, overrides, "--reproducible", extra_env=env)
        for path in sorted(p.relative_to(reference) for p in reference.rglob("*.csv")) + [Path("metrics.jsonl")]:
            if (reference / path).is_file():
                assert (out / path).read_bytes() == (reference / path).read_bytes(), (name, path)
        assert key_numbers(out) == key_numbers(reference), name
    # The control: without reproducible mode, the unvectorised path changes the numbers.
    default = run_under(tmp_path, "default", recipe, overrides)
    unvectorised = run_under(tmp_path, "default-unvectorised", recipe, overrides,
                             extra_env=EMULATED["unvectorised"])
    changed = [p for p in default.rglob("alignment.csv")
               if p.read_bytes() != (unvectorised / p.relative_to(default)).read_bytes()]
    assert changed, "the emulated code path changed nothing, so the comparison above proves nothing"


def test_every_run_records_its_floating_point_set_up_and_shows_it(tmp_path):
    out = run_under(tmp_path, "run", "staircase-add", ["--set", "train.epochs=20", "--set", "task.N=8"],
                    "--reproducible", *PNG_ONLY, extra_env={"CTXSTAIR_THREADS": "1"})
    record = json.loads((out / "resources.json").read_text())["numerics"]
    assert record["mode"] == "reproducible" and record["threads"] == 1
    assert record["mkl_cbwr"] == "COMPATIBLE" and record["torch_cpu_capability"] == "AVX2"
    assert {"cpu", "torch_blas", "numpy_blas"} <= set(record)
    assert numerics.describe(record) in (out / "report.html").read_text().replace("&#x27;", "'")


def test_default_mode_fixes_the_thread_count_and_turns_dynamic_threading_off():
    code = ("import ctxstair, os, torch; from ctxstair import numerics; numerics.apply_to_torch(); "
            "print(torch.get_num_threads(), os.environ['MKL_DYNAMIC'], os.environ['OMP_DYNAMIC'], "
            "os.environ['MKL_CBWR'], numerics.settings()['mode'])")
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    env["PYTHONPATH"] = str(SRC)
    for extra, threads in (({}, len(os.sched_getaffinity(0))), ({"CTXSTAIR_THREADS": "1"}, 1),
                           ({"OMP_NUM_THREADS": "1"}, 1)):
        result = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True)
        assert result.stdout.split() == [str(threads), "FALSE", "FALSE", "AUTO", "default"], result.stderr


def test_torch_imported_first_still_gets_fixed_threads_and_no_dynamic_threading():
    # MKL read its variables when torch loaded: dynamic threading is turned off through MKL's own
    # call (MKL_VERBOSE shows "Dyn:0" on the next matmul), and the record says CNR mode is unset.
    code = ("import torch\na = torch.randn(300, 100)\na @ a.T\nimport ctxstair\nfrom ctxstair import numerics\n"
            "numerics.apply_to_torch()\nprint(numerics.settings()['mkl_cbwr'], flush=True)\na @ a.T")
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    result = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(SRC), "MKL_VERBOSE": "1"},
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = [line for line in result.stdout.splitlines() if "SGEMM" in line]
    assert len(calls) == 2 and "Dyn:1" in calls[0] and "Dyn:0" in calls[1], calls
    assert "unset: torch was loaded before numerics.configure()" in result.stdout


def test_attention_ensemble_gradients_are_bitwise_repeatable_under_load(busy_core):
    # The backward of advanced indexing accumulated with atomics in thread order before torch's
    # deterministic kernels were turned on: one call in a few dozen to a few hundred differed on a
    # loaded machine (this test then failed in about half of its runs; the stress tests are the
    # stronger check).
    import torch

    from ctxstair import tasks
    from ctxstair.models import build_ensemble
    from ctxstair.recipes import get
    from ctxstair.train.engine import member_losses

    numerics.apply_to_torch()
    cfg = get("attention-arith").runs()["mod"]
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    model = build_ensemble(cfg, dataset)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)

    def gradients() -> list[torch.Tensor]:
        model.zero_grad()
        member_losses(model, X, y, backward=True)
        return [p.grad.clone() for p in model.parameters()]

    first = gradients()
    differing = sum(not all(torch.equal(a, b) for a, b in zip(first, gradients())) for _ in range(150))
    assert differing == 0


def test_import_ctxstair_loads_neither_numpy_nor_torch():
    code = "import sys, ctxstair; print(sorted({'numpy', 'torch'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)},
                            capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.parametrize("variable, value, words", [
    ("CTXSTAIR_THREADS", "two", "CTXSTAIR_THREADS must be a positive integer, got 'two'"),
    ("CTXSTAIR_THREADS", "0", "CTXSTAIR_THREADS must be a positive integer, got '0'"),
    ("CTXSTAIR_REPRODUCIBLE", "maybe", "CTXSTAIR_REPRODUCIBLE must be 1 or 0, got 'maybe'"),
])
def test_a_bad_setting_is_one_line_and_exit_2(variable, value, words):
    result = ctxstair("tasks", extra_env={variable: value})
    assert result.returncode == 2 and result.stderr == f"ctxstair: error: {words}\n"


def test_reproducible_mode_asked_for_after_numpy_loaded_is_refused(tmp_path, capsys):
    if numerics.settings()["mode"] == "reproducible":
        pytest.skip("the suite itself runs in reproducible mode, so --reproducible changes nothing here")
    # This process has numpy and torch loaded: their code paths are chosen and cannot be pinned any more.
    code = cli.main(["run", "staircase-add", "--set", "train.epochs=5", "--out", str(tmp_path / "r"), "--reproducible"])
    err = capsys.readouterr().err
    assert (code == 2 and err.startswith("ctxstair: error: reproducible mode must be chosen before")
            and err.count("\n") == 1)
    assert not (tmp_path / "r").exists()
