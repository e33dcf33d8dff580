"""The activation-order recipe (SPEC §6.2 reachability, §8 F4): σ = z^K on y = 1 + (Σ x_i) mod N
is learned iff K ≥ L. A seconds-long version (N = 6, 200 epochs, one seed) runs every cell."""

import json

import numpy as np
import pytest

from ctxstair import rundir
from ctxstair.alignment import effective_rank
from ctxstair.config import load_yaml
from ctxstair.recipes import activation_order as ao
from ctxstair.recipes import get, run_recipe, write_recipe_report

SMALL = {"task.N": 6, "train.epochs": 200, "train.members": 1, "snapshots.every": 50}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return run_recipe("activation-order", tmp_path_factory.mktemp("ao") / "out", dict(SMALL), progress=False)


def test_effective_rank():
    assert effective_rank(np.outer(np.arange(1.0, 6.0), np.ones(4))) == pytest.approx(1.0)  # collinear rows
    assert effective_rank(np.eye(5)) == pytest.approx(5.0)
    assert effective_rank(np.diag([1.0, 1.0, 0.0])) == pytest.approx(2.0)
    rows = np.random.default_rng(0).normal(size=(10, 128))
    assert 9.0 < effective_rank(rows) <= 10.0
    assert effective_rank(rows + 50.0) < 1.5 and effective_rank(rows + 50.0, centre=True) > 8.5
    assert np.isnan(effective_rank(np.zeros((3, 4))))


def test_recipe_parts_and_defaults():
    runs = get("activation-order").runs()
    assert list(runs) == [f"L{L}-K{K}" for L in (2, 3, 4) for K in range(1, 7)]
    cfg = runs["L3-K5"]
    assert cfg.task.name == "sum_mod" and cfg.task.params == {"N": ao.DEFAULT_N, "L": 3}
    assert cfg.model.activation == "monomial" and cfg.model.power == 5 and cfg.model.init.gamma == 1.0
    assert cfg.analysis.enabled is False


def test_paper_size_recipe_has_n50_and_l_up_to_3():
    runs = get("activation-order-n50").runs()
    assert list(runs) == [f"L{L}-K{K}" for L in (2, 3) for K in range(1, 7)]
    assert {cfg.task.params["N"] for cfg in runs.values()} == {50}
    assert runs["L2-K4"].train.epochs == 1000 and runs["L3-K4"].train.epochs == ao.PAPER_N_L3_EPOCHS
    assert runs["L3-K6"].train.epochs == 1000
    assert runs["L3-K2"].model.power == 2 and runs["L3-K2"].recipe == "activation-order-n50"


@pytest.mark.extended  # the recipe's every cell, small (the module fixture): ≈ 1 min on 2 cores
def test_rule_holds_in_every_decidable_cell(small):
    s = json.loads((small / "summary.json").read_text())
    cells = s["cells"]
    assert sorted(cells) == sorted(get("activation-order").runs())
    decided = {part: c for part, c in cells.items() if c["verdict"] != "undecided"}
    assert len(decided) >= 15  # nearly all cells can be judged at this size
    for part, c in decided.items():
        assert c["holds"] is True, (part, c["acc"])
        assert (c["verdict"] == "learned") == (c["K"] >= c["L"])
    # collapsed embeddings where the task's order is out of reach: K = 1 (linear) and odd K < L
    for part in ("L2-K1", "L3-K1", "L4-K1", "L4-K3"):
        assert cells[part]["erank"][0] < 0.35 * cells[part]["erank_init"][0], part
        assert cells[part]["mean_cos"][0] > 0.9, part
    for part, c in cells.items():
        if c["verdict"] == "learned":
            assert c["erank"][0] > 0.7 * c["erank_init"][0], part
    rule = [k for k in s["key_numbers"] if k["name"] == "rule: learned iff K ≥ L"]
    assert rule and rule[0]["met"] is True


@pytest.mark.extended
def test_summary_comes_from_the_run_files(small):
    s = json.loads((small / "summary.json").read_text())
    c = s["cells"]["L3-K2"]
    run = small / "L3-K2"
    cfg = load_yaml((run / "config.yaml").read_text())
    assert (c["L"], c["K"], c["N"]) == (3, 2, 6) == (cfg.task.params["L"], cfg.model.power, cfg.task.params["N"])
    metrics = rundir.read_metrics(run)
    assert c["acc"] == [float(metrics["acc"][metrics["epoch"] == 200][0])]
    last = rundir.load_snapshot(run, 200)["W_E"][0][rundir.read_signatures(run).tokens]
    assert c["erank"][0] == pytest.approx(effective_rank(last.astype(np.float64)))
    assert not (run / "alignment.csv").exists()  # no alignment analysis for this recipe


@pytest.mark.extended
def test_report_and_figures(small):
    html = (small / "report.html").read_text()
    figures = sorted(p.name for p in (small / "figures").iterdir())
    assert figures == sorted(f"{name}.{kind}" for name in ("accuracy", "curves", "effective_rank")
                             for kind in ("png", "svg"))
    assert html.count('src="data:image/png;base64,') == 3
    assert "learned iff K ≥ L" in html and "L = 4, K = 6" in html
    before = (small / "summary.json").read_bytes()
    write_recipe_report(small)  # rebuilt from the files alone
    assert (small / "summary.json").read_bytes() == before


@pytest.mark.slow
def test_activation_order_at_default_size(tmp_path):
    """The defaults (N = 10, 1000 epochs, 2 seeds): the rule holds in all 18 cells (docs/recipes.md)."""
    out = run_recipe("activation-order", tmp_path / "ao", progress=False)
    cells = json.loads((out / "summary.json").read_text())["cells"]
    assert all(c["holds"] is True for c in cells.values()), {p: c["acc"] for p, c in cells.items()}
