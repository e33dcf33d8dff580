"""`ctxstair sweep`: grid parsing, a local sweep equal to the runs it stands for,
resume, the Ray backend on a local Ray instance, and bad input (exit 2, nothing written)."""

import csv
import sys

import numpy as np
import pytest
import torch
from short_runs import FIGURE_FORMAT

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.recipes import run_recipe
from ctxstair.sweep import grid_cells, parse_grid, run_sweep, sweep_rows
from ctxstair.sweep.cells import member_rows

#: A small staircase-add: 2 cells (γ) × 2 seeds, ≈ 2 s per cell on one core.
SMALL = {"task.N": 8, "model.d": 16, "train.epochs": 150, "snapshots.log_points": 6, "snapshots.every": 50,
         "analysis.probe_steps": 60}
GRID = {"model.init.gamma": [0.5, 1.5]}


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_parse_grid_reads_typed_values_and_lists():
    grid = parse_grid(["model.init.gamma=0.5,1,2", "model.activation=relu,tanh", "model.coeffs=[1,1],[1, 0.5]"])
    assert grid == {"model.init.gamma": [0.5, 1, 2], "model.activation": ["relu", "tanh"],
                    "model.coeffs": [[1, 1], [1, 0.5]]}
    assert parse_grid(["train.lr=1e-3, 2E-2"]) == {"train.lr": [0.001, 0.02]}  # floats, as --set reads them
    cells = grid_cells(grid)
    assert len(cells) == 3 * 2 * 2
    assert cells[0].overrides == {"model.init.gamma": 0.5, "model.activation": "relu", "model.coeffs": [1, 1]}
    assert cells[1].overrides["model.coeffs"] == [1, 0.5]  # the last key varies fastest
    assert cells[0].name == "model.init.gamma=0.5__model.activation=relu__model.coeffs=_1_1_"
    assert len({c.name for c in cells}) == len(cells)


@pytest.mark.parametrize("items,message", [
    ([], "at least one --grid"),
    (["model.d"], "--grid expects key=v1,v2"),
    (["model.d=8,,16"], "empty value"),
    (["model.d=8", "model.d=16"], "gives 'model.d' twice"),
    (["model.d=8,8"], "repeats a value"),
])
def test_parse_grid_refuses_bad_items(items, message):
    with pytest.raises(InputError, match=message):
        parse_grid(items)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "sweep"
    run_sweep("staircase-add", out, GRID, SMALL, seeds=2, workers=2, figure_format=FIGURE_FORMAT)
    return out


