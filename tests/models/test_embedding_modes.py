"""CBOW embedding modes of SPEC §8 F8b (``model.embedding``): trainable, fixed signature embeddings
λ R φ^{y;1}_α v and fixed random embeddings λ v_α — parameters, what training changes, the computed
W_E in snapshots, bitwise resume."""

import numpy as np
import pytest
import torch
from recipe_helpers import run_contents as contents

from ctxstair import rundir, tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.errors import InputError
from ctxstair.models import CBOWEnsemble, MemberSpec, build_ensemble
from ctxstair.signatures import label_signature
from ctxstair.train import train_run

BASE = {"task.name": "mod", "task.N": 7, "model.d": 16, "model.activation": "tanh", "train.optimizer": "adam",
        "train.lr": 0.01, "train.epochs": 30, "train.members": 2, "snapshots.every": 10, "analysis.enabled": False}


def config(embedding: str, **overrides) -> RunConfig:
    return apply_overrides(RunConfig(), {**BASE, "model.embedding": embedding, **overrides})


def expected_directions(seed: int, d: int, gamma: float, V: int, phi1: np.ndarray | None) -> np.ndarray:
    """The documented draw, recomputed: W_E and W_U γ-normal (discarded), then R (d, labels) and v
    (context,) N(0, 1) — or N(0, 1) rows (V, d) — from the member's seed; w_α = R (φ^{y;1}_α v), one
    token at a time; divided by the root mean square over the entries of the non-zero rows."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(2):
        torch.empty(V, d).normal_(0.0, d ** -gamma, generator=gen)
    if phi1 is None:
        E = torch.randn(V, d, generator=gen, dtype=torch.float64).numpy()
    else:
        R = torch.randn(d, phi1.shape[1], generator=gen, dtype=torch.float64).numpy()
        v = torch.randn(phi1.shape[2], generator=gen, dtype=torch.float64).numpy()
        E = np.stack([R @ (phi1[a] @ v) for a in range(V)])
    nonzero = np.linalg.norm(E, axis=1) > 0
    return E / np.sqrt(np.mean(E[nonzero] ** 2))


@pytest.mark.parametrize("embedding", ["signature", "random"])
def test_fixed_modes_train_only_lambda_and_W_U(embedding):
    cfg = config(embedding)
    ds = tasks.make("mod", N=7)
    model = build_ensemble(cfg, ds)
    K, V, d = 2, ds.vocab_size, 16
    assert dict((n, tuple(p.shape)) for n, p in model.named_parameters()) == {"W_U": (K, V, d), "lam": (K,)}
    assert sum(p.numel() for p in model.parameters()) == K * V * d + K
    # λ starts at d^-γ: the embeddings have the γ-init scale per coordinate over their non-zero rows
    # (SPEC §4): the tokens that occur for signature embeddings (token 0 is only a label of mod), all for random
    torch.testing.assert_close(model.lam.detach(), torch.full((K,), d ** -1.0))
    rows = np.unique(ds.X) if embedding == "signature" else np.arange(V)
    assert torch.all(model.W_E[:, rows].norm(dim=-1) > 0)
    rms = model.W_E.detach()[:, rows].square().mean(dim=(1, 2)).sqrt()
    torch.testing.assert_close(rms, torch.full((K,), d ** -1.0), rtol=1e-5, atol=0)
    # W_U starts as in the trainable mode (same seed, same draws)
    torch.testing.assert_close(model.W_U, build_ensemble(config("trainable"), ds).W_U, rtol=0, atol=0)
    fixed, lam, W_U = model.E_fixed.clone(), model.lam.detach().clone(), model.W_U.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    X, y = torch.from_numpy(ds.X), torch.from_numpy(ds.y)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(X).flatten(0, 1), y.repeat(K)).backward()
        optimizer.step()
    assert torch.equal(model.E_fixed, fixed)                      # the directions never move
    assert torch.all(model.lam.detach() != lam)                   # λ is trained, per member
    assert not torch.equal(model.W_U.detach(), W_U)               # and so is W_U
    torch.testing.assert_close(model.W_E, model.lam[:, None, None] * fixed, rtol=0, atol=0)


def test_trainable_mode_is_unchanged():
    model = build_ensemble(config("trainable"), tasks.make("mod", N=7))
    assert {n for n, _ in model.named_parameters()} == {"W_E", "W_U"}
    assert set(model.state_dict()) == {"W_E", "W_U"}


@pytest.mark.parametrize("embedding", ["signature", "random"])
def test_snapshots_hold_the_computed_W_E(tmp_path, embedding):
    cfg = config(embedding)
    run = train_run(cfg, tmp_path / "run", progress=False)
    ds = tasks.make("mod", N=7)
    phi1 = (label_signature(ds.X, ds.y, 1, ds.vocab_size, labels=np.unique(ds.y), context=np.unique(ds.X))
            if embedding == "signature" else None)
    for epoch in (0, 30):
        snap = rundir.load_snapshot(run, epoch)
        assert set(snap) == {"W_E", "W_U", "lam"} and snap["W_E"].shape == (2, ds.vocab_size, 16)
        for k in range(2):
            E = expected_directions(k, 16, 1.0, ds.vocab_size, phi1)
            np.testing.assert_allclose(snap["W_E"][k], snap["lam"][k] * E, rtol=1e-5, atol=1e-7)
    assert rundir.load_snapshot(run, 30)["lam"][0] != rundir.load_snapshot(run, 0)["lam"][0]
    if embedding == "signature":  # token 0 is only a label of mod: φ^{y;1}_0 = 0, so its embedding is 0
        assert not rundir.load_snapshot(run, 30)["W_E"][:, 0].any()


@pytest.mark.parametrize("embedding", ["signature", "random"])
def test_resume_is_bitwise_identical(tmp_path, embedding):
    cfg = config(embedding)
    reference = contents(train_run(cfg, tmp_path / "reference", progress=False))

    def stop(epoch):
        if epoch == 17:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "run", hook=stop, progress=False)
    train_run(cfg, tmp_path / "run", resume=True, progress=False)
    assert contents(tmp_path / "run") == reference


def test_state_dict_round_trip_and_exact_flow():
    ds = tasks.make("mod", N=7)
    model = build_ensemble(config("signature"), ds)
    state = model.state_dict()
    assert set(state) == {"W_U", "lam", "W_E"}
    model.load_state_dict(state)  # the computed W_E is derived, not loaded
    cfg = config("random", **{"train.optimizer": "flow", "train.lr": 1.0, "train.epochs": 2, "train.members": 1})
    from ctxstair.train.engine import gradient_flow
    model = build_ensemble(cfg, ds)
    lam = model.lam.detach().clone()
    assert gradient_flow(model, torch.from_numpy(ds.X), torch.from_numpy(ds.y), 0.0, 1.0) > 0
    assert not torch.equal(model.lam.detach(), lam)


def test_bad_embedding_settings_are_refused():
    with pytest.raises(InputError, match="model.embedding must be one of"):
        config("frozen")
    with pytest.raises(InputError, match="needs model.kind=cbow"):
        config("random", **{"model.kind": "attention"})
    with pytest.raises(InputError, match="phi1"):
        CBOWEnsemble(5, [MemberSpec(0, 4, 1.0, 1.0)], embedding="signature")
