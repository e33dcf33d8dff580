"""The estimators of the LM staircase (ctxstair.measure.estimators, SPEC §6.4, §7): every measure of the
schema written by exactly one of them, and the unembedding alignment R_cos(W_U, φ^pre) against a
brute-force count and a closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_models import lm_train_model

from ctxstair.measure import schema
from ctxstair.measure.estimators import States, estimators
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup
from ctxstair.signatures import previous_token_signature

V = 24


@pytest.fixture(scope="module")
def windows() -> np.ndarray:
    """A Markov chain whose previous-token distributions differ from token to token."""
    rng = np.random.default_rng(3)
    transition = rng.dirichlet(np.full(V, 0.3), size=V)
    X = np.zeros((60, 20), dtype=np.int64)
    X[:, 0] = rng.integers(0, V, size=60)
    for s in range(1, 20):
        X[:, s] = [rng.choice(V, p=transition[x]) for x in X[:, s - 1]]
    return X


def test_every_measure_of_the_schema_has_exactly_one_estimator():
    written = [measure for estimator in estimators() for measure in estimator.measures]
    assert sorted(written) == sorted(schema.MEASURES)
    assert [e.order for e in estimators()] == sorted(e.order for e in estimators())
    assert all((e.on_rows is None) == (e.reads == "model") for e in estimators())


def test_the_previous_token_signature_counts_what_precedes_each_token(windows):
    tokens = np.array([3, 0, 17])
    phi = previous_token_signature(windows, V, tokens=tokens)
    expected = np.zeros((tokens.size, V))
    for window in windows:
        for s in range(len(window) - 1):
            if window[s + 1] in tokens:
                expected[list(tokens).index(window[s + 1]), window[s]] += 1
    np.testing.assert_allclose(phi, expected / expected.sum(axis=1, keepdims=True), atol=1e-15)


def llama(d_model: int, seed: int = 0) -> torch.nn.Module:
    """A float64 Llama as lm train builds it, one layer, γ = 0.5."""
    return lm_train_model(V, d_model=d_model, n_layers=1, n_heads=2, head_dim=4, d_mlp=8, gamma=0.5, seed=seed,
                          dtype=torch.float64)


def setup_of(windows: np.ndarray) -> StaircaseSetup:
    tokens = np.arange(0, V, 2)
    return StaircaseSetup.from_windows(windows, settings=StaircaseSettings(k=12, probe=False, attention_windows=4,
                                                                           path_windows=1), tokens=tokens)


def test_unembedding_rows_equal_to_the_previous_token_signatures_align_perfectly(windows):
    setup = setup_of(windows)
    model = llama(d_model=V)
    with torch.no_grad():  # W_U[ν] = φ^pre_ν over all V previous tokens: the two cosine matrices are one
        model.lm_head.weight.copy_(torch.from_numpy(previous_token_signature(windows, V)))
    (row,) = setup.measure(States(V, model.model.embed_tokens.weight.detach().numpy()[None, setup.tokens],
                                  model=lambda i: model))
    assert row[schema.UNEMBEDDING_ALIGNMENT] == pytest.approx(1.0, abs=1e-12)


def test_the_unembedding_alignment_is_the_pearson_of_two_brute_force_cosine_triangles(windows):
    setup = setup_of(windows)
    model = llama(d_model=16, seed=4)
    (row,) = setup.measure(States(V, np.zeros((1, setup.tokens.size, 16)), model=lambda i: model),
                           probe=False, paths=True)
    W_U = model.lm_head.weight.detach().numpy()[setup.tokens]
    phi = np.zeros((setup.tokens.size, V))
    for window in windows:
        for s in range(len(window) - 1):
            if window[s + 1] in setup.tokens:
                phi[list(setup.tokens).index(window[s + 1]), window[s]] += 1

    def cosines(M):
        unit = M / np.linalg.norm(M, axis=1, keepdims=True)
        return (unit @ unit.T)[np.triu_indices(len(M), 1)]

    expected = np.corrcoef(cosines(W_U), cosines(phi))[0, 1]
    assert abs(expected) > 0.01  # not a trivial agreement
    assert row[schema.UNEMBEDDING_ALIGNMENT] == pytest.approx(expected, abs=1e-12)
    # Only with the measures of the network: without them no network is read.
    (plain,) = setup.measure(States(V, np.zeros((1, setup.tokens.size, 16)), model=lambda i: model), paths=False)
    assert schema.UNEMBEDDING_ALIGNMENT not in plain
