"""The command line: outputs of `ctxstair signatures`, and one-line errors with exit code 2."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from recipe_helpers import RECIPE_NAMES
from short_runs import PNG_ONLY

from ctxstair import signatures, tasks
from ctxstair.cli import main


def test_tasks_lists_every_task(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for info in tasks.list():
        assert info.name in out


def test_signatures_writes_arrays_task_info_and_figures(tmp_path, capsys):
    out = tmp_path / "sig"
    assert main(["signatures", "add", "--set", "N=8", "--order", "1", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    saved = np.load(out / "signatures.npz")
    ds = tasks.make("add", N=8)
    expected = signatures.label_signature(ds.X, ds.y, 1, ds.vocab_size, tokens=ds.tokens,
                                          labels=saved["labels"], context=saved["context"])
    np.testing.assert_array_equal(saved["order1"], expected)
    assert saved["order0"].shape == (8, 15)  # labels 2..16 occur
    info = json.loads((out / "task.json").read_text())
    assert info["params"]["N"] == 8 and info["orders"] == [0, 1]
    for name in ["signature_similarity.png", "signature_pca.png"]:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sig"]  # no staging leftovers


@pytest.mark.parametrize(
    "argv,message",
    [
        (["signatures", "nosuchtask"], "unknown task 'nosuchtask'"),
        (["signatures", "add", "--set", "Q=3"], "unknown parameter 'Q' for task 'add'"),
        (["signatures", "add", "--set", "N=abc"], "parameter 'N' of task 'add' must be of type int"),
        (["signatures", "add", "--set", "N"], "--set expects key=value"),
        (["signatures", "add", "--order", "2"], "order must be in 0..1"),
        (["signatures", "sum_mod", "--set", "L=4", "--set", "N=6", "--order", "3", "--max-gib", "0.000001"], "GiB"),
        (["signatures", "add", "--order", "x"], "invalid int value"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_output(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    if argv[0] == "signatures":
        argv = argv + ["--out", str(out)]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_kept_unless_forced(tmp_path, capsys):
    out = tmp_path / "sig"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert main(["signatures", "add", "--set", "N=5", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "mine.txt").exists()
    assert main(["signatures", "add", "--set", "N=5", "--out", str(out), "--force"]) == 0
    assert not (out / "mine.txt").exists() and (out / "signatures.npz").exists()


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    import ctxstair

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"ctxstair {version('ctxstair')}\n"
    assert ctxstair.__version__ == version("ctxstair")


def test_entry_point_prints_no_traceback():
    run = subprocess.run([sys.executable, "-m", "ctxstair", "signatures", "add", "--set", "N=-3"],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("ctxstair: error:") and "Traceback" not in run.stderr


# ---------------------------------------------------------------- recipes, run, report

def test_recipes_lists_every_recipe(capsys):
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == RECIPE_NAMES
    assert all("SPEC §8" in line or "SPEC §9" in line for line in lines)  # each names its experiment in the SPEC


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        return exit_.code


@pytest.mark.parametrize("extra,message", [
    (["--set", "train.foo=1"], "unknown config key 'train.foo'"),
    (["--set", "model.init.bar=1"], "unknown config key 'model.init.bar'"),
    (["--set", "train.lr=abc"], "train.lr must be of type float"),
    (["--set", "train.epochs=0"], "train.epochs must be >= 1"),
    (["--set", "train.optimizer=lbfgs"], "train.optimizer must be one of gd, sgd, adam, adamw"),
    (["--set", "task.N=-2"], "'N'"),
    (["--set", "train.lr"], "--set expects key=value"),
    (["--set", "train.lr=1", "--set", "train.lr=2"], "'train.lr' twice"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--resume", "--force"], "not allowed with argument"),
])
def test_run_bad_input_exits_2_with_one_line_and_no_directory(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert _exit_code(["run", "staircase-add", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_run_unknown_recipe_exits_2(tmp_path, capsys):
    assert main(["run", "nosuch", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'nosuch'" in err and "staircase-add" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_run_resume_of_a_missing_directory_starts_the_run(tmp_path, capsys):
    """A job script may always pass --resume: with nothing there it starts the run,
    which ends exactly like a run started without --resume; a foreign directory is still refused."""
    small = ["--set", "task.N=5", "--set", "model.d=8", "--set", "train.epochs=20", "--set", "snapshots.every=10",
             "--set", "analysis.probe_steps=5", *PNG_ONLY]
    assert main(["run", "staircase-add", "--out", str(tmp_path / "resumed"), "--resume", *small]) == 0
    assert main(["run", "staircase-add", "--out", str(tmp_path / "fresh"), *small]) == 0
    for name in ("metrics.jsonl", "alignment.csv", "report.html"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    (tmp_path / "foreign").mkdir()
    for recipe in ("staircase-add", "label-law"):
        assert main(["run", recipe, "--out", str(tmp_path / "foreign"), "--resume"]) == 2
        err = capsys.readouterr().err
        assert "cannot resume" in err and err.count("\n") == 1
    assert list((tmp_path / "foreign").iterdir()) == []


def test_report_on_a_non_run_directory_exits_2(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    for target in (tmp_path / "plain", tmp_path / "missing"):
        assert main(["report", str(target)]) == 2
        err = capsys.readouterr().err
        assert "not a ctxstair run directory" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "plain"]


def test_run_then_report_then_resume(tmp_path, capsys):
    out = tmp_path / "law"
    assert main(["run", "label-law", "--out", str(out), "--set", "train.epochs=3", *PNG_ONLY]) == 0
    report_line, *explorer_lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(re.escape(f"report: {out / 'report.html'}") + r" \(peak memory \d+ MiB\)", report_line)
    assert explorer_lines == [f"explorer: {out / part / 'explorer.html'}" for part in ("uniform", "normal", "poisson",
                                                                                         "exp")]
    report = (out / "report.html").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["ctxstair.sha256", "exp", "figures", "normal", "poisson",
                                                      "recipe.json", "report.html", "summary.json", "uniform"]
    assert main(["report", str(out), *PNG_ONLY]) == 0
    assert (out / "report.html").read_bytes() == report
    metrics = (out / "normal" / "metrics.jsonl").read_bytes()
    assert main(["run", "label-law", "--out", str(out), "--set", "train.epochs=3", "--resume", *PNG_ONLY]) == 0
    assert (out / "normal" / "metrics.jsonl").read_bytes() == metrics
    assert main(["run", "label-law", "--out", str(out), "--set", "train.epochs=3", *PNG_ONLY]) == 2  # exists
    assert "already exists" in capsys.readouterr().err
    assert main(["run", "label-law", "--out", str(out), "--set", "train.epochs=4", "--resume"]) == 2
    assert "differs" in capsys.readouterr().err


def test_run_no_analysis_trains_only_and_resumes(tmp_path, capsys):
    """With --no-analysis the run directory holds the training files only; a resume is a no-op."""
    out = tmp_path / "add"
    argv = ["run", "staircase-add", "--out", str(out), "--set", "train.epochs=30", "--set", "task.N=8", "--seeds", "3",
            "--no-analysis"]
    assert main(argv) == 0
    assert re.fullmatch(re.escape(f"trained: {out}") + r" \(peak memory \d+ MiB\)", capsys.readouterr().out.strip())
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "ctxstair.sha256", "members.csv", "metrics.jsonl",
                                                     "resources.json", "signatures.npz"]
    config = (out / "config.yaml").read_text()
    assert "save: false" in config and "enabled: false" in config and "members: 3" in config
    metrics = (out / "metrics.jsonl").read_bytes()
    assert main([*argv, "--resume"]) == 0
    assert (out / "metrics.jsonl").read_bytes() == metrics


@pytest.mark.parametrize("recipe,message", [("init-scaling", "trains no ensemble runs"),
                                            ("lm-staircase", "ctxstair lm train --no-analysis")])
def test_run_no_analysis_is_refused_for_recipes_without_engine_runs(tmp_path, capsys, recipe, message):
    assert main(["run", recipe, "--out", str(tmp_path / "out"), "--no-analysis"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
