"""The lineage recipes of SPEC §9 (``composite``, ``reason-memory``) at seconds-long settings, read back
from the files they write and checked against numbers recomputed here from the snapshots; the
measures on hand-made inputs; full-size runs are marked slow."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from recipe_helpers import check_report, recipe_runner, summary

from ctxstair import rundir, tasks
from ctxstair.alignment import mean_cosine
from ctxstair.config import load_yaml
from ctxstair.models import CBOWEnsemble, MemberSpec, build_ensemble
from ctxstair.recipes import run_recipe
from ctxstair.recipes.anchor_lineage import order_along_pc1, part_name
from ctxstair.recipes.reason_memory import halving_epoch, order_blind_ceiling

SMALL = {
    # 3 γ parts × 2 seeds; a few hundred samples and 60 epochs: ≈ 6 s each. Nothing is learned yet;
    # the tests check the bookkeeping, not the science.
    "composite": {"task.n_samples": 300, "task.n_eval": 200, "train.epochs": 60, "snapshots.every": 20},
    "reason-memory": {"task.n_samples": 600, "task.n_eval": 200, "train.epochs": 60, "snapshots.every": 20},
}
COMPOSITE_COLUMNS = ["gamma", "seed", "inferential_fraction", "symmetric_fraction", "other_fraction",
                     "train_accuracy", "key_pc1_spearman"]
REASON_COLUMNS = ["gamma", "seed", "half_epoch_reasoning", "half_epoch_memory", "max_loss_gap", "acc_reasoning",
                  "acc_memory",
                  "heldout_accuracy", "reasoning_pc1_spearman", "cos_reasoning", "cos_memory"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return recipe_runner(tmp_path_factory.mktemp("lineage"), SMALL, seeds=2)




def table(out: Path) -> list[dict]:
    with open(out / "summary.csv") as f:
        return list(csv.DictReader(f))


def final_predictions(run: Path, X: np.ndarray) -> np.ndarray:
    """Argmax (K, n) of every member at the last snapshot, through the engine's model (not the recipe's helper)."""
    cfg = load_yaml((run / "config.yaml").read_text())
    model = build_ensemble(cfg, tasks.make(cfg.task.name, **cfg.task.params))
    weights = rundir.load_snapshot(run, rundir.snapshot_times(run)[-1])
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    with torch.no_grad():
        return model(torch.from_numpy(X)).argmax(dim=-1).numpy()




# ---------------------------------------------------------------- composite

def test_composite_parts_and_summary_csv(runs):
    out = runs("composite")
    assert json.loads((out / "recipe.json").read_text())["parts"] == ["gamma-0.3", "gamma-0.5", "gamma-0.8"]
    rows = table(out)
    assert list(rows[0]) == COMPOSITE_COLUMNS
    assert [(float(r["gamma"]), int(r["seed"])) for r in rows] == [(g, s) for g in (0.3, 0.5, 0.8) for s in (0, 1)]
    for r in rows:
        parts = [float(r[c]) for c in ("inferential_fraction", "symmetric_fraction", "other_fraction")]
        assert all(0 <= p <= 1 for p in parts) and sum(parts) == pytest.approx(1.0)
    for part in ("gamma-0.3", "gamma-0.5", "gamma-0.8"):
        cfg = load_yaml((out / part / "config.yaml").read_text())
        assert cfg.model.kind == "attention" and cfg.model.positional and cfg.train.members == 2
        assert f"gamma-{cfg.model.init.gamma:g}" == part
        assert not (out / part / "alignment.csv").exists()  # the analysis is skipped
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == ["answers.png", "keys_pca.png", "training.png"]
    check_report(out)


def test_composite_heldout_evaluation(runs):
    """The fractions are those of the task's held-out (4, 3) samples against x − 10 and x − 6."""
    out = runs("composite")
    rows = table(out)
    for part in ("gamma-0.3", "gamma-0.5", "gamma-0.8"):
        run = out / part
        cfg = load_yaml((run / "config.yaml").read_text())
        dataset = tasks.make(cfg.task.name, **cfg.task.params)
        held = dataset.meta["eval"]["heldout_pair"]
        X = held["X"]
        assert len(X) == 200 and (X[:, 1:] == [4, 3]).all()  # seq_len 3: key, then the pair (4, 3)
        assert not ((dataset.X[:, 1] == 4) & (dataset.X[:, 2] == 3)).any()  # never in training
        assert ((dataset.X[:, 1] == 3) & (dataset.X[:, 2] == 4)).any()
        pred = final_predictions(run, X)
        gamma_rows = [r for r in rows if float(r["gamma"]) == cfg.model.init.gamma]
        for k, r in enumerate(gamma_rows):
            assert float(r["inferential_fraction"]) == pytest.approx((pred[k] == X[:, 0] - 10).mean())
            assert float(r["symmetric_fraction"]) == pytest.approx((pred[k] == X[:, 0] - 6).mean())
            metrics = rundir.read_metrics(run)
            last = (metrics["member"] == k) & (metrics["epoch"] == cfg.train.epochs)
            assert float(r["train_accuracy"]) == pytest.approx(float(metrics["acc"][last][0]))
    parts = summary(out)["parts"]
    assert [p["inferential_offset"] for p in parts] == [-10] * 3 and [p["symmetric_offset"] for p in parts] == [-6] * 3


