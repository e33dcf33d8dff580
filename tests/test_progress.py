"""Progress of long commands (ctxstair.progress): plain lines with percent, rate and time left on a
stderr that is a log file, nothing with --quiet, nothing from the Python API unless asked, the same
stdout and the same files either way."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from repo_paths import SRC
from short_runs import PNG_ONLY
from tokenizers import Tokenizer, models, pre_tokenizers

from ctxstair import progress
from ctxstair.cli import main
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.train import train_run

#: A run of a few seconds with its analysis (the alignment probe's steps report too).
TINY_RUN = ["--set", "task.N=6", "--set", "model.d=8", "--set", "train.epochs=40", "--set", "snapshots.log_points=2",
            "--set", "snapshots.every=20", "--set", "analysis.probe_steps=6", *PNG_ONLY]
#: One plain line: "<what>: 45% (18/40 epoch), 9.41epoch/s, 00:01 elapsed, 00:02 left[, numbers]".
LINE = re.compile(r"^(?P<what>.+?): (?P<percent>\d+)% \((?P<n>[\d.]+\w?)/(?P<total>[\d.]+\w?) (?P<unit>[^)]+)\), "
                  r"(?P<rate>[\d.]+ ?\S+/s|[\d.]+ ?s/\S+), \S+ elapsed, (?P<left>\d\d:\d\d(:\d\d)?) left")


def _command(args: list[str], out: Path, log: Path, seconds: str) -> subprocess.CompletedProcess:
    """``ctxstair *args --out out`` with stderr written to the file ``log`` (as on a cluster) and the
    progress interval ``seconds``; stdout is captured."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           progress.INTERVAL_VARIABLE: seconds, "CTXSTAIR_THREADS": "1"}
    with open(log, "w") as stderr:
        return subprocess.run([sys.executable, "-m", "ctxstair", *args, "--out", str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=600)


def test_a_run_logs_progress_lines_and_quiet_logs_none_with_the_same_stdout_and_files(tmp_path):
    shown = _command(["run", "staircase-add", *TINY_RUN], tmp_path / "shown", tmp_path / "shown.log", "0")
    assert shown.returncode == 0, (tmp_path / "shown.log").read_text()[-2000:]
    lines = (tmp_path / "shown.log").read_text().splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert lines and all(parsed), lines  # nothing else on stderr: every line is progress
    training = [m for m in parsed if m["unit"] == "epoch"]
    assert [int(m["n"]) for m in training] == list(range(1, 41)), lines  # interval 0: a line per epoch
    assert all(m["total"] == "40" for m in training) and training[-1]["percent"] == "100"
    assert "loss=" in lines[0] and "acc=" in lines[0]
    assert any(m["unit"] == "step" and m["what"].endswith("alignment probes") for m in parsed), lines

    quiet = _command(["run", "staircase-add", *TINY_RUN, "--quiet"], tmp_path / "quiet", tmp_path / "quiet.log", "0")
    assert quiet.returncode == 0 and (tmp_path / "quiet.log").read_text() == ""
    out = quiet.stdout

    def result(stdout: str) -> str:  # what a command prints, less the peak memory of its process
        return re.sub(r"peak memory \d+ MiB", "peak memory", stdout)

    assert result(out.replace("quiet", "shown")) == result(shown.stdout)  # the same with or without progress
    assert shown.stdout.startswith("report: ")
    for name in ("metrics.jsonl", "members.csv", "alignment.csv", "summary.json"):  # progress changes no file
        assert (tmp_path / "quiet" / name).read_bytes() == (tmp_path / "shown" / name).read_bytes(), name


def test_a_log_gets_no_line_before_the_interval(tmp_path, capsys, monkeypatch):
    """A command shorter than the interval writes only its result, so a refusal or an interruption
    stays the one line on stderr; the interval is 30 s unless CTXSTAIR_PROGRESS_SECONDS says otherwise."""
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "3600")
    assert main(["run", "staircase-add", *TINY_RUN, "--no-analysis", "--out", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.delenv(progress.INTERVAL_VARIABLE)
    assert progress.interval() == progress.INTERVAL == 30
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "2.5")
    assert progress.interval() == 2.5


def test_the_python_api_prints_nothing_unless_asked(tmp_path, capsys, monkeypatch):
    cfg = apply_overrides(RunConfig(), {"task.N": 6, "model.d": 8, "train.epochs": 5, "snapshots.log_points": 1})
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "0")
    train_run(cfg, tmp_path / "silent")
    assert capsys.readouterr() == ("", "")
    with progress.shown():
        train_run(cfg, tmp_path / "asked")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(LINE.match(line) for line in err), err
    with progress.shown(False):
        train_run(cfg, tmp_path / "off")
    assert capsys.readouterr() == ("", "")
    train_run(cfg, tmp_path / "explicit", progress=True)
    assert len(capsys.readouterr().err.splitlines()) == 5
    assert (tmp_path / "silent" / "metrics.jsonl").read_bytes() == (tmp_path / "asked" / "metrics.jsonl").read_bytes()


