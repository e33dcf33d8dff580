"""The record of every finished output (``ctxstair.sha256``): a run, an LM run (with its exported
model), a sweep, an ``analyze-model`` series and a statistics directory each list every file with
its SHA-256, ``sha256sum -c`` agrees, and ``ctxstair verify`` names any file that was changed (one
byte), removed or added afterwards — in one line, exit 2."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from recipe_helpers import run_contents
from short_runs import PNG_ONLY, SHORT_RUN
from stand_ins import Killed

from ctxstair import io
from ctxstair.cli import main
from ctxstair.io import RECORD, read_record, recorded_files
from ctxstair.text.tokenizer import TextTokenizer

SWEEP = ["sweep", "staircase-add", "--grid", "model.init.gamma=0.5,1.5", "--set", "task.N=6", "--set", "model.d=8",
         "--set", "train.epochs=40", "--set", "snapshots.every=20", *PNG_ONLY]


@pytest.fixture(scope="module")
def outputs(finished, finished_lm, tmp_path_factory) -> dict[str, Path]:
    """One finished output of each kind that keeps a record (the run and the LM run are the session's)."""
    root = tmp_path_factory.mktemp("outputs")
    assert main([*SWEEP, "--out", str(root / "sweep")]) == 0
    assert main(["analyze-model", str(finished_lm), "--k", "20", "--windows", "4", "--path-windows", "2",
                 "--probe-steps", "20", *PNG_ONLY, "--out", str(root / "series")]) == 0
    tokenizer = TextTokenizer.named(str(finished_lm / "tokenizer.json"))
    ids = np.random.default_rng(0).integers(0, tokenizer.vocab_size, 20_000, dtype=np.uint16)
    np.save(root / "ids.npy", ids)
    assert main(["corpus", "count", str(root / "ids.npy"), "--tokenizer", str(finished_lm / "tokenizer.json"),
                 "--window", "16", "--k", "10", "--out", str(root / "stats")]) == 0
    return {"run": finished, "lm": finished_lm, **{kind: root / kind for kind in ("sweep", "series", "stats")}}


def records(output: Path) -> list[Path]:
    return sorted(path.parent for path in output.rglob(RECORD))


def verify(path: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


KINDS = ["run", "lm", "sweep", "series", "stats"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_file_of_a_finished_output_is_recorded_and_sha256sum_agrees(outputs, kind, capsys):
    output = outputs[kind]
    folders = records(output)
    assert output in folders
    covered = [folder / name for folder in folders for name in read_record(folder)]
    every = [path for path in output.rglob("*") if path.is_file() and path.name != RECORD]
    assert sorted(covered) == sorted(every)
    for folder in folders:
        subprocess.run(["sha256sum", "--check", "--quiet", "--strict", RECORD], cwd=folder, check=True)
    code, said = verify(output, capsys)
    assert code == 0 and f"{len(covered)} files in {len(folders)} record(s) verified" in said, said
    if kind == "lm":
        assert output / "hf_model" in folders  # the exported model is an output with its own record
    if kind == "sweep":
        assert len(folders) == 3  # the sweep and its two cells


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", KINDS)
def test_verify_names_every_file_changed_by_one_byte(outputs, kind, tmp_path, capsys):
    copy = tmp_path / kind
    shutil.copytree(outputs[kind], copy)
    for folder in records(copy):
        for path in recorded_files(folder).values():
            original = path.read_bytes()
            flip_a_byte(path)
            code, said = verify(copy, capsys)
            path.write_bytes(original)
            assert code == 2 and said.count("\n") == 1 and "Traceback" not in said, said
            assert str(path) in said, said


def test_verify_names_a_metrics_row_whose_key_was_changed(outputs, tmp_path, capsys):
    """A changed byte can leave ``metrics.jsonl`` valid JSON with a key renamed (``"loss"`` → ``"lors"``,
    which a byte in the middle of the file became on one machine): the stuck-writer check reads the
    losses before the record is checked, and names the row instead of raising a KeyError."""
    run = tmp_path / "run"
    shutil.copytree(outputs["run"], run)
    metrics = run / "metrics.jsonl"
    text = metrics.read_text()
    metrics.write_text(text.replace('"loss"', '"lors"', 1))
    code, said = verify(run, capsys)
    assert code == 2 and said.count("\n") == 1 and "Traceback" not in said, said
    assert f"{metrics}: row 1 has no loss" in said, said


def test_verify_names_a_removed_and_an_added_file(outputs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(outputs["run"], run)
    (run / "summary.json").unlink()
    code, said = verify(run, capsys)
    assert code == 2 and f"{run / 'summary.json'} is missing although {run / RECORD} lists it" in said, said
    shutil.copy(outputs["run"] / "summary.json", run / "summary.json")
    (run / "figures" / "mine.png").write_bytes(b"a figure of my own")
    code, said = verify(run, capsys)
    assert code == 2 and f"{run / 'figures' / 'mine.png'} is not in {run / RECORD}" in said, said


def test_a_report_written_again_keeps_the_record_current(outputs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(outputs["run"], run)
    (run / "report.html").unlink()
    assert main(["report", str(run), *PNG_ONLY]) == 0
    assert verify(run, capsys)[0] == 0


def test_a_kill_between_a_file_and_its_record_entry_is_made_good_by_resume(finished, tmp_path, monkeypatch, capsys):
    """The analysis's alignment.csv is written into a recorded run and its entry added; a kill between
    the two, then ``--resume`` (which skips an analysis whose file exists), ends with the files and the
    record of the uninterrupted run."""
    out = tmp_path / "run"
    note = io._note_written

    def stop_at_the_alignment(path, data):
        if path.name == "alignment.csv":
            raise Killed
        note(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(io, "_note_written", stop_at_the_alignment)
        with pytest.raises(Killed):
            main([*SHORT_RUN, "--out", str(out)])
    assert main([*SHORT_RUN, "--out", str(out), "--resume"]) == 0
    assert run_contents(out) == run_contents(finished)
    assert verify(out, capsys)[0] == 0
