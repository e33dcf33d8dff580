"""The training engine: snapshot schedule, run directory, determinism, interruption and
resume, refusal of existing directories, ensembles, and the loss at small initialization."""

import csv
import hashlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from recipe_helpers import run_contents as contents

from ctxstair import rundir, tasks
from ctxstair.config import RunConfig, apply_overrides, load_yaml
from ctxstair.errors import InputError
from ctxstair.io import RECORD, read_record
from ctxstair.models import build_ensemble
from ctxstair.run import Run
from ctxstair.train import member_losses, snapshot_schedule, train_run

EPOCHS = 60
BASE = {"task.N": 8, "model.d": 32, "train.epochs": EPOCHS, "snapshots.every": 20, "analysis.enabled": False}
SCHEDULE = snapshot_schedule(EPOCHS, 16, 20)  # [0..7, 9, 11, 13, 16, 20, 40, 60]


def config(**overrides) -> RunConfig:
    return apply_overrides(RunConfig(), {**BASE, **{k.replace("__", "."): v for k, v in overrides.items()}})


OPTIMIZERS = {
    "gd": config(train__optimizer="gd", train__lr=2.0),
    "sgd": config(train__optimizer="sgd", train__lr=0.5, train__batch_size=24, train__momentum=0.9),
    "adam": config(train__optimizer="adam", train__lr=0.01),
    "adamw": config(train__optimizer="adamw", train__lr=0.01, train__weight_decay=0.1),
    # the attention-only model (SPEC §5) through the same engine: seven tensors per member
    "attention-adam": config(model__kind="attention", model__d_k=16, train__optimizer="adam", train__lr=0.01),
}


def stop_at(epoch):
    def hook(e):
        if e == epoch:
            raise KeyboardInterrupt
    return hook


