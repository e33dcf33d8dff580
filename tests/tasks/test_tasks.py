"""Tests of the task generators (SPEC §8, §9): shapes, exact labels, hold-outs, determinism, input errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ctxstair import tasks
from ctxstair.errors import InputError

ALL_TASKS = sorted([
    "add", "sub", "mul", "mod", "modsum", "sum_mod",
    "label_law", "parity", "minmax", "two_anchor", "composite", "reason_memory",
])
SAMPLED = {"label_law": {}, "parity": {"n_samples": 500}, "composite": {"n_samples": 500, "n_eval": 100},
           "reason_memory": {"n_samples": 500, "n_eval": 100}}
# Small parameters so the whole file stays fast; defaults are exercised in test_defaults_build.
SMALL = {"sum_mod": {"N": 5, "L": 3}, **SAMPLED}


def _rows_unique(X: np.ndarray) -> bool:
    return np.unique(X, axis=0).shape[0] == X.shape[0]


# ----------------------------------------------------------------------------- generic properties


@pytest.mark.parametrize("name", ALL_TASKS)
def test_defaults_build(name):
    ds = tasks.make(name)
    assert ds.name == name
    assert ds.X.dtype == np.int64 and ds.y.dtype == np.int64
    assert ds.X.ndim == 2 and ds.y.shape == (ds.X.shape[0],)
    assert ds.X.min() >= 0 and ds.X.max() < ds.vocab_size
    assert ds.y.min() >= 0 and ds.y.max() < ds.vocab_size
    assert ds.tokens.dtype == np.int64 and np.all((ds.tokens >= 0) & (ds.tokens < ds.vocab_size))
    assert np.unique(ds.tokens).size == ds.tokens.size
    # the resolved params are the registry defaults
    info = {t.name: t for t in tasks.list()}[name]
    assert ds.params == info.params


def test_list_shows_all_tasks_with_params():
    infos = {t.name: t for t in tasks.list()}
    assert sorted(infos) == ALL_TASKS
    assert infos["add"].params == {"N": 20}
    assert infos["modsum"].params == {"N": 20, "M": 5}
    assert infos["sum_mod"].params["max_samples"] == 10_000_000
    assert infos["label_law"].params["anchor"] == 100 and infos["label_law"].params["n_context"] == 51
    assert infos["composite"].params["special_pair"] == (3, 4)
    assert infos["composite"].params["heldout_pair"] == (4, 3)
    assert infos["reason_memory"].params["heldout"] == ((11, 13), (13, 11))
    for info in infos.values():
        assert info.summary and "\n" not in info.summary
        for param in info.params:  # every parameter is documented
            assert param in info.doc, (info.name, param)


# ----------------------------------------------------------------------------- exact labels


@pytest.mark.parametrize("name, N, rule, vocab", [
    ("add", 7, lambda a, b: a + b, 15),
    ("sub", 7, lambda a, b: abs(a - b), 8),
    ("mul", 7, lambda a, b: a * b, 50),
    ("mod", 7, lambda a, b: (a + b + 1) % 7, 8),
])
def test_pair_tasks_exact(name, N, rule, vocab):
    ds = tasks.make(name, N=N)
    assert ds.X.shape == (N * N, 2) and _rows_unique(ds.X)
    assert ds.vocab_size == vocab
    assert ds.tokens.tolist() == list(range(1, N + 1))
    assert set(ds.X.ravel().tolist()) == set(range(1, N + 1))
    for (a, b), y in zip(ds.X.tolist(), ds.y.tolist()):
        assert y == rule(a, b)
    # lexicographic order, x1 slowest
    assert ds.X[:3].tolist() == [[1, 1], [1, 2], [1, 3]]


@pytest.mark.parametrize("N, M, vocab", [(20, 5, 21), (4, 9, 9)])
def test_modsum_exact(N, M, vocab):
    ds = tasks.make("modsum", N=N, M=M)
    assert ds.X.shape == (N * N, 2) and _rows_unique(ds.X)
    assert ds.vocab_size == vocab
    assert [y for y in ds.y.tolist()] == [(a + b) % M for a, b in ds.X.tolist()]


def test_modsum_order0_uniform_iff_divides():
    # SPEC §8 F9: with M | N each number's label distribution is uniform over 0..M-1
    for M, uniform in [(5, True), (3, False)]:
        ds = tasks.make("modsum", N=20, M=M)
        counts = np.zeros((21, M))
        for (a, _b), y in zip(ds.X.tolist(), ds.y.tolist()):
            counts[a, y] += 1
        assert np.all(counts[1:] == counts[1:, :1]) == uniform


def test_sum_mod_exact_and_refusal():
    ds = tasks.make("sum_mod", N=5, L=3)
    assert ds.X.shape == (125, 3) and _rows_unique(ds.X)
    assert ds.vocab_size == 6
    assert ds.y.tolist() == [1 + (a + b + c) % 5 for a, b, c in ds.X.tolist()]
    assert tasks.make("sum_mod", N=3, L=1).X.tolist() == [[1], [2], [3]]
    with pytest.raises(ValueError, match="max_samples"):
        tasks.make("sum_mod", N=10, L=4, max_samples=9999)
    with pytest.raises(ValueError, match="max_samples"):
        tasks.make("sum_mod", N=50, L=6)  # 1.56e10 sequences: refused before allocating


def test_minmax_exact():
    N = 6
    ds = tasks.make("minmax", N=N)
    a, b = ds.meta["anchor_max"], ds.meta["anchor_min"]
    assert (a, b) == (N + 1, N + 2) and ds.vocab_size == N + 3
    assert ds.X.shape == (2 * N * N, 3) and _rows_unique(ds.X)
    assert ds.tokens.tolist() == list(range(1, N + 1)) + [a, b]
    for (c, x1, x2), y in zip(ds.X.tolist(), ds.y.tolist()):
        assert y == (max(x1, x2) if c == a else min(x1, x2))
    # SPEC S72: order-0 signature of anchor a is (2y-1)/N^2
    ya = ds.y[ds.X[:, 0] == a]
    freq = np.bincount(ya, minlength=N + 1)[1:] / ya.size
    np.testing.assert_allclose(freq, (2 * np.arange(1, N + 1) - 1) / N**2)


def test_two_anchor_exact_and_uniform_order0():
    p = 5
    ds = tasks.make("two_anchor", p=p)
    assert ds.vocab_size == 2 * p and ds.X.shape == (p**3, 3) and _rows_unique(ds.X)
    assert ds.tokens.tolist() == list(range(2 * p))
    assert ds.meta["groups"]["anchors"].tolist() == list(range(p, 2 * p))
    assert set(ds.X[:, 0].tolist()) == set(range(p, 2 * p)) and set(ds.X[:, 2].tolist()) == set(range(p))
    for (a1, a2, x), y in zip(ds.X.tolist(), ds.y.tolist()):
        assert y == ((a1 - p) + (a2 - p) + x) % p
    # every token's order-0 label signature is uniform over 0..p-1
    for tok in range(2 * p):
        labels = ds.y[(tok == ds.X).any(axis=1)]
        assert np.all(np.bincount(labels, minlength=p) == labels.size // p)


def _anchor_order1_cosines(ds) -> np.ndarray:
    """Cosines between the anchors' order-1 label signatures, each computed by counting directly:
    for anchor α and context token c at another position, the law of the label."""
    p = int(ds.params["p"])
    anchors = ds.meta["groups"]["anchors"]
    rows = []
    for a in anchors:
        counts = np.zeros((p, ds.vocab_size))
        for seq, label in zip(ds.X.tolist(), ds.y.tolist()):
            for i, tok in enumerate(seq):
                if tok == a:
                    for j, other in enumerate(seq):
                        if j != i:
                            counts[label, other] += 1
        rows.append((counts / np.maximum(counts.sum(axis=0, keepdims=True), 1)).ravel())
    rows = np.array(rows)
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return (unit @ unit.T)[np.triu_indices(len(anchors), 1)]


def test_two_anchor_shift_sets_decide_whether_order1_tells_the_anchors_apart():
    """With shifts covering every residue (the default) all anchors have the same order-1
    signature; with half the residues they differ, and their order-0 signatures stay uniform."""
    assert np.allclose(_anchor_order1_cosines(tasks.make("two_anchor", p=6)), 1.0)
    ds = tasks.make("two_anchor", p=6, shifts=(0, 1, 2))
    assert ds.vocab_size == 9 and ds.X.shape == (9 * 6, 3) and ds.meta["shifts"].tolist() == [0, 1, 2]
    shift = dict(zip(ds.meta["groups"]["anchors"].tolist(), [0, 1, 2]))
    assert all(y == (shift[a1] + shift[a2] + x) % 6 for (a1, a2, x), y in zip(ds.X.tolist(), ds.y.tolist()))
    assert _anchor_order1_cosines(ds).max() < 0.99
    for a in ds.meta["groups"]["anchors"]:
        labels = ds.y[np.isin(ds.X, a).any(axis=1)]
        assert np.all(np.bincount(labels, minlength=6) == labels.size // 6)


def test_two_anchor_analyses_all_tokens_or_the_anchors_only():
    ds = tasks.make("two_anchor", p=6, shifts=(0, 1, 2), analysed="anchors")
    assert ds.tokens.tolist() == ds.meta["groups"]["anchors"].tolist() == [6, 7, 8]
    assert tasks.make("two_anchor", p=6, shifts=(0, 1, 2)).tokens.tolist() == list(range(9))
    with pytest.raises(InputError, match="'analysed' must be 'all' or 'anchors'"):
        tasks.make("two_anchor", p=6, analysed="context")


def test_two_anchor_cross_shift_hides_the_kind_from_order1_and_shows_it_at_order2():
    p, shifts, c = 6, (0, 1, 2), 2
    ds = tasks.make("two_anchor", p=p, shifts=shifts, cross_shift=c)
    anchors = ds.meta["groups"]["anchors"].tolist()
    assert anchors == list(range(6, 12)) and ds.vocab_size == 12 and ds.X.shape == (36 * p, 3)
    assert ds.meta["shifts"].tolist() == [0, 1, 2, 0, 1, 2] and ds.meta["kinds"].tolist() == [0, 0, 0, 1, 1, 1]
    shift = dict(zip(anchors, [0, 1, 2, 0, 1, 2]))
    kind = dict(zip(anchors, [0, 0, 0, 1, 1, 1]))
    assert all(y == (shift[a1] + shift[a2] + x + c * (kind[a1] != kind[a2])) % p
               for (a1, a2, x), y in zip(ds.X.tolist(), ds.y.tolist()))
    cos = dict(zip(zip(*np.triu_indices(6, 1)), _anchor_order1_cosines(ds)))
    for i in range(3):  # anchors i and i + 3: the same shift, different kinds, the same order-1 signature
        assert cos[i, i + 3] == pytest.approx(1.0)
    assert cos[0, 1] < 0.99
    # order 2: the law of the label given the anchor, the other anchor and x differs between the kinds
    def order2(a):
        return {(a2, x): y for (a1, a2, x), y in zip(ds.X.tolist(), ds.y.tolist()) if a1 == a}
    assert order2(6) != order2(9)
    assert tasks.make("two_anchor", p=p, shifts=shifts).meta["kinds"].tolist() == [0, 0, 0]
    with pytest.raises(InputError, match="'cross_shift' must be a residue in 0..5"):
        tasks.make("two_anchor", p=p, cross_shift=6)


def test_parity_exact():
    ds = tasks.make("parity", n_samples=3000, seed=3)
    anchors, noise = ds.meta["groups"]["anchors"], ds.meta["groups"]["noise"]
    assert anchors.tolist() == list(range(11, 21)) and noise.tolist() == list(range(21, 61))
    assert ds.tokens.tolist() == list(range(11, 61)) and ds.vocab_size == 61
    assert ds.X.shape == (3000, 8)
    is_anchor = (ds.X >= 11) & (ds.X <= 20)
    assert np.all(is_anchor.sum(axis=1) == 1)  # exactly one anchor, rest noise
    assert np.all((ds.X[~is_anchor] >= 21) & (ds.X[~is_anchor] <= 60))
    pos = is_anchor.argmax(axis=1)
    assert np.array_equal(pos, ds.meta["anchor_position"])
    anchor = ds.X[np.arange(3000), pos]
    assert np.array_equal(ds.y, anchor % 2)
    # the position and the anchor are spread uniformly
    assert np.bincount(pos, minlength=8).min() > 3000 / 8 * 0.8
    assert set(anchor.tolist()) == set(range(11, 21))


# ----------------------------------------------------------------------------- label laws (F2a)


def _closed_form(law, n=51):
    y = np.arange(n)
    if law == "uniform":
        return np.full(n, 1 / n)
    if law == "normal":
        w = np.exp(-((y - 25.0) ** 2) / 2)
    elif law == "poisson":
        w = stats.poisson.pmf(y, 10.0)
    else:
        w = np.exp(-5.0 * y)
    return w / w.sum()


@pytest.mark.parametrize("law", ["uniform", "normal", "poisson", "exp"])
def test_label_law(law):
    ds = tasks.make("label_law", law=law, seed=1)
    assert ds.X.shape == (2601, 3) and _rows_unique(ds.X)
    assert np.all(ds.X[:, 0] == 100) and ds.X[:, 1:].max() == 50 and ds.X[:, 1:].min() == 0
    assert ds.vocab_size == 101 and ds.tokens.tolist() == [100]
    p_a = ds.meta["label_law"]
    assert p_a.dtype == np.float64 and p_a.shape == (51,)
    np.testing.assert_allclose(p_a, _closed_form(law), rtol=1e-9, atol=1e-15)
    freq = np.bincount(ds.y, minlength=51) / ds.y.size
    tol = 5 * np.sqrt(p_a * (1 - p_a) / ds.y.size) + 1e-3
    assert np.all(np.abs(freq - p_a) <= tol)
    assert 0.5 * np.abs(freq - p_a).sum() < 0.1  # total variation small


def test_label_law_params():
    ds = tasks.make("label_law", law="normal", mu=10, sigma=3.0, n_context=21, anchor=30)
    y = np.arange(21)
    w = np.exp(-((y - 10.0) ** 2) / 18.0)
    np.testing.assert_allclose(ds.meta["label_law"], w / w.sum())
    assert ds.vocab_size == 31
    with pytest.raises(ValueError, match="anchor"):
        tasks.make("label_law", anchor=50)  # collides with context ids 0..50


# ----------------------------------------------------------------------------- composite (SPEC §9)


def _composite_parts(X, pos):
    r = np.arange(X.shape[0])
    return X[r, pos], X[r, pos + 1], X[r, pos + 2]


def test_composite_rules():
    ds = tasks.make("composite", n_samples=4000, n_eval=500, seed=2)
    shift = {1: 5, 2: 1, 3: -2, 4: -8}
    pos = ds.meta["key_position"]
    assert ds.X.shape == (4000, 9) and pos.min() >= 0 and pos.max() <= 6
    x, a1, a2 = _composite_parts(ds.X, pos)
    assert np.all((x >= 20) & (x <= 99))
    assert ds.tokens.tolist() == list(range(20, 100))
    # anchors only at p+1, p+2; everything else is keys/noise 20..99
    is_anchor = (ds.X >= 1) & (ds.X <= 4)
    assert np.all(is_anchor.sum(axis=1) == 2)
    # held-out pair absent from training; the other 15 ordered pairs present (incl. (a, a))
    pairs = set(zip(a1.tolist(), a2.tolist()))
    assert (4, 3) not in pairs and len(pairs) == 15 and (2, 2) in pairs
    # label rule, special pair (3, 4) -> x - 6
    expected = [xi - 6 if (p, q) == (3, 4) else xi + shift[p] + shift[q]
                for xi, p, q in zip(x.tolist(), a1.tolist(), a2.tolist())]
    assert ds.y.tolist() == expected
    assert np.any((a1 == 3) & (a2 == 4))
    # residue rule: no training sample has (x + p) % 5 == 0
    assert np.all((x + pos) % 5 != 0)
    # labels fit the vocabulary: largest 99 + 10 = 109
    assert ds.vocab_size == 110

    ev = ds.meta["eval"]
    h = ev["heldout_pair"]
    xh, h1, h2 = _composite_parts(h["X"], h["key_position"])
    assert h["X"].shape == (500, 9) and np.all((h1 == 4) & (h2 == 3))
    assert np.array_equal(h["y_inferential"], xh - 10) and np.array_equal(h["y_symmetric"], xh - 6)
    r = ev["residue_test"]
    xr, r1, r2 = _composite_parts(r["X"], r["key_position"])
    assert r["X"].shape == (500, 9) and np.all((xr + r["key_position"]) % 5 == 0)
    assert not np.any((r1 == 4) & (r2 == 3))
    assert r["y"].tolist() == [xi - 6 if (p, q) == (3, 4) else xi + shift[p] + shift[q]
                               for xi, p, q in zip(xr.tolist(), r1.tolist(), r2.tolist())]


def test_composite_options():
    off = tasks.make("composite", residue_modulus=0, n_samples=3000, n_eval=10)
    x, _, _ = _composite_parts(off.X, off.meta["key_position"])
    assert np.any((x + off.meta["key_position"]) % 5 == 0)
    assert off.meta["eval"]["residue_test"]["X"].shape == (0, 9)
    with pytest.raises(ValueError, match="negative"):
        tasks.make("composite", key_lo=10, key_hi=99, noise_lo=10)  # 10 - 16 < 0
    with pytest.raises(ValueError, match="heldout_pair"):
        tasks.make("composite", heldout_pair=(4, 5))
    with pytest.raises(ValueError, match="shifts"):
        tasks.make("composite", shifts=(1, 2))
    with pytest.raises(ValueError, match="anchors"):
        tasks.make("composite", anchors=(1, 2, 3, 25))  # collides with keys


# ----------------------------------------------------------------------------- reasoning vs memory (SPEC §9)


def test_reason_memory():
    ds = tasks.make("reason_memory", n_samples=6000, n_eval=300, seed=4)
    g = ds.meta["groups"]
    assert g["keys"].tolist() == list(range(21, 121))
    assert g["memory_anchors"].tolist() == list(range(1, 11))
    assert g["reasoning_anchors"].tolist() == list(range(11, 21))
    assert ds.vocab_size == 161 and ds.tokens.tolist() == list(range(1, 21))
    pos, is_r = ds.meta["key_position"], ds.meta["is_reasoning"]
    r = np.arange(ds.n_samples)
    key, a1, a2 = ds.X[r, pos], ds.X[r, pos + 1], ds.X[r, pos + 2]
    assert np.all((key >= 21) & (key <= 120)) and pos.max() <= 6
    assert np.all(((ds.X >= 1) & (ds.X <= 20)).sum(axis=1) == 2)
    # both anchors of one kind
    assert np.all(is_r == (a1 >= 11)) and np.all(is_r == (a2 >= 11))
    assert 0.45 < is_r.mean() < 0.55
    # reasoning labels and held-out tuples
    assert np.array_equal(ds.y[is_r], (key + a1 + a2)[is_r])
    held = ((a1 == 11) & (a2 == 13)) | ((a1 == 13) & (a2 == 11))
    assert not held.any()
    # memory labels: same (key, tuple) -> same label, within the label range
    seen = {}
    for k, u, v, y in zip(key[~is_r].tolist(), a1[~is_r].tolist(), a2[~is_r].tolist(), ds.y[~is_r].tolist()):
        assert seen.setdefault((k, u, v), y) == y
        assert 21 <= y <= 160
    assert len(seen) < (~is_r).sum()  # some combinations repeat, so the check bit
    table = ds.meta["memory_table"]
    assert table.shape == (100, 100)
    assert all(table[k - 21, (u - 1) * 10 + (v - 1)] == y for (k, u, v), y in seen.items())
    ev = ds.meta["eval"]["heldout_reasoning"]
    rh = np.arange(300)
    kh, h1, h2 = (ev["X"][rh, ev["key_position"] + i] for i in range(3))
    assert set(zip(h1.tolist(), h2.tolist())) == {(11, 13), (13, 11)}
    assert np.array_equal(ev["y"], kh + 24)


# ----------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_determinism(name):
    params = SAMPLED[name]
    a, b = tasks.make(name, seed=7, **params), tasks.make(name, seed=7, **params)
    assert a.X.tobytes() == b.X.tobytes() and a.y.tobytes() == b.y.tobytes()
    if "eval" in a.meta:
        for key, part in a.meta["eval"].items():
            for field, arr in part.items():
                assert arr.tobytes() == b.meta["eval"][key][field].tobytes()
    c = tasks.make(name, seed=8, **params)
    assert a.X.tobytes() + a.y.tobytes() != c.X.tobytes() + c.y.tobytes()


def test_enumerations_deterministic():
    for name in ["add", "minmax", "two_anchor", "sum_mod"]:
        params = SMALL.get(name, {})
        assert tasks.make(name, **params).X.tobytes() == tasks.make(name, **params).X.tobytes()


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name, params, match", [
    ("add", {"N": "a"}, "'N'"),
    ("add", {"N": 2.5}, "'N'"),
    ("add", {"N": 1}, "'N'"),
    ("sub", {"N": 0}, "'N'"),
    ("modsum", {"M": 1}, "'M'"),
    ("sum_mod", {"L": 0}, "'L'"),
    ("label_law", {"law": "cauchy"}, "'law'"),
    ("label_law", {"sigma": 0.0}, "'sigma'"),
    ("label_law", {"lam": -1}, "'lam'"),
    ("label_law", {"n_context": 1}, "'n_context'"),
    ("parity", {"noise_lo": 15}, "noise"),
    ("parity", {"anchor_hi": 5}, "'anchor_hi'"),
    ("parity", {"L": 0}, "'L'"),
    ("minmax", {"N": True}, "'N'"),
    ("two_anchor", {"p": 1}, "'p'"),
    ("two_anchor", {"p": 5, "shifts": (0, 5)}, "'shifts'"),
    ("two_anchor", {"p": 5, "shifts": (1, 1)}, "distinct"),
    ("composite", {"seq_len": 2}, "'seq_len'"),
    ("composite", {"residue_value": 5}, "'residue_value'"),
    ("composite", {"anchors": 3}, "'anchors'"),
    ("reason_memory", {"p_reasoning": 1.5}, "'p_reasoning'"),
    ("reason_memory", {"heldout": ((11, 25),)}, "'heldout'"),
    ("reason_memory", {"q": 0}, "'q'"),
    ("reason_memory", {"memory_hi": 15}, "memory anchors"),
])
def test_bad_values(name, params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make(name, **params)


def test_unknown_name_and_parameter():
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        tasks.make("nope")
    with pytest.raises(ValueError, match="'M'"):
        tasks.make("add", M=3)
    with pytest.raises(InputError):
        tasks.make("parity", n_samples=0)


@pytest.mark.parametrize("name, params, named", [
    ("reason_memory", {"reasoning_lo": 12}, "reasoning_lo"),           # the default heldout (11, 13) falls outside
    ("composite", {"anchors": (1, 2, 5, 6), "shifts": (5, 1, -2, -8)}, "anchors"),  # special_pair (3, 4) is gone
])
def test_a_default_made_invalid_by_another_parameter_is_refused_naming_that_parameter(name, params, named):
    with pytest.raises(InputError, match=rf"\b{named}\b"):
        tasks.make(name, **params)
