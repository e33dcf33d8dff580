"""The order-m probe (SPEC §3, §8 row C; ``ctxstair.alignment.probe``): order 2 against a brute force,
on a planted example, and its reduction to the order-1 probe by marginal consistency."""

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr

from ctxstair import tasks
from ctxstair.alignment import cosine_matrix, probe_alignment, upper_triangle
from ctxstair.alignment.probe import probe_embeddings
from ctxstair.errors import InputError
from ctxstair.signatures import label_signature


@pytest.fixture
def rng():
    return np.random.default_rng(3)


def random_phi2(rng, T=12, labels=5, P=6):
    """A random order-2 'signature' symmetric in its two context indices."""
    phi = rng.random((T, labels, P, P))
    return phi + phi.transpose(0, 1, 3, 2)


def brute_h(phi2, u, v):
    """h_α(ν) = Σ_{β,β'} φ2[α](ν, β, β') u_β v_β', one term at a time."""
    T, labels, P, _ = phi2.shape
    h = np.zeros((T, labels))
    for a, nu, b, c in itertools.product(range(T), range(labels), range(P), range(P)):
        h[a, nu] += phi2[a, nu, b, c] * u[b] * v[c]
    return h


def test_probe_embeddings_order2_equals_brute_force(rng):
    phi2 = random_phi2(rng)
    u, v = rng.normal(size=6), rng.normal(size=6)
    h = probe_embeddings(torch.from_numpy(phi2), torch.from_numpy(np.stack([u, v]))).numpy()
    np.testing.assert_allclose(h, brute_h(phi2, u, v), rtol=1e-12)
    # batched probes (2, 3, m=2, P) give the same per probe
    probes = rng.normal(size=(2, 3, 2, 6))
    batched = probe_embeddings(torch.from_numpy(phi2), torch.from_numpy(probes)).numpy()
    assert batched.shape == (2, 3, 12, 5)
    np.testing.assert_allclose(batched[1, 2], brute_h(phi2, *probes[1, 2]), rtol=1e-12)


def test_order2_probe_with_ones_is_the_order1_probe():
    """Marginal consistency (SPEC §2): φ2 ×_2 1 = φ1, so (v_1, v_2) = (1, v) reproduces φ1 @ v."""
    ds = tasks.make("two_anchor", p=5)
    context = np.unique(ds.X)
    kwargs = dict(vocab_size=ds.vocab_size, tokens=ds.tokens, labels=np.unique(ds.y), context=context)
    phi1 = label_signature(ds.X, ds.y, 1, **kwargs)
    phi2 = label_signature(ds.X, ds.y, 2, **kwargs)
    v = np.random.default_rng(0).normal(size=context.size)
    h = probe_embeddings(torch.from_numpy(phi2), torch.from_numpy(np.stack([np.ones_like(v), v]))).numpy()
    np.testing.assert_allclose(h, phi1 @ v, atol=1e-15)


def test_order2_probe_recovers_planted_probe_and_scores_heldout_pairs(rng):
    phi2 = random_phi2(rng, T=14, labels=6, P=5) - 1.0  # centred entries: a non-trivial geometry
    u, v = rng.normal(size=5), rng.normal(size=5)
    emb = brute_h(phi2, u, v)  # embeddings are exactly h(u, v), d = V_labels
    result = probe_alignment(phi2, emb, restarts=3)
    assert result.v.shape == (1, 5, 2, 5) and result.heldout_pearson.shape == (1,)
    assert np.all(result.heldout_pearson_per_fold >= 0.99)
    # the reported held-out score is the Pearson r of the fitted probe on each fold's own pairs, recomputed by
    # brute force
    target = upper_triangle(cosine_matrix(emb))
    for f in range(5):
        tri = upper_triangle(cosine_matrix(brute_h(phi2, *result.v[0, f])))
        test = result.pair_folds == f
        assert result.heldout_pearson_per_fold[0, f] == pytest.approx(pearsonr(tri[test], target[test])[0], abs=1e-10)


def test_order2_probe_snapshots_vectorised_and_zero_mean(rng):
    phi2 = random_phi2(rng, T=10, labels=4, P=5)
    snaps = rng.normal(size=(3, 10, 4))
    together = probe_alignment(phi2, snaps, steps=40, zero_mean=True)
    np.testing.assert_allclose(together.v.sum(axis=-1), 0.0, atol=1e-12)  # both vectors ⟂ 1
    for s in range(3):
        alone = probe_alignment(phi2, snaps[s], steps=40, zero_mean=True)
        np.testing.assert_allclose(together.heldout_pearson_per_fold[s], alone.heldout_pearson_per_fold[0], atol=1e-10)


def test_probe_refuses_a_non_signature():
    with pytest.raises(InputError, match="phi2 \\(T, V_labels, P, P\\)"):
        probe_alignment(np.ones((4, 3, 5, 6)), np.ones((4, 2)))
