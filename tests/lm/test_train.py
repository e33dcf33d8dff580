"""Language-model training (SPEC §5, §7): the warm-up/cosine schedule, determinism, bitwise resume
after an interruption, the run directory, and the whole lm-staircase pipeline on a tiny model."""

import csv
import io
import json

import numpy as np
import pytest
from figure_checks import assert_no_empty_axes, saved_figures
from lm_helpers import TINY, tiny
from recipe_helpers import run_contents as files

from ctxstair import rundir
from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis
from ctxstair.cli import main
from ctxstair.config.lm import LMTrainConfig
from ctxstair.io import RECORD, read_record
from ctxstair.lm.train import lr_factor, train_lm
from ctxstair.models import causal_lm
from ctxstair.run import Run


def test_learning_rate_schedule_warms_up_then_decays_to_the_final_fraction():
    cfg = LMTrainConfig(steps=1000, warmup=0.03, final_lr_fraction=0.1)
    factors = np.array([lr_factor(s, cfg) for s in range(1000)])
    assert factors[0] == pytest.approx(1 / 30) and factors[29] == pytest.approx(1.0)
    assert np.all(np.diff(factors[:30]) > 0) and np.all(np.diff(factors[30:]) <= 0)
    assert factors[30] == pytest.approx(1.0) and lr_factor(1000, cfg) == pytest.approx(0.1)
    assert factors[30 + 485] == pytest.approx(0.55, abs=0.01)  # half-way through the cosine


def test_runs_are_deterministic_and_resume_bitwise(tmp_path):
    cfg = tiny()
    reference = files(train_lm(cfg, tmp_path / "a"))
    assert files(train_lm(cfg, tmp_path / "b")) == reference

    def stop_at_17(step):
        if step == 17:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train_lm(cfg, tmp_path / "c", hook=stop_at_17)
    assert (tmp_path / "c" / "checkpoint" / "state.json").is_file()
    train_lm(cfg, tmp_path / "c", resume=True)
    assert files(tmp_path / "c") == reference
    train_lm(cfg, tmp_path / "c", resume=True)  # a completed run is left as it is
    assert files(tmp_path / "c") == reference


def test_run_directory_contents(tmp_path):
    run = train_lm(tiny(), tmp_path / "run")
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", RECORD, "hf_model", "members.csv", "metrics.jsonl",
                                                     "resources.json", "snapshots", "tokenizer.json"]
    # the run's record lists every file but the exported model's, which has a record of its own
    assert sorted(read_record(run)) == sorted(p.relative_to(run).as_posix() for p in run.rglob("*")
                                              if p.is_file() and p.name != RECORD and "hf_model" not in p.parts)
    assert sorted(read_record(run / "hf_model")) == sorted(p.name for p in (run / "hf_model").iterdir()
                                                           if p.name != RECORD)
    steps = rundir.snapshot_times(run)
    assert steps[0] == 0 and steps[-1] == 30
    rows = rundir.read_metric_rows(run)
    assert [r["step"] for r in rows if "loss" in r] == list(range(30))
    assert [r["step"] for r in rows if "val_loss" in r] == steps
    members = list(csv.DictReader(io.StringIO((run / "members.csv").read_text())))
    assert list(members[0]) == ["tensor", "role", "init_std", "target_std"]
    # one row per part of every matrix of the model at step 0, as causal_lm measures it (printed to 6 digits)
    stds = causal_lm.init_stds(Run(run).model_at(0), causal_lm.gammas_of(tiny().model.init))
    assert [(r["tensor"], r["role"]) for r in members] == [(name, role) for name, role, _, _ in stds]
    assert {r["role"] for r in members} == set(causal_lm.ROLES)  # the default Llama is untied
    for row, (_, _, std, target) in zip(members, stds):
        assert float(row["init_std"]) == pytest.approx(std, rel=1e-5)
        assert float(row["target_std"]) == pytest.approx(target, rel=1e-5)
    with pytest.raises(ValueError, match="already exists"):
        train_lm(tiny(), run)
    with pytest.raises(ValueError, match="differs"):
        train_lm(tiny(**{"train.lr": 0.5}), run, resume=True)


def test_lm_staircase_pipeline_through_the_cli(tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(["lm", "train", "--out", str(out), *sum((["--set", f"{k}={v}"] for k, v in TINY.items()), [])]) == 0
    for name in ("lm_analysis.csv", "lm_tokens.json", "summary.json", "report.html"):
        assert (out / name).is_file(), name
    assert not (out / "alignment.csv").exists()  # every LM measure is in lm_analysis.csv
    table = read_lm_analysis(out)
    assert {"rho_next", "rho_next_spearman", "probe_heldout_mse", "attention_path_corr", "path_share"} <= \
        set(table["measure"].tolist())
    assert measure_series(table, "rho_next")[0].tolist() == rundir.snapshot_times(out)
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["rho_next"]) == len(rundir.snapshot_times(out))
    # Every figure as PNG and, by default, as SVG beside it; the format is recorded in summary.json.
    names = ["attention_path", "path_shares", "probe", "rho_next"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(f"{n}.{kind}" for n in names
                                                                         for kind in ("png", "svg"))
    assert summary["figure_format"] == "svg"
    assert all((out / "figures" / f"{n}.svg").read_bytes().startswith(b"<?xml") for n in names)
    with saved_figures() as figures:  # redrawn from the files: the same bytes, and no empty panel
        before = {p.name: p.read_bytes() for p in (out / "figures").iterdir()}
        assert main(["report", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in (out / "figures").iterdir()} == before
    assert len(figures) == len(names)
    assert_no_empty_axes(figures)
    # Another format replaces the vector copies, and the record follows.
    assert main(["report", str(out), "--figure-format", "pdf"]) == 0
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(f"{n}.{kind}" for n in names
                                                                         for kind in ("pdf", "png"))
    assert json.loads((out / "summary.json").read_text())["figure_format"] == "pdf"
    assert "(vector: <a href=\"figures/rho_next.pdf\">PDF</a>)" in (out / "report.html").read_text()


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(["lm", "train", "--out", str(out), "--set", "corpus.source=no-such-corpus"]) == 2
    assert main(["lm", "train", "--out", str(out), "--set", "model.n_heads=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("ctxstair: error:") for line in err)
    assert not out.exists()


def test_training_without_analysis_still_reports(tmp_path):
    out = tmp_path / "lm"
    assert main(["lm", "train", "--no-analysis", "--out", str(out),
                 *sum((["--set", f"{k}={v}"] for k, v in TINY.items()), [])]) == 0
    assert not (out / "lm_analysis.csv").exists() and (out / "report.html").is_file()
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["loss.png", "loss.svg"]