def test_local_sweep_writes_table_figures_and_report(local_sweep):
    rows = read_csv(local_sweep / "sweep.csv")
    assert [(r["model.init.gamma"], r["member"], r["seed"]) for r in rows] == [
        ("0.5", "0", "0"), ("0.5", "1", "1"), ("1.5", "0", "0"), ("1.5", "1", "1")]
    assert [float(r["gamma_embedding"]) for r in rows] == [0.5, 0.5, 1.5, 1.5]  # the grid reached the members
    assert all(r["order0_max"] and r["loss_end"] for r in rows)
    for name in ["phase_epochs.png", "phase_alignment.png", "phase_training.png"]:
        assert (local_sweep / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (local_sweep / "report.html").read_text()
    assert "model.init.gamma = 0.5" in html and "model.init.gamma = 1.5" in html
    assert sorted(p.name for p in (local_sweep / "cells").iterdir()) == ["model.init.gamma=0.5", "model.init.gamma=1.5"]


def test_each_cell_equals_the_run_it_stands_for(local_sweep, tmp_path):
    """A cell of a 2-worker pool (1 torch thread each on 2 cores) is the same computation as
    `ctxstair run` with its overrides, bitwise, when both use the same number of threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (__import__("os").cpu_count() or 1) // 2))
    try:
        reference = run_recipe("staircase-add", tmp_path / "ref", {**SMALL, "model.init.gamma": 1.5}, seeds=2,
                               progress=False, figure_format=FIGURE_FORMAT)
    finally:
        torch.set_num_threads(threads)
    assert member_rows(local_sweep / "cells" / "model.init.gamma=1.5") == member_rows(reference)


def test_member_numbers_follow_their_definitions(local_sweep):
    """order0_max is the largest order-0 Pearson over the snapshots, and takeover_epoch the first
    snapshot at or after it where the zero-mean probe beats order 0 — recomputed here from
    alignment.csv by hand."""
    cell = local_sweep / "cells" / "model.init.gamma=0.5"
    table = read_csv(cell / "alignment.csv")
    for row in sweep_rows(local_sweep):
        if row["cell"] != "model.init.gamma=0.5":
            continue
        series = {}
        for r in table:
            if int(r["member"]) == row["member"] and r["signature"] in ("order0", "order1_probe_zero_mean"):
                series.setdefault(int(r["epoch"]), {})[r["signature"]] = float(r["pearson"])
        epochs = sorted(series)
        top = max(epochs, key=lambda e: series[e]["order0"])
        assert row["order0_max_epoch"] == top and row["order0_max"] == series[top]["order0"]
        crossings = [e for e in epochs if e >= top and series[e]["order1_probe_zero_mean"] > series[e]["order0"]]
        assert row["takeover_epoch"] == (crossings[0] if crossings else None)


def test_resume_runs_only_missing_cells_and_checks_the_sweep(local_sweep, tmp_path):
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(local_sweep, out)
    kept = out / "cells" / "model.init.gamma=0.5"
    stamp = (kept / "metrics.jsonl").stat().st_mtime_ns
    shutil.rmtree(out / "cells" / "model.init.gamma=1.5")
    with pytest.raises(InputError, match="already exists"):
        run_sweep("staircase-add", out, GRID, SMALL, seeds=2, workers=1, figure_format=FIGURE_FORMAT)
    with pytest.raises(InputError, match="differs from the requested sweep"):
        run_sweep("staircase-add", out, GRID, SMALL, seeds=3, workers=1, resume=True,
                  figure_format=FIGURE_FORMAT)
    run_sweep("staircase-add", out, GRID, SMALL, seeds=2, workers=1, resume=True, figure_format=FIGURE_FORMAT)
    assert (kept / "metrics.jsonl").stat().st_mtime_ns == stamp  # the complete cell was not retrained
    assert [p.name for p in (out / "cells").iterdir() if p.name.startswith(".")] == []
    assert read_csv(out / "sweep.csv")[:2] == read_csv(local_sweep / "sweep.csv")[:2]
    assert len(read_csv(out / "sweep.csv")) == 4


@pytest.mark.extended  # starts a Ray cluster (worker processes): ≈ 16 s on 2 cores
def test_ray_backend_matches_the_local_one(local_sweep, tmp_path):
    """One Ray task per cell on a local instance (`ray.init(num_cpus=2)`, as a cluster would run it):
    the cells come back as archives and give the local sweep's table, number for number."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = run_sweep("staircase-add", tmp_path / "sweep", GRID, SMALL, seeds=2, backend="ray", workers=2)
    finally:
        ray.shutdown()
    assert read_csv(out / "sweep.csv") == read_csv(local_sweep / "sweep.csv")
    assert (out / "cells" / "model.init.gamma=0.5" / "report.html").is_file()


def test_no_analysis_sweep_has_training_numbers_only(tmp_path):
    out = run_sweep("staircase-add", tmp_path / "sweep", {"train.lr": [0.5, 2.0]}, {**SMALL, "model.init.gamma": 1.0},
                    seeds=1, workers=1, analysis=False)
    rows = read_csv(out / "sweep.csv")
    assert [r["train.lr"] for r in rows] == ["0.5", "2.0"]
    assert all(r["order0_max"] == "" and r["takeover_epoch"] == "" and r["loss_end"] for r in rows)
    # gradient descent at lr 2 gets further than at lr 0.5 in the same number of epochs
    assert float(rows[1]["loss_end"]) < float(rows[0]["loss_end"])
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["phase_training.png", "phase_training.svg"]
    assert not list(out.glob("cells/*/snapshots"))


@pytest.mark.parametrize("argv,message", [
    (["sweep", "staircase-add", "--grid", "model.nosuch=1,2"], "model.nosuch"),
    (["sweep", "staircase-add", "--grid", "model.d=8,16", "--set", "model.d=8"],
     "model.d given both as --grid and as --set"),
    (["sweep", "staircase-add", "--grid", "model.d=8,-1"], "model.d must be >= 1"),
    (["sweep", "init-scaling", "--grid", "model.d=8,16"], "cannot be swept"),
    (["sweep", "lm-staircase", "--grid", "train.lr=0.1,-1"], "train.lr must be > 0"),
    (["sweep", "lm-staircase", "--grid", "train.lr=0.1,1", "--seeds", "2"], "--seeds is not available"),
    (["sweep", "staircase-add"], "at least one --grid"),
    (["sweep", "staircase-add", "--grid", "model.d=8", "--workers", "0"], "--workers must be >= 1"),
    (["sweep", "staircase-add", "--grid", "model.d=8", "--device", "cuda:7"], "train.device=cuda:7"),
])
def test_bad_sweeps_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    if "cuda" in " ".join(argv) and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_ray_backend_without_ray_names_the_install_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    assert main(["sweep", "staircase-add", "--grid", "model.d=8,16", "--backend", "ray",
                 "--out", str(tmp_path / "out")]) == 2
    assert "pip install 'ctxstair[ray]'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_report_command_rebuilds_a_sweep(local_sweep, tmp_path, capsys):
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(local_sweep, out)
    (out / "sweep.csv").unlink()
    shutil.rmtree(out / "figures")
    assert main(["report", str(out)]) == 0
    assert read_csv(out / "sweep.csv") == read_csv(local_sweep / "sweep.csv")
    assert (out / "figures" / "phase_epochs.png").is_file()
    assert np.isfinite(float(read_csv(out / "sweep.csv")[0]["order0_max"]))


#: A tiny language model on a slice of the synthetic corpus (≈ 3 s a cell), ρ_next only.
LM_SMALL = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
            "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 60,
            "train.batch_size": 8, "snapshots.log_points": 6, "snapshots.every": 20, "analysis.measures": "rho_next"}


