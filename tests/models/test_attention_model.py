"""The attention-only model (SPEC §5): its forward pass against a per-sample loop, γ-initialization
of every tensor, members independent of the ensemble, and what the run directory records."""

import math

import numpy as np
import pytest
import torch

from ctxstair import rundir, tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.models import AttentionEnsemble, MemberSpec, build_ensemble, member_specs
from ctxstair.train import train_run


def ensemble(seeds=(0,), V=9, L=4, d=16, d_k=8, gamma=0.5, positional=True, dtype=torch.float64):
    specs = [MemberSpec(seed=s, d=d, gamma_embedding=gamma, gamma_unembedding=gamma) for s in seeds]
    return AttentionEnsemble(V, L, specs, gamma_qk=gamma, gamma_ov=gamma, d_k=d_k, positional=positional, dtype=dtype)


def loop_forward(params: dict[str, np.ndarray], X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §5 written out one sample at a time: (attention (n, L), logits (n, V))."""
    d = params["W_E"].shape[1]
    attn, logits = [], []
    for x in X:
        e = np.stack([params["W_E"][t] + (params["W_pos"][s] if "W_pos" in params else 0) for s, t in enumerate(x)])
        q = params["W_Q"] @ e[-1]
        z = np.array([(params["W_K"] @ e_s) @ q / math.sqrt(d) for e_s in e])
        a = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        g = sum(a_s * e_s for a_s, e_s in zip(a, e))
        attn.append(a)
        logits.append(params["W_U"] @ (params["W_O"] @ (params["W_V"] @ g)))
    return np.array(attn), np.array(logits)


@pytest.mark.parametrize("positional", [True, False])
def test_forward_matches_the_per_sample_definition(positional):
    model = ensemble(seeds=(3, 4), positional=positional)
    X = torch.from_numpy(np.random.default_rng(0).integers(0, 9, size=(12, 4)))
    logits, attention = model(X).detach().numpy(), model.attention(X).detach().numpy()
    for k in range(2):
        params = {name: p[k].detach().numpy() for name, p in model.named_parameters()}
        a, f = loop_forward(params, X.numpy())
        np.testing.assert_allclose(attention[k], a, rtol=1e-12)
        np.testing.assert_allclose(logits[k], f, rtol=1e-10, atol=1e-14)
    assert ("W_pos" in dict(model.named_parameters())) == positional


def test_without_positions_only_the_last_token_is_distinguished():
    """No positional embeddings: permuting positions 1..L-1 leaves the logits unchanged, moving the
    last token does not (it is the query)."""
    model = ensemble(positional=False)
    X = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    same = X[:, [2, 0, 1, 3]]
    np.testing.assert_allclose(model(X).detach(), model(same).detach(), rtol=1e-12)
    assert not torch.allclose(model(X), model(X[:, [3, 1, 2, 0]]))
    assert not torch.allclose(ensemble()(X), ensemble()(same))  # with positions the order matters


def test_every_tensor_gets_its_gamma_and_is_recorded():
    ds = tasks.make("parity", n_samples=20)
    cfg = apply_overrides(RunConfig(), {"model.kind": "attention", "model.d": 128, "model.d_k": 64,
                                        "model.init.gamma": 1.0, "model.init.qk": 0.5, "model.init.ov": 0.75,
                                        "model.init.unembedding": 1.25})
    model = build_ensemble(cfg, ds)
    row = model.member_rows()[0]
    expected = {"W_E": 128 ** -1.0, "W_pos": 128 ** -1.0, "W_Q": 128 ** -0.5, "W_K": 128 ** -0.5,
                "W_V": 128 ** -0.75, "W_O": 64 ** -0.75, "W_U": 128 ** -1.25}
    for name, std in expected.items():
        assert row[f"init_std_{name}"] == pytest.approx(float(getattr(model, name).detach().double().std()), rel=1e-9)
        assert abs(row[f"init_std_{name}"] / std - 1) < 0.1, name  # W_pos has only 8 × 128 entries
    assert ((row["gamma_embedding"], row["gamma_qk"], row["gamma_ov"], row["gamma_unembedding"])
            == (1.0, 0.5, 0.75, 1.25))
    assert model.W_pos.shape == (1, 8, 128) and model.W_O.shape == (1, 128, 64)


def test_a_member_depends_only_on_its_own_seed():
    alone, pair = ensemble(seeds=(5,)), ensemble(seeds=(4, 5))
    for name, p in alone.named_parameters():
        assert torch.equal(p[0], getattr(pair, name)[1]), name
    assert not torch.equal(pair.W_E[0], pair.W_E[1])


def test_members_must_share_a_width():
    specs = [MemberSpec(0, 16, 1.0, 1.0), MemberSpec(1, 8, 1.0, 1.0)]
    with pytest.raises(ValueError, match="share one width"):
        AttentionEnsemble(5, 3, specs, gamma_qk=1.0, gamma_ov=1.0)


def test_run_directory_of_an_attention_run_snapshots_every_tensor(tmp_path):
    cfg = apply_overrides(RunConfig(), {"model.kind": "attention", "model.d": 16, "model.d_k": 8, "task.name": "parity",
                                        "task.n_samples": 64, "train.epochs": 5, "train.members": 2,
                                        "analysis.enabled": False})
    run = train_run(cfg, tmp_path / "run", progress=False)
    snap = rundir.load_snapshot(run, 5)
    assert sorted(snap) == ["W_E", "W_K", "W_O", "W_Q", "W_U", "W_V", "W_pos"]
    assert snap["W_pos"].shape == (2, 8, 16) and snap["W_Q"].shape == (2, 8, 16)
    header = (run / "members.csv").read_text().splitlines()[0].split(",")
    assert header[:7] == ["member", "seed", "d", "gamma_embedding", "gamma_qk", "gamma_ov", "gamma_unembedding"]
    assert [h for h in header if h.startswith("init_std_")] == [f"init_std_{n}" for n in
                                                               ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")]
    assert [m.seed for m in member_specs(cfg)] == [0, 1]


def test_theory_paths_sum_to_the_models_own_label_gradient():
    """SPEC §6.3 on the engine's model: with positional=False the model is the analysis model, and
    the three signature-form paths add up to the autograd gradient of its mean label logit."""
    from ctxstair.theory import attention_label_paths

    model = ensemble(V=6, L=3, d=5, d_k=3, gamma=0.2, positional=False)
    rng = np.random.default_rng(1)
    X, y = rng.integers(0, 6, size=(25, 3)), rng.integers(0, 6, size=25)
    model(torch.from_numpy(X))[0].gather(1, torch.from_numpy(y)[:, None]).mean().backward()
    params = {name: p[0].detach().numpy() for name, p in model.named_parameters()}
    paths = attention_label_paths(params, X, y)
    assert min(np.linalg.norm(p) for p in paths.values()) > 1e-3 * np.linalg.norm(model.W_E.grad[0])
    np.testing.assert_allclose(sum(paths.values()), model.W_E.grad[0].numpy(), rtol=1e-10, atol=1e-14)


def test_exact_gradient_flow_trains_the_attention_model(tmp_path):
    """train.optimizer=flow integrates through the attention model's parameters as for CBOW."""
    cfg = apply_overrides(RunConfig(), {"model.kind": "attention", "model.d": 8, "model.d_k": 4,
                                        "model.init.gamma": 0.3, "task.N": 6, "train.optimizer": "flow",
                                        "train.lr": 1.0, "train.epochs": 4, "analysis.enabled": False})
    run = train_run(cfg, tmp_path / "run", progress=False)
    loss = rundir.read_metrics(run)["loss"]
    assert loss[-1] < loss[0] - 0.5