def test_composite_trend_row_follows_the_numbers(runs):
    out = runs("composite")
    rows = table(out)
    median = {g: float(np.median([float(r["inferential_fraction"]) for r in rows if float(r["gamma"]) == g]))
              for g in (0.3, 0.8)}
    trend = summary(out)["key_numbers"][0]
    assert trend["name"].startswith("inferential answer")
    assert trend["met"] == (median[0.8] >= 0.5 > median[0.3])
    fitted = next(k for k in summary(out)["key_numbers"] if k["name"].startswith("training accuracy"))
    assert fitted["met"] == all(float(r["train_accuracy"]) >= 0.9 for r in rows)


def test_cbow_cannot_tell_the_anchor_order():
    """Why ``composite`` uses the attention model: CBOW logits of (x, 4, 3) and (x, 3, 4) are identical."""
    model = CBOWEnsemble(110, [MemberSpec(seed=0, d=16, gamma_embedding=0.5, gamma_unembedding=0.5)])
    x = torch.arange(20, 100)[:, None]
    a = torch.cat([x, torch.full_like(x, 4), torch.full_like(x, 3)], dim=1)
    b = torch.cat([x, torch.full_like(x, 3), torch.full_like(x, 4)], dim=1)
    with torch.no_grad():
        assert torch.equal(model(a), model(b))


# ---------------------------------------------------------------- reason-memory

def test_reason_memory_parts_and_summary_csv(runs):
    out = runs("reason-memory")
    assert json.loads((out / "recipe.json").read_text())["parts"] == ["gamma-0.3", "gamma-0.5", "gamma-1"]
    rows = table(out)
    assert list(rows[0]) == REASON_COLUMNS
    assert [(float(r["gamma"]), int(r["seed"])) for r in rows] == [(g, s) for g in (0.3, 0.5, 1.0) for s in (0, 1)]
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == ["anchors.png", "group_loss.png"]
    check_report(out)


