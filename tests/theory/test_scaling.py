"""Scaling laws of the order terms (SPEC §6.2): low-order dominance at initialization (slope −mγ
against log d, and the general leading-degree rule), the late-regime counts B_m(K), and the
``init-scaling`` recipe read back from its files."""

import json
import math

import numpy as np
import pytest

from ctxstair import tasks
from ctxstair.errors import InputError
from ctxstair.recipes import ComputedRecipe, get, run_recipe, write_recipe_report
from ctxstair.theory import (
    cbow_label_terms,
    collinear_order_ratios,
    fit_order_slopes,
    init_order_mean_squares,
    late_regime_prefactor,
    late_regime_scan,
    order_pattern_count,
    order_rms_ratios,
    predicted_slope,
    stirling2,
)

WIDTHS = [32, 64, 128, 256, 512, 1024]


@pytest.fixture(scope="module")
def sum_mod():
    return tasks.make("sum_mod", N=6, L=3)


# ---------------------------------------------------------------- initialization: slope −mγ (SPEC §6.2)

def test_predicted_slope_follows_the_leading_degree():
    assert [predicted_slope(m, (1, 1, 1), 0.8) for m in (1, 2)] == pytest.approx([-0.8, -1.6])
    assert predicted_slope(1, (1, 0, 1), 1.0) == -2.0          # odd σ (tanh-like): order 1 starts at degree 3
    assert predicted_slope(2, (0.5, 0.4, 0, -0.1), 1.0) == -3.0  # ReLU/GELU fits: C_3 = 0
    assert predicted_slope(2, (0, 0, 1), 1.0) == 0.0            # monomial: every order has degree K
    assert math.isnan(predicted_slope(2, (1, 1, 0), 1.0))        # order 2 needs C_3 or higher


def test_order_ratios_at_init_have_slope_minus_m_gamma(sum_mod):
    gammas = [0.8, 1.0]
    ratios = order_rms_ratios(init_order_mean_squares(sum_mod, WIDTHS, gammas, 8, (1.0, 1.0, 1.0)))
    assert ratios.shape == (2, len(WIDTHS), 3) and np.all(ratios[..., 0] == 1)
    for gamma, r in zip(gammas, ratios):
        fits = fit_order_slopes(WIDTHS, r, gamma, (1.0, 1.0, 1.0))
        assert [f.order for f in fits] == [1, 2]
        for f in fits:
            assert f.predicted == pytest.approx(-f.order * gamma)
            assert f.within(0.1), (gamma, f)
            assert f.ci_low < f.slope < f.ci_high and f.ci_high - f.ci_low < 0.2


def test_odd_activation_order_one_has_slope_minus_two_gamma(sum_mod):
    """With C_2 = 0 order 1 starts at degree 3, as order 2 does: slope −2γ for both, not −γ."""
    coeffs = (1.0, 0.0, 1.0)
    ratios = order_rms_ratios(init_order_mean_squares(sum_mod, WIDTHS, [1.0], 6, coeffs))[0]
    for f in fit_order_slopes(WIDTHS, ratios, 1.0, coeffs):
        assert f.predicted == -2.0 and abs(f.slope + 2.0) < 0.15


def test_slope_fit_refuses_too_few_widths_and_skips_vanishing_orders():
    with pytest.raises(InputError, match="widths"):
        fit_order_slopes([32, 64], np.ones((2, 2)), 1.0, (1, 1))
    ratios = np.array([[1, 0.1, 0.0], [1, 0.05, 0.0], [1, 0.025, 0.0]])
    one, two = fit_order_slopes([10, 20, 40], ratios, 1.0, (1, 1, 0))
    assert one.slope == pytest.approx(-1.0) and math.isnan(two.slope) and math.isnan(two.predicted)


# ---------------------------------------------------------------- late regime (SPEC §6.2)

def test_stirling_numbers_and_prefactors():
    assert [stirling2(7, k) for k in range(8)] == [0, 1, 63, 301, 350, 140, 21, 1]
    assert stirling2(0, 0) == 1 and stirling2(5, 0) == 0 and stirling2(3, 5) == 0
    assert [late_regime_prefactor(m, 8) for m in range(3)] == [1, 126, 1806]
    # N_m(K) counts maps from K−1 factors onto {α, β_1..β_m} hitting every β; over all sets of
    # context positions they make up (w_α + Σ_j w_j)^{K−1}: Σ_m C(L−1, m) N_m(K) = L^{K−1}
    for K in range(1, 9):
        for L in range(1, 6):
            total = sum(math.comb(L - 1, m) * order_pattern_count(m, K) for m in range(L))
            assert total == L ** (K - 1), (L, K)


