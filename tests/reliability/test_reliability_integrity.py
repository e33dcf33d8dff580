"""Artefact integrity: SHA-256 manifests of snapshots and checkpoints, checked on
every load and by `ctxstair verify`; corrupted, truncated, uncommitted and stuck-writer files are
caught with a message naming the file."""

import hashlib
import json
import shutil

import pytest

from ctxstair import rundir
from ctxstair.analysis import analyse
from ctxstair.cli import main
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.errors import InputError
from ctxstair.lm.train import train_lm
from ctxstair.train import train_run
from ctxstair.verify import verify_run

SMALL = {"task.N": 6, "model.d": 8, "train.epochs": 60, "snapshots.log_points": 4, "snapshots.every": 20,
         "train.optimizer": "adam", "train.lr": 0.01}
TINY_LM = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
           "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 20,
           "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 3, "snapshots.every": 10,
           "analysis.enabled": False}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(apply_overrides(RunConfig(), SMALL), tmp_path_factory.mktemp("run") / "run", progress=False)


@pytest.fixture
def run(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def verify(path, capsys) -> tuple[int, str, str]:
    code = main(["verify", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_manifest_records_every_snapshot(run, capsys):
    manifest = json.loads((run / "snapshots" / "manifest.json").read_text())
    assert manifest["algorithm"] == "sha256"
    files = sorted(p.name for p in (run / "snapshots").glob("epoch_*.safetensors"))
    assert sorted(manifest["files"]) == files
    for name in files:
        assert manifest["files"][name] == hashlib.sha256((run / "snapshots" / name).read_bytes()).hexdigest()
    code, out, _ = verify(run, capsys)
    assert code == 0 and out.startswith(f"ok: 1 run(s), {len(files)} snapshots")


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_damaged_snapshot_is_named_on_load_and_by_verify(run, capsys, damage):
    path = rundir.snapshot_path(run, 20)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01  # one bit in the tensor data: still a valid safetensors file
    path.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate"
                     else b"" if damage == "empty" else bytes(data))
    with pytest.raises(InputError, match=f"{path}.* is corrupted or truncated"):
        rundir.load_snapshot(run, 20)
    with pytest.raises(InputError, match="corrupted or truncated"):
        analyse(run, ["alignment"])
    code, _, err = verify(run, capsys)
    assert code == 2 and str(path) in err and err.count("\n") == 1
    assert not (run / "alignment.csv").exists()


def test_snapshot_missing_from_the_manifest_is_refused(run, capsys):
    manifest_path = run / "snapshots" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["files"]["epoch_00000020.safetensors"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="not in .*manifest.json: it was not completely written"):
        rundir.load_snapshot(run, 20)


def test_stuck_writer_is_flagged(run, capsys):
    """The writer of epoch 40 wrote epoch 20's bytes again (and recorded their hash) although the
    loss moved between the two epochs."""
    manifest_path = run / "snapshots" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    shutil.copyfile(rundir.snapshot_path(run, 20), rundir.snapshot_path(run, 40))
    manifest["files"]["epoch_00000040.safetensors"] = manifest["files"]["epoch_00000020.safetensors"]
    manifest_path.write_text(json.dumps(manifest))
    rundir.load_snapshot(run, 40)  # each file alone is consistent with the manifest
    with pytest.raises(InputError,
                       match="epoch_00000020.safetensors and .*epoch_00000040.safetensors are byte-identical"):
        analyse(run, ["alignment"])
    code, _, err = verify(run, capsys)
    assert code == 2 and "byte-identical" in err


def test_unchanged_weights_are_not_flagged(tmp_path):
    """A learning rate too small to change a float32 weight: every snapshot holds the same arrays,
    but each records its epoch, so the files differ and nothing is flagged as a stuck writer."""
    cfg = apply_overrides(RunConfig(), {**SMALL, "train.optimizer": "sgd", "train.lr": 1e-300})
    run = train_run(cfg, tmp_path / "still", progress=False)
    arrays = [rundir.load_snapshot(run, e)["W_E"] for e in rundir.snapshot_times(run)]
    assert all((a == arrays[0]).all() for a in arrays)
    files = json.loads((run / "snapshots" / "manifest.json").read_text())["files"]
    assert len(set(files.values())) == len(files)
    rundir.check_snapshot_progress(run)


def test_corrupted_checkpoint_is_refused_on_resume(tmp_path):
    cfg = apply_overrides(RunConfig(), SMALL)

    def stop_at_30(epoch):
        if epoch == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "run", hook=stop_at_30, progress=False)
    state = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    tensors = tmp_path / "run" / "checkpoint" / state["tensors"]
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0xFF
    tensors.write_bytes(bytes(data))
    with pytest.raises(InputError, match=f"{tensors}.* is corrupted or truncated"):
        train_run(cfg, tmp_path / "run", resume=True, progress=False)
    assert main(["verify", str(tmp_path / "run")]) == 2
    tensors.unlink()
    with pytest.raises(InputError, match=f"{tensors} is missing although .*state.json names it"):
        verify_run(tmp_path / "run")


def test_language_model_snapshots_and_checkpoints_are_verified(tmp_path, capsys):
    cfg = apply_overrides(LMConfig(), TINY_LM)
    run = train_lm(cfg, tmp_path / "lm")
    step = rundir.snapshot_times(run)[1]
    code, out, _ = verify(run, capsys)
    assert code == 0 and f"{len(rundir.snapshot_times(run))} snapshots" in out
    path = run / "snapshots" / f"step_{step:08d}.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(InputError, match="corrupted or truncated"):
        rundir.load_snapshot(run, step)
    assert verify(run, capsys)[0] == 2

    def stop_at_15(s):
        if s == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_lm(cfg, tmp_path / "resumable", hook=stop_at_15)
    state = json.loads((tmp_path / "resumable" / "checkpoint" / "state.json").read_text())
    checkpoint = tmp_path / "resumable" / "checkpoint" / state["tensors"]
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    with pytest.raises(InputError, match="corrupted or truncated"):
        train_lm(cfg, tmp_path / "resumable", resume=True)


def test_verify_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    code, _, err = verify(tmp_path, capsys)
    assert code == 2 and "is not a ctxstair run, recipe, sweep, series or statistics directory" in err


@pytest.mark.parametrize("record", ['{"step": 10, "file": "state_00000010.pt"}', "not json", '["state.safetensors"]'])
def test_verify_refuses_a_checkpoint_record_it_cannot_read(tmp_path, capsys, record):
    """A `state.json` that is not JSON naming a tensor file (e.g. the pickled checkpoints older
    language-model runs wrote) is refused in one line, not with a traceback."""
    (tmp_path / "config.yaml").write_text("recipe: custom\n")
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.json").write_text(record)
    code, _, err = verify(tmp_path, capsys)
    assert code == 2 and "is not a checkpoint record" in err and err.count("\n") == 1