def test_lm_sweep_cells_are_lm_runs_with_rho_next_numbers(tmp_path):
    """Each cell of an lm-staircase sweep is the `ctxstair run lm-staircase` of its overrides, and its
    sweep.csv row is the course of ρ_next read back from that cell's lm_analysis.csv by hand."""
    out = run_sweep("lm-staircase", tmp_path / "sweep", {"train.lr": [0.003, 0.03]}, LM_SMALL, workers=2)
    rows = read_csv(out / "sweep.csv")
    assert [r["train.lr"] for r in rows] == ["0.003", "0.03"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(
        f"{name}.{kind}" for name in ("phase_peak_step", "phase_rho_next", "phase_training", "rho_next_curves")
        for kind in ("png", "svg"))
    for row in rows:
        cell = out / "cells" / row["cell"]
        series = sorted((int(r["step"]), float(r["value"])) for r in read_csv(cell / "lm_analysis.csv")
                        if r["measure"] == "rho_next")
        steps, rho = zip(*series)
        peak = int(np.argmax(rho))
        val = {r["step"]: r["val_loss"] for r in map(__import__("json").loads, (cell / "metrics.jsonl").open())
               if "val_loss" in r}
        assert int(row["rho_peak_step"]) == steps[peak] and float(row["rho_peak"]) == rho[peak]
        assert float(row["rho_init"]) == rho[0] and float(row["rho_end"]) == rho[-1]
        assert float(row["decay_fraction"]) == pytest.approx((rho[peak] - rho[-1]) / rho[peak])
        assert float(row["peak_fraction"]) == pytest.approx(steps[peak] / steps[-1])
        assert float(row["val_loss_end"]) == val[steps[-1]] and float(row["val_loss_at_peak"]) == val[steps[peak]]
        assert float(row["train_seconds"]) > 0
        # analysis.measures=rho_next: nothing else measured
        assert {r["measure"] for r in read_csv(cell / "lm_analysis.csv")} == {"rho_next", "rho_next_spearman"}
    # the larger learning rate gets further in the same steps
    assert float(rows[1]["val_loss_end"]) < float(rows[0]["val_loss_end"])
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (__import__("os").cpu_count() or 1) // 2))
    try:
        reference = run_recipe("lm-staircase", tmp_path / "ref", {**LM_SMALL, "train.lr": 0.03}, progress=False,
                               figure_format=FIGURE_FORMAT)
    finally:
        torch.set_num_threads(threads)
    assert member_rows(out / "cells" / "train.lr=0.03")[0] | {"train_seconds": None} == \
        member_rows(reference)[0] | {"train_seconds": None}