def test_reason_memory_measures_from_snapshots(runs):
    """Loss per group, halving epochs, held-out accuracy and the memory ceiling recomputed here."""
    out = runs("reason-memory")
    for part in summary(out)["parts"]:
        run = out / part_name(part["gamma"])
        cfg = load_yaml((run / "config.yaml").read_text())
        dataset = tasks.make(cfg.task.name, **cfg.task.params)
        is_r = dataset.meta["is_reasoning"]
        assert 0 < is_r.sum() < len(is_r)
        assert (dataset.y[is_r] == dataset.X[is_r].sum(axis=1)).all()  # seq_len 3: key + a1 + a2, no noise
        held = dataset.meta["eval"]["heldout_reasoning"]
        assert {tuple(t) for t in held["X"][:, 1:]} == {(11, 13), (13, 11)}
        assert not {tuple(t) for t in dataset.X[is_r][:, 1:]} & {(11, 13), (13, 11)}  # never in training
        pred = final_predictions(run, held["X"])
        assert part["heldout_end"] == pytest.approx((pred == held["y"]).mean(axis=1).tolist())
        # last-snapshot losses per group, recomputed with torch's cross-entropy on the engine's model
        model = build_ensemble(cfg, dataset)
        model.load_state_dict({k: torch.from_numpy(v)
                               for k, v in rundir.load_snapshot(run, part["epochs"][-1]).items()})
        with torch.no_grad():
            logits = model(torch.from_numpy(dataset.X))
        for k in range(logits.shape[0]):
            ce = torch.nn.functional.cross_entropy(logits[k], torch.from_numpy(dataset.y), reduction="none").numpy()
            assert part["loss_reasoning"][k][-1] == pytest.approx(ce[is_r].mean(), rel=1e-5)
            assert part["loss_memory"][k][-1] == pytest.approx(ce[~is_r].mean(), rel=1e-5)
            curve = np.array(part["loss_memory"][k])
            below = np.flatnonzero(curve <= curve[0] / 2)
            assert part["half_memory"][k] == (part["epochs"][below[0]] if below.size else None)
            assert part["acc_memory"][k] <= part["ceiling_memory"] + 1e-12


def test_order_blind_ceiling():
    X = np.array([[1, 2], [2, 1], [1, 2], [3, 3], [2, 1]])
    y = np.array([5, 6, 5, 7, 6])
    # {1, 2}: labels 5, 6, 5, 6 → at most 2 right; {3, 3}: 1 → 3 of 5
    assert order_blind_ceiling(X, y) == pytest.approx(3 / 5)
    assert order_blind_ceiling(X[:3], np.array([5, 5, 5])) == 1.0


def test_geometry_measures():
    values = np.arange(10)
    line = np.outer(values, np.array([1.0, 2.0, -1.0])) + 0.01 * np.random.default_rng(0).normal(size=(10, 3))
    assert order_along_pc1(line, values) == pytest.approx((1.0, 1.0), abs=1e-4)
    assert order_along_pc1(line, values[::-1])[0] == pytest.approx(1.0)  # the sign of PC1 does not matter
    shuffled = np.random.default_rng(1).permutation(values)
    assert order_along_pc1(line, shuffled)[0] < 0.9
    assert mean_cosine(np.ones((4, 3))) == pytest.approx(1.0)
    assert mean_cosine(np.eye(4)) == pytest.approx(0.0)
    assert halving_epoch(np.array([0, 10, 20, 30]), np.array([4.0, 3.0, 2.0, 1.0])) == 20
    assert halving_epoch(np.array([0, 10]), np.array([4.0, 3.0])) is None


# ---------------------------------------------------------------- full size (opt-in)

#: Key numbers known not to be met at the defaults (docs/recipes.md), by the start of their names:
#: in composite one seed of γ = 0.5 ends at training accuracy 0.77; in reason-memory the CBOW model
#: answers the held-out reasoning pairs within a few labels but almost never exactly.
KNOWN_MISSES = {"composite": ("training accuracy at the end",),
                "reason-memory": ("accuracy on the held-out reasoning pairs",)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["composite", "reason-memory"])
def test_lineage_recipe_at_full_size(tmp_path, name):
    """The defaults: exactly the known misses are unmet, and the headline expectation (first row) is met."""
    out = run_recipe(name, tmp_path / name, progress=False)
    keys = summary(out)["key_numbers"]
    missed = [k["name"] for k in keys if k["met"] is False]
    assert len(missed) == len(KNOWN_MISSES[name])
    assert all(m.startswith(prefix) for m, prefix in zip(missed, KNOWN_MISSES[name]))
    assert keys[0]["met"] is True
    assert len(table(out)) == 9  # 3 γ × 3 seeds