def state(run: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and modification time of every file, to show that nothing was touched."""
    return {p.relative_to(run).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(run.rglob("*"))
            if p.is_file()}


def metric_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run per optimizer."""
    root = tmp_path_factory.mktemp("reference")
    return {name: contents(train_run(cfg, root / name, progress=False)) for name, cfg in OPTIMIZERS.items()}


# ---------------------------------------------------------------- snapshot schedule

@pytest.mark.parametrize("epochs,log_points,every", [(3000, 16, 100), (60, 16, 20), (250, 8, 100), (60, 16, 100),
                                                     (1000, 0, 100), (1, 16, 100), (17, 5, 4)])
def test_snapshot_schedule(epochs, log_points, every):
    s = snapshot_schedule(epochs, log_points, every)
    assert s == sorted(set(s)) and all(isinstance(e, int) for e in s)
    assert s[0] == 0 and s[-1] == epochs and all(0 <= e <= epochs for e in s)
    assert set(range(every, epochs + 1, every)) <= set(s)
    early = [e for e in s if 0 < e < every and e != epochs]
    late = [e for e in s if e > every and e != epochs]
    assert all(e % every == 0 for e in late)  # after the log-spaced start only multiples of `every`
    if log_points == 0:
        assert early == []
    else:
        assert len(early) <= log_points and (early[:1] == [1] or epochs == 1)
        # log spacing: consecutive early points grow by about the factor every^(1/(log_points-1))
        factor = every ** (1 / (log_points - 1))
        assert all(b / a <= max(2.0, 1.2 * factor) for a, b in zip(early, early[1:]))


def test_snapshot_schedule_is_dense_early_and_sparse_late():
    s = snapshot_schedule(3000, 16, 100)
    assert [e for e in s if e <= 10] == [0, 1, 2, 3, 5, 6, 9]
    assert len([e for e in s if 0 < e < 100]) >= 12  # most of the 16 log points survive rounding
    assert len([e for e in s if 50 < e < 100]) <= 3
    assert [e for e in s if e >= 2800] == [2800, 2900, 3000]


def test_engine_snapshots_at_the_schedule(tmp_path):
    run = train_run(config(train__epochs=45), tmp_path / "r", progress=False)
    assert rundir.snapshot_times(run) == snapshot_schedule(45, 16, 20)
    assert 45 in rundir.snapshot_times(run) and 40 in rundir.snapshot_times(run)


# ---------------------------------------------------------------- run directory contents

def test_run_directory_contents(tmp_path):
    cfg = config(train__members=2, train__seed=4, model__init__gamma=0.75, model__init__unembedding=1.25)
    run = train_run(cfg, tmp_path / "run", progress=False)
    names = sorted(p.name for p in run.iterdir())
    assert names == ["config.yaml", "ctxstair.sha256", "members.csv", "metrics.jsonl", "resources.json",
                     "signatures.npz", "snapshots"]
    listed = read_record(run)  # every file but the record, with its SHA-256
    assert sorted(listed) == sorted(p.relative_to(run).as_posix() for p in run.rglob("*")
                                    if p.is_file() and p.name != RECORD)
    assert all(listed[name] == hashlib.sha256((run / name).read_bytes()).hexdigest() for name in listed)
    assert set(json.loads((run / "resources.json").read_text())) == {"peak_rss_mib", "seconds", "numerics", "plan"}
    assert not (run / "checkpoint").exists()
    assert not [p for p in run.rglob("*") if p.name.startswith(".")]  # no temporary files left

    assert load_yaml((run / "config.yaml").read_text()) == cfg

    members = list(csv.DictReader(io.StringIO((run / "members.csv").read_text())))
    assert list(members[0]) == ["member", "seed", "d", "gamma_embedding", "gamma_unembedding", "init_std_W_E",
                                "init_std_W_U"]
    assert [(r["member"], r["seed"], r["d"]) for r in members] == [("0", "4", "32"), ("1", "5", "32")]
    assert {(float(r["gamma_embedding"]), float(r["gamma_unembedding"])) for r in members} == {(0.75, 1.25)}
    init = rundir.load_snapshot(run, 0)
    for k, r in enumerate(members):
        # the recorded std is the realised std of the tensors at step 0, close to d^-γ
        assert float(r["init_std_W_E"]) == pytest.approx(init["W_E"][k].astype(np.float64).std(ddof=1), rel=1e-5)
        assert float(r["init_std_W_U"]) == pytest.approx(init["W_U"][k].astype(np.float64).std(ddof=1), rel=1e-5)
        assert float(r["init_std_W_E"]) == pytest.approx(32 ** -0.75, rel=0.15)
        assert float(r["init_std_W_U"]) == pytest.approx(32 ** -1.25, rel=0.15)

    rows = metric_rows(run)
    assert all(set(r) == {"member", "epoch", "loss", "acc"} for r in rows)
    assert sorted((r["member"], r["epoch"]) for r in rows) == [(m, e) for m in range(2) for e in range(EPOCHS + 1)]
    n = tasks.make("add", N=8).n_samples
    assert all(0 <= r["acc"] <= 1 and abs(r["acc"] * n - round(r["acc"] * n)) < 1e-9 for r in rows)
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in rows)

    V = tasks.make("add", N=8).vocab_size
    assert rundir.snapshot_times(run) == SCHEDULE
    for epoch in SCHEDULE:
        snap = rundir.load_snapshot(run, epoch)
        assert sorted(snap) == ["W_E", "W_U"]
        assert snap["W_E"].shape == (2, V, 32) and snap["W_U"].shape == (2, V, 32)
        assert snap["W_E"].dtype == np.float32


def test_snapshot_of_epoch_e_has_the_logged_loss_of_epoch_e(tmp_path):
    """Epoch e in metrics.jsonl and in snapshots/ means the same parameters: after e updates."""
    cfg = OPTIMIZERS["adam"]
    run = train_run(cfg, tmp_path / "r", progress=False)
    dataset = tasks.make("add", N=8)
    model = build_ensemble(cfg, dataset)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    logged = {r["epoch"]: r for r in metric_rows(run)}
    init = rundir.load_snapshot(run, 0)
    assert np.array_equal(init["W_E"], model.W_E.detach().numpy())  # epoch 0 is the initialization
    for epoch in (0, 1, 20, EPOCHS):
        snap = rundir.load_snapshot(run, epoch)
        with torch.no_grad():
            model.W_E.copy_(torch.from_numpy(snap["W_E"]))
            model.W_U.copy_(torch.from_numpy(snap["W_U"]))
            loss, acc = member_losses(model, X, y)
        assert float(loss[0]) == pytest.approx(logged[epoch]["loss"], rel=1e-6)
        assert float(acc[0]) == logged[epoch]["acc"]
    assert logged[1]["loss"] != logged[0]["loss"]