def test_scipy_agrees_on_stirling_numbers():
    special = pytest.importorskip("scipy.special")
    if not hasattr(special, "stirling2"):
        pytest.skip("scipy < 1.12 has no stirling2")
    assert all(stirling2(n, k) == int(special.stirling2(n, k, exact=True)) for n in range(12) for k in range(12))


@pytest.mark.parametrize("task,params", [("sum_mod", {"N": 6, "L": 3}), ("add", {"N": 8})])
def test_collinear_embeddings_give_the_counts_exactly(task, params):
    ds = tasks.make(task, **params)
    measured = late_regime_scan(ds, 8, scales=[3.0], spreads=[0.0])[0, 0]
    counts = collinear_order_ratios(ds.seq_len, 8)
    np.testing.assert_allclose(measured, counts, rtol=1e-10)
    # SPEC's B_m(K) alone misses C(L−1, m) and the patterns without w_α (l = 0)
    B = np.array([late_regime_prefactor(m, 8) for m in range(ds.seq_len)])
    assert np.all(measured[1:] > B[1:]) and measured[1] == pytest.approx(math.comb(ds.seq_len - 1, 1) * 127)


def test_independent_embeddings_keep_the_order_but_not_the_counts(sum_mod):
    counts = collinear_order_ratios(3, 8)
    for seed in range(3):
        r = late_regime_scan(sum_mod, 8, scales=[1.0], spreads=[np.inf], seed=seed)[0, 0]
        assert 1 < r[1] < r[2]                                   # the highest order still dominates ...
        assert r[1] < 0.5 * counts[1] and r[2] < 0.25 * counts[2]  # ... by far less than the counts


def test_every_order_scales_like_s_E_to_the_K_minus_1(sum_mod):
    """σ with all C_k = 1, K = 8: at large scale every order grows like s^{K−1}; at small scale order 0 leads."""
    K = 8
    rng = np.random.default_rng(0)
    G, W_U = rng.normal(size=(sum_mod.vocab_size, 8)), rng.normal(size=(sum_mod.vocab_size, 8))
    norms = {s: np.linalg.norm(cbow_label_terms(s * G, W_U, sum_mod.X, sum_mod.y, np.ones(K)), axis=(0, 2))
             for s in (0.01, 100.0, 1000.0)}
    slopes = np.log(norms[1000.0] / norms[100.0]) / np.log(10.0)
    np.testing.assert_allclose(slopes, K - 1, atol=0.01)
    assert np.all(np.diff(norms[0.01]) < 0)


# ---------------------------------------------------------------- the init-scaling recipe

def test_init_scaling_recipe(tmp_path):
    out = run_recipe("init-scaling", tmp_path / "scaling", {"d": [32, 128, 512], "gamma": [0.6, 1.0]}, seeds=4)
    assert sorted(p.name for p in out.iterdir()) == ["ctxstair.sha256", "figures", "init_scaling.csv", "recipe.json",
                                                     "report.html", "summary.json"]
    info = json.loads((out / "recipe.json").read_text())
    assert info["recipe"] == "init-scaling" and info["parts"] == [] and info["params"]["seeds"] == 4
    summary = json.loads((out / "summary.json").read_text())
    keys = summary["key_numbers"]
    assert len(keys) == 4 and [k["met"] for k in keys] == [None, None, True, True]  # γ = 0.6 is not judged
    assert {(f["gamma"], f["order"]) for f in summary["fits"]} == {(0.6, 1), (0.6, 2), (1.0, 1), (1.0, 2)}
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and keys[2]["measured"] in html
    before = (out / "summary.json").read_bytes()
    write_recipe_report(out)
    assert (out / "summary.json").read_bytes() == before
    assert isinstance(get("init-scaling"), ComputedRecipe)  # it trains nothing


def test_init_scaling_refuses_bad_parameters(tmp_path):
    for overrides, message in [({"widths": [1, 2, 3]}, "unknown"), ({"d": [32, 64]}, "at least 3"),
                               ({"gamma": [0]}, "gamma"), ({"task.N": 1}, "N"), ({"coeffs": [1.0]}, "order 1")]:
        with pytest.raises(InputError, match=message):
            run_recipe("init-scaling", tmp_path / "bad", overrides)
    assert not (tmp_path / "bad").exists()
    with pytest.raises(InputError, match="nothing to resume"):
        run_recipe("init-scaling", tmp_path / "bad", {}, resume=True)
