"""scripts/relu_search.py, the search for a ReLU setting with the collinear plateau: it judges a cell
with staircase-mod's own key numbers and reads modulus-onset's ratio, from the files alone."""

import importlib.util
import json
from pathlib import Path

import pytest
from repo_paths import ROOT

spec = importlib.util.spec_from_file_location("relu_search", ROOT / "scripts" / "relu_search.py")
relu_search = importlib.util.module_from_spec(spec)
spec.loader.exec_module(relu_search)


def test_plateau_keys_are_staircase_mods_key_numbers():
    summary = json.loads((ROOT / "docs" / "examples" / "recipes" / "staircase-mod" / "summary.json").read_text())
    names = [k["name"] for k in summary["key_numbers"]]
    assert set(relu_search.PLATEAU_KEYS) <= set(names)


def _cell(out: Path, block: str, cell: str, met: dict, members: list[dict]) -> None:
    path = out / block / "cells" / cell
    path.mkdir(parents=True)
    keys = [{"name": name, "measured": "", "expected": "", "met": flag} for name, flag in met.items()]
    (path / "summary.json").write_text(json.dumps({"key_numbers": keys, "members": members}))


def test_mod_rows_take_medians_and_the_recipes_verdicts(tmp_path):
    member = {"early_mse": 0.95, "plateau_end": 40, "learned": 120, "k_star": 19, "r_star": 0.4}
    _cell(tmp_path, "adam", "train.lr=0.01", dict.fromkeys(relu_search.PLATEAU_KEYS, True),
          [member, {**member, "early_mse": 0.1, "learned": 300}, {**member, "early_mse": 0.97, "learned": 200}])
    _cell(tmp_path, "gd", "train.lr=2", {**dict.fromkeys(relu_search.PLATEAU_KEYS, True),
                                         relu_search.PLATEAU_KEYS[0]: False},
          [{**member, "learned": None}, member, member])
    rows = {r["block"]: r for r in relu_search.mod_rows(tmp_path)}
    assert rows["adam"]["early_one_minus_mse"] == 0.95 and rows["adam"]["learned"] == 200
    assert rows["adam"]["collinear_plateau_then_learned"] is True
    assert rows["gd"]["learned"] is None  # a seed that never learned: no median
    assert rows["gd"]["collinear_plateau_then_learned"] is False


def test_onset_rows_read_the_rule(tmp_path):
    path = tmp_path / "onset" / "relu-gd2"
    path.mkdir(parents=True)
    rule = {"median_divides": 117.0, "median_other": 179.0, "ratio": 0.65, "met": False}
    (path / "summary.json").write_text(json.dumps({"rule": rule}))
    assert relu_search.onset_rows(tmp_path) == [{"setting": "relu-gd2", **rule}]


@pytest.mark.parametrize("V, gamma", [(41, relu_search.DIN_V_MOD), (21, relu_search.DIN_V_MODSUM)])
def test_embedding_d_in_v_is_a_gamma(V, gamma):
    # γ is rounded to 3 decimals: 0.0005 in γ is a relative 0.0005 · ln 128 ≈ 2.4e-3 in the std
    assert relu_search.D ** -gamma == pytest.approx(V ** -1.0, rel=2.5e-3)