def test_float64_runs_store_float64(tmp_path):
    run = train_run(config(train__dtype="float64", train__epochs=5), tmp_path / "r", progress=False)
    assert rundir.load_snapshot(run, 5)["W_E"].dtype == np.float64


# ---------------------------------------------------------------- determinism

def test_runs_are_bitwise_deterministic_and_depend_on_the_seed(tmp_path):
    cfg = OPTIMIZERS["sgd"]  # minibatches: the shuffling is seeded as well
    a = contents(train_run(cfg, tmp_path / "a", progress=False))
    b = contents(train_run(cfg, tmp_path / "b", progress=False))
    assert a == b
    assert len([k for k in a if k.startswith("snapshots/") and k.endswith(".safetensors")]) == len(SCHEDULE)
    assert "snapshots/manifest.json" in a
    other = apply_overrides(cfg, {"train.seed": 1})
    c = contents(train_run(other, tmp_path / "c", progress=False))
    assert c["metrics.jsonl"] != a["metrics.jsonl"]
    assert all(c[k] != a[k] for k in a if k.startswith("snapshots/"))
    assert c["members.csv"] != a["members.csv"]


# ---------------------------------------------------------------- interruption and resume

@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("stop", [0, 1, 8, 21, 33, 40, EPOCHS])
def test_resume_after_interruption_is_bitwise_identical(tmp_path, reference, optimizer, stop):
    """Interrupt at the start of epoch `stop`: at 0/1, right after a checkpoint (8 after 7, 21 after
    20), between checkpoints (33), at a checkpoint epoch before it is written (40) and at the end."""
    cfg, run = OPTIMIZERS[optimizer], tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, hook=stop_at(stop), progress=False)
    if stop > 0:
        assert (run / "checkpoint" / "state.json").is_file()
        last = max(e for e in SCHEDULE if e < stop)
        assert json.loads((run / "checkpoint" / "state.json").read_text())["epoch"] == last
        assert rundir.snapshot_times(run) == [e for e in SCHEDULE if e <= last]
        # metrics.jsonl holds the epochs before the checkpoint
        assert [r["epoch"] for r in metric_rows(run)] == list(range(last))
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == reference[optimizer]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_second_interruption_during_resumed_run(tmp_path, reference, optimizer):
    cfg, run = OPTIMIZERS[optimizer], tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, hook=stop_at(13), progress=False)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, resume=True, hook=stop_at(47), progress=False)
    assert json.loads((run / "checkpoint" / "state.json").read_text())["epoch"] == 40
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == reference[optimizer]


class Boom(KeyboardInterrupt):
    pass


def fail_once(real, when):
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if when(calls["n"], args):
            raise Boom
        return real(*args, **kwargs)
    return wrapper


@pytest.mark.parametrize("target,when", [
    ("save_checkpoint", lambda n, args: n == 1),           # the very first checkpoint is never committed
    ("save_checkpoint", lambda n, args: args[1] == 40),     # a later one
])
def test_interruption_while_checkpointing(tmp_path, reference, monkeypatch, target, when):
    cfg, run = OPTIMIZERS["adam"], tmp_path / "run"
    monkeypatch.setattr(Run, target, fail_once(getattr(Run, target), when))
    with pytest.raises(Boom):
        train_run(cfg, run, progress=False)
    monkeypatch.undo()
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == reference["adam"]


def test_interruption_while_writing_a_snapshot(tmp_path, reference, monkeypatch):
    cfg, run = OPTIMIZERS["sgd"], tmp_path / "run"
    monkeypatch.setattr(rundir, "save_snapshot", fail_once(rundir.save_snapshot, lambda n, args: args[1] == 20))
    with pytest.raises(Boom):
        train_run(cfg, run, progress=False)
    monkeypatch.undo()
    assert 20 not in rundir.snapshot_times(run)
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == reference["sgd"]


