"""The run directory's last step (``ctxstair.run.Run.finish``): a training killed while it finishes —
after the checkpoint is dropped, before ``resources.json`` or the record is written — is finished by
``--resume``, with the files and the record of an uninterrupted run, for both trainers and for a run
that replaces an earlier one (``--force``).

The kill tests (tests/reliability/test_reliability_kill.py, test_reliability_stress.py) land at random
moments and found this window once in 140 kills under load; here each moment is hit on purpose."""

from pathlib import Path

import pytest
from lm_helpers import tiny
from recipe_helpers import run_contents
from stand_ins import Killed

from ctxstair.config import RunConfig, apply_overrides
from ctxstair.io import RECORD, read_record
from ctxstair.lm.train import train_lm
from ctxstair.run import CHECKPOINT_DIR, Run
from ctxstair.train import train_run

ENGINE = {"task.N": 6, "model.d": 8, "train.epochs": 40, "snapshots.every": 20}


def kill_inside_finish(monkeypatch, moment: str) -> None:
    """Make the next :meth:`Run.finish` stop at ``moment``: ``half-dropped`` (the checkpoint's commit
    point removed, its files not yet), ``dropped`` (the checkpoint removed) or ``resources`` (also
    ``resources.json`` written, the record not yet)."""
    clear = Run.clear_checkpoint

    def clear_then_stop(run):
        if moment == "half-dropped":
            (run.path / CHECKPOINT_DIR / "state.json").unlink()
            raise Killed
        clear(run)
        if moment == "dropped":
            raise Killed

    def stop_before_commit(run):
        raise Killed

    monkeypatch.setattr(Run, "clear_checkpoint", clear_then_stop)
    if moment == "resources":
        monkeypatch.setattr(Run, "_commit", stop_before_commit)


def train(trainer: str, out: Path, **options) -> Path:
    if trainer == "engine":
        return train_run(apply_overrides(RunConfig(), ENGINE), out, **options)
    return train_lm(tiny(**{"analysis.enabled": False}), out, **options)


@pytest.mark.parametrize("moment", ["half-dropped", "dropped", "resources"])
@pytest.mark.parametrize("trainer", ["engine", "lm"])
def test_a_run_killed_while_it_finishes_is_finished_by_resume(trainer, moment, tmp_path, monkeypatch):
    reference = train(trainer, tmp_path / "reference")
    with monkeypatch.context() as patch:
        kill_inside_finish(patch, moment)
        with pytest.raises(Killed):
            train(trainer, tmp_path / "run")
    out = tmp_path / "run"
    assert not (out / RECORD).exists()  # the window: a resume used to take this run for finished as it was
    assert train(trainer, out, resume=True) == out
    assert run_contents(out) == run_contents(reference)
    assert (out / "resources.json").is_file() and "resources.json" in read_record(out)


@pytest.mark.parametrize("trainer", ["engine", "lm"])
def test_a_replacement_killed_while_it_finishes_takes_the_old_runs_place_on_resume(trainer, tmp_path, monkeypatch):
    reference = train(trainer, tmp_path / "reference")
    out = tmp_path / "run"
    (out / "old").mkdir(parents=True)  # an earlier run in the way, replaced with --force
    (out / "old" / "note.txt").write_text("the earlier run")
    with monkeypatch.context() as patch:
        kill_inside_finish(patch, "resources")
        with pytest.raises(Killed):
            train(trainer, out, force=True)
    assert (out / "old" / "note.txt").is_file()  # kept until the replacement is complete
    assert train(trainer, out, resume=True) == out
    assert run_contents(out) == run_contents(reference)