def test_lines_come_at_the_interval_over_the_stages_of_a_command(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "30")
    with progress.shown():
        with progress.Progress(10, "first", "step") as bar:
            for _ in range(10):
                clock[0] += 4
                bar.update()
        first = capsys.readouterr().err.splitlines()
        # 40 s of work: one line at 32 s (the first update 30 s after the command began) and the last one.
        assert [LINE.match(line)["n"] for line in first] == ["8", "10"], first
        assert LINE.match(first[0])["left"] == "00:08" and "4.00s/step" in first[0]
        with progress.Progress(4, "second", "step") as bar:
            clock[0] += 20  # 20 s after the last line: nothing yet; at 40 s, a line
            bar.update()
            clock[0] += 20
            bar.update()
        assert [LINE.match(line)["n"] for line in capsys.readouterr().err.splitlines()] == ["2"]  # stopped at 2 of 4
        with pytest.raises(ValueError), progress.Progress(4, "third", "step", initial=2) as bar:
            clock[0] += 40
            bar.update(1)
            clock[0] += 1
            bar.update(1)
            raise ValueError("an error's line stays the last")
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and LINE.match(lines[0])["percent"] == "75"


def test_corpus_count_and_tokenize_report_progress_unless_quiet(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "0")
    np.random.default_rng(0).integers(0, 40, size=60_000).astype(np.uint16).tofile(tmp_path / "train.bin")
    count = ["corpus", "count", str(tmp_path / "train.bin"), "--vocab-size", "40", "--window", "8", "--tokens",
             "3,5,7,11,13", "--prefix-labels", "9", "--sample-windows", "6", "--unit-tokens", "4096"]
    assert main([*count, "--out", str(tmp_path / "stats")]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines and all(LINE.match(line) and LINE.match(line)["unit"] == "tok" for line in lines), lines
    assert LINE.match(lines[-1])["percent"] == "100"
    assert main([*count, "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    quiet_out, quiet_err = capsys.readouterr()
    assert quiet_err == "" and quiet_out.split(":")[1].split(";")[0] == out.split(":")[1].split(";")[0]

    words = ["[UNK]", "document", "has", "some", "words"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "docs.txt").write_text("".join(f"document {i} has some words\n\n" for i in range(3000)))
    tokenize = ["corpus", "tokenize", str(tmp_path / "docs.txt"), "--tokenizer", str(tmp_path / "tokenizer.json")]
    assert main([*tokenize, "--out", str(tmp_path / "docs")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(LINE.match(line) and LINE.match(line)["unit"] == "B" for line in err), err
    assert LINE.match(err[-1])["percent"] == "100" and "documents=3,000" in err[-1], err
    assert main([*tokenize, "--out", str(tmp_path / "quiet-docs"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_lm_train_prints_its_result_alone_no_deepspeed_or_shard_bar(tmp_path):
    """The export's save_pretrained is silenced: DeepSpeed's "Setting accelerator to CPU" (stdout) and
    the "Writing model shards" bar (stderr) do not show; with no progress line due, stderr is empty."""
    settings = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.head_dim=8", "model.d_mlp=32",
                "corpus.window=16", "corpus.vocab_size=300", "corpus.max_tokens=5000", "train.steps=10",
                "train.batch_size=4", "snapshots.log_points=1", "snapshots.every=10"]
    tiny = [arg for setting in settings for arg in ("--set", setting)]
    done = _command(["lm", "train", *tiny, "--no-analysis"], tmp_path / "lm", tmp_path / "lm.log", "3600")
    assert done.returncode == 0, (tmp_path / "lm.log").read_text()[-2000:]
    assert (tmp_path / "lm.log").read_text() == ""
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["report", "explorer"], done.stdout