# ---------------------------------------------------------------- existing directories

def test_existing_directory_is_refused_untouched_unless_forced(tmp_path):
    cfg = OPTIMIZERS["adam"]
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    before = state(out)
    with pytest.raises(InputError, match="already exists"):
        train_run(cfg, out, progress=False)
    assert state(out) == before
    train_run(cfg, out, force=True, progress=False)
    assert not (out / "mine.txt").exists() and (out / "metrics.jsonl").is_file()
    # a completed run is refused too, and left as it is
    before = state(out)
    with pytest.raises(InputError, match="--resume.*--force"):
        train_run(cfg, out, progress=False)
    assert state(out) == before


def test_resume_with_a_different_config_is_refused(tmp_path):
    cfg, run = OPTIMIZERS["adam"], tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, hook=stop_at(30), progress=False)
    before = state(run)
    for other in (apply_overrides(cfg, {"train.lr": 0.02}), apply_overrides(cfg, {"task.N": 9}),
                  apply_overrides(cfg, {"train.epochs": 80})):
        with pytest.raises(InputError, match="differs"):
            train_run(other, run, resume=True, progress=False)
        assert state(run) == before


def test_resume_without_a_run_starts_it_and_a_foreign_directory_is_refused(tmp_path):
    started = contents(train_run(OPTIMIZERS["adam"], tmp_path / "nothing", resume=True, progress=False))
    assert started == contents(train_run(OPTIMIZERS["adam"], tmp_path / "fresh", progress=False))
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="cannot resume .*config.yaml missing"):
        train_run(OPTIMIZERS["adam"], tmp_path / "foreign", resume=True, progress=False)
    assert [p.name for p in (tmp_path / "foreign").iterdir()] == ["notes.txt"]


def test_resume_of_a_completed_run_is_a_no_op(tmp_path):
    cfg = OPTIMIZERS["gd"]
    run = train_run(cfg, tmp_path / "run", progress=False)
    before = state(run)
    assert train_run(cfg, run, resume=True, progress=False) == run
    assert state(run) == before


def test_bad_config_writes_nothing(tmp_path):
    cfg = apply_overrides(OPTIMIZERS["adam"], {"task.N": -1})  # apply_overrides leaves task params to the task
    with pytest.raises(InputError, match="'N'"):
        train_run(cfg, tmp_path / "run", progress=False)
    cfg = apply_overrides(OPTIMIZERS["adam"], {})
    cfg.train.lr = -1.0  # bypasses apply_overrides: train_run validates on its own
    with pytest.raises(InputError, match="train.lr"):
        train_run(cfg, tmp_path / "run", progress=False)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- ensembles

@pytest.mark.parametrize("optimizer", ["adam", "gd", "attention-adam"])
def test_ensemble_members_equal_separate_runs(tmp_path, optimizer):
    """Full batch: member k of an ensemble with seeds 0,1,2 is the run with seed k alone. Observed
    bitwise equal on CPU (the batched matmuls reduce each member exactly as a single one); asserted to
    1e-6 relative for float32 so that another BLAS may reorder sums. The attention model's batched
    matmul chain does reorder them (float32 losses differed by 1e-4 relative after 60 Adam epochs,
    rounding amplified by Adam's normalised steps), so it is compared in float64."""
    dtype = "float64" if optimizer.startswith("attention") else "float32"
    cfg = apply_overrides(OPTIMIZERS[optimizer], {"train.members": 3, "train.dtype": dtype})
    ens = train_run(cfg, tmp_path / "ens", progress=False)
    rows = metric_rows(ens)
    for k in range(3):
        alone = train_run(apply_overrides(cfg, {"train.members": 1, "train.seed": k}), tmp_path / f"s{k}",
                          progress=False)
        mine = [r for r in rows if r["member"] == k]
        theirs = metric_rows(alone)
        assert [r["epoch"] for r in mine] == [r["epoch"] for r in theirs]
        np.testing.assert_allclose([r["loss"] for r in mine], [r["loss"] for r in theirs], rtol=1e-6, atol=0)
        np.testing.assert_array_equal([r["acc"] for r in mine], [r["acc"] for r in theirs])
        for epoch in (0, 20, EPOCHS):
            np.testing.assert_allclose(rundir.load_snapshot(ens, epoch)["W_E"][k],
                                       rundir.load_snapshot(alone, epoch)["W_E"][0], rtol=1e-5, atol=1e-7)
    # the members differ from each other
    assert len({r["loss"] for r in rows if r["epoch"] == EPOCHS}) == 3


# ---------------------------------------------------------------- small initialization

def test_initial_loss_is_ln_V_and_training_decreases_it(tmp_path):
    cfg = OPTIMIZERS["adam"]  # γ = 1
    run = train_run(cfg, tmp_path / "r", progress=False)
    V = tasks.make("add", N=8).vocab_size
    loss = [r["loss"] for r in metric_rows(run)]
    assert loss[0] == pytest.approx(math.log(V), abs=2e-3)
    assert loss[-1] < loss[0] - 0.3
    assert all(b <= a + 1e-6 for a, b in zip(loss, loss[1:]))  # full-batch Adam at lr 0.01 descends
    # γ = 0.25 (large init) starts far from ln V
    big = train_run(apply_overrides(cfg, {"model.init.gamma": 0.25}), tmp_path / "big", progress=False)
    assert abs(metric_rows(big)[0]["loss"] - math.log(V)) > 0.05


# ---------------------------------------------------------------- training without snapshot files

@pytest.mark.parametrize("stop", [8, 33])
def test_no_snapshot_run_resumes_bitwise_and_writes_no_snapshots(tmp_path, reference, stop):
    """``snapshots.save=false`` (``ctxstair run --no-analysis``): the same checkpoints, metrics and
    members as a run with snapshots, no snapshot files, and bitwise resume."""
    cfg, run = apply_overrides(OPTIMIZERS["adam"], {"snapshots.save": False}), tmp_path / "run"
    whole = train_run(cfg, tmp_path / "whole", progress=False)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, hook=stop_at(stop), progress=False)
    assert json.loads((run / "checkpoint" / "state.json").read_text())["epoch"] == max(e for e in SCHEDULE if e < stop)
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == contents(whole)
    assert rundir.snapshot_times(run) == [] and not (run / "snapshots").exists()
    with_snapshots = {k: v for k, v in reference["adam"].items() if not k.startswith("snapshots/")}
    assert without_config(contents(run)) == without_config(with_snapshots)


def without_config(files: dict[str, bytes]) -> dict[str, bytes]:
    """A run's files without ``config.yaml``, and its record without the lines of ``config.yaml`` and
    the snapshots (which a run without snapshots has not)."""
    kept = {name: data for name, data in files.items() if name != "config.yaml"}
    kept[RECORD] = b"".join(line for line in kept[RECORD].splitlines(keepends=True)
                            if not line.endswith(b"  config.yaml\n") and b"  snapshots/" not in line)
    return kept


def test_accuracy_counts_the_first_largest_logit_as_the_prediction():
    """Against a brute-force reading of every row: the prediction is the first index of the largest
    logit, a NaN being larger than anything (argmax's rule), on logits full of ties, infinities and NaNs."""
    from ctxstair.train.engine import accuracies

    def first_largest(row: list[float]) -> int:
        nan = [j for j, v in enumerate(row) if math.isnan(v)]
        return nan[0] if nan else row.index(max(row))

    g = torch.Generator().manual_seed(0)
    for trial in range(60):
        K, n, V = (int(v) for v in torch.randint(1, 12, (3,), generator=g))
        logits = torch.randint(-2, 2, (K, n, V), generator=g).double()
        for value, share in ((math.nan, 0.05 * (trial % 2)), (math.inf, 0.05), (-math.inf, 0.05)):
            logits[torch.rand(logits.shape, generator=g) < share] = value
        y = torch.randint(0, V, (n,), generator=g)
        expected = [sum(first_largest(logits[k, i].tolist()) == y[i] for i in range(n)) / n for k in range(K)]
        assert accuracies(logits, y).tolist() == expected
