"""The CBOW ensemble (SPEC §4-5): γ-initialization, member independence, forward pass, mixed widths."""

import math

import pytest
import torch

from ctxstair.config import RunConfig, apply_overrides
from ctxstair.models import CBOWEnsemble, MemberSpec, activation_fn, gamma_normal_, member_specs, realised_std
from ctxstair.train import member_losses


def spec(seed=0, d=32, gamma=1.0, gamma_u=None):
    return MemberSpec(seed=seed, d=d, gamma_embedding=gamma, gamma_unembedding=gamma if gamma_u is None else gamma_u)


# ---------------------------------------------------------------- (a) γ-initialization

@pytest.mark.parametrize("V,d,gamma", [(200, 32, 1.0), (160, 64, 0.5), (100, 128, 0.75), (80, 64, 1.5), (40, 128, 1.0)])
def test_realised_std_is_d_to_minus_gamma_and_recorded(V, d, gamma):
    assert V * d >= 5000
    model = CBOWEnsemble(V, [spec(seed=7, d=d, gamma=gamma)])
    target = d ** -gamma
    E, U = model.W_E[0].detach().double(), model.W_U[0].detach().double()
    for W in (E, U):
        assert abs(float(W.std()) / target - 1) < 0.05
        assert abs(float(W.mean())) < 5 * target / math.sqrt(V * d)  # centred
    rows = model.member_rows()
    assert rows == [{"seed": 7, "d": d, "gamma_embedding": gamma, "gamma_unembedding": gamma,
                     "init_std_W_E": pytest.approx(float(E.std()), rel=1e-12),
                     "init_std_W_U": pytest.approx(float(U.std()), rel=1e-12)}]
    # W_E and W_U are different draws
    assert not torch.equal(model.W_E, model.W_U)


def test_per_tensor_gamma_and_init_stds_of_padded_members():
    V = 200
    model = CBOWEnsemble(V, [spec(seed=1, d=64, gamma=1.0, gamma_u=0.5), spec(seed=2, d=32, gamma=0.6, gamma_u=1.2)])
    stds = model.member_rows()
    assert abs(stds[0]["init_std_W_E"] / 64 ** -1.0 - 1) < 0.05 and abs(stds[0]["init_std_W_U"] / 64 ** -0.5 - 1) < 0.05
    # member 1 has width 32: its std is over its own 32 columns, not the zero padding
    assert abs(stds[1]["init_std_W_E"] / 32 ** -0.6 - 1) < 0.05 and abs(stds[1]["init_std_W_U"] / 32 ** -1.2 - 1) < 0.05
    assert torch.count_nonzero(model.W_E[1, :, 32:]) == 0 and torch.count_nonzero(model.W_U[1, :, 32:]) == 0


def test_gamma_normal_and_realised_std_helpers():
    gen = torch.Generator().manual_seed(0)
    t = gamma_normal_(torch.empty(100, 100), 25, 0.5, gen)
    assert abs(realised_std(t) / 0.2 - 1) < 0.05
    assert realised_std(torch.tensor([1.0, 3.0])) == pytest.approx(math.sqrt(2))  # unbiased, over all entries


def test_member_specs_apply_per_tensor_overrides():
    cfg = apply_overrides(RunConfig(), {"model.init.gamma": 0.8, "model.d": 16, "train.seed": 5, "train.members": 3})
    specs = member_specs(cfg)
    assert [m.seed for m in specs] == [5, 6, 7]
    assert all(m.d == 16 and m.gamma_embedding == 0.8 and m.gamma_unembedding == 0.8 for m in specs)
    cfg = apply_overrides(cfg, {"model.init.embedding": 1.25})
    assert {(m.gamma_embedding, m.gamma_unembedding) for m in member_specs(cfg)} == {(1.25, 0.8)}
    cfg = apply_overrides(cfg, {"model.init.embedding": None, "model.init.unembedding": 0.5})
    assert {(m.gamma_embedding, m.gamma_unembedding) for m in member_specs(cfg)} == {(0.8, 0.5)}


def test_member_specs_gamma_reaches_the_weights():
    cfg = apply_overrides(RunConfig(), {"model.d": 64, "model.init.gamma": 1.0, "model.init.embedding": 0.5})
    model = CBOWEnsemble(100, member_specs(cfg))
    stds = model.member_rows()[0]
    assert abs(stds["init_std_W_E"] / 64 ** -0.5 - 1) < 0.05 and abs(stds["init_std_W_U"] / 64 ** -1.0 - 1) < 0.05


# ---------------------------------------------------------------- (b) members are independent of the ensemble

def test_member_init_depends_only_on_its_own_seed_gamma_and_d():
    V = 30
    alone = CBOWEnsemble(V, [spec(seed=3, d=16, gamma=0.9)])
    ensemble = CBOWEnsemble(V, [spec(seed=2, d=16, gamma=0.9), spec(seed=3, d=16, gamma=0.9),
                                spec(seed=4, d=16, gamma=0.9)])
    assert torch.equal(alone.W_E[0], ensemble.W_E[1]) and torch.equal(alone.W_U[0], ensemble.W_U[1])
    # ... also next to wider members and members with other γ (then it is zero-padded)
    mixed = CBOWEnsemble(V, [spec(seed=9, d=48, gamma=0.5), spec(seed=3, d=16, gamma=0.9)])
    assert torch.equal(mixed.W_E[1, :, :16], alone.W_E[0]) and torch.equal(mixed.W_U[1, :, :16], alone.W_U[0])
    assert torch.count_nonzero(mixed.W_E[1, :, 16:]) == 0
    # and the seed matters
    assert not torch.equal(ensemble.W_E[0], ensemble.W_E[1])


def test_float64_model_draws_in_float64():
    model = CBOWEnsemble(100, [spec(seed=1, d=64, gamma=0.75)], dtype=torch.float64)
    assert model.W_E.dtype == torch.float64 and model.W_U.dtype == torch.float64
    assert abs(model.member_rows()[0]["init_std_W_E"] / 64 ** -0.75 - 1) < 0.05


# ---------------------------------------------------------------- (c) forward = W_U σ(Σ_i W_E[x_i])

ACTIVATIONS = [
    ("relu", {}, torch.relu),
    ("gelu", {}, torch.nn.functional.gelu),
    ("tanh", {}, torch.tanh),
    ("poly", {"coeffs": [1.0, 0.5, -2.0]}, lambda z: z + 0.5 * z**2 - 2.0 * z**3),
    ("monomial", {"power": 3}, lambda z: z**3),
]


@pytest.mark.parametrize("name,kwargs,sigma", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_forward_equals_per_member_loop(name, kwargs, sigma):
    V, L, n = 11, 3, 25
    members = [spec(seed=s, d=d, gamma=0.4) for s, d in [(0, 6), (1, 9), (5, 9)]]
    model = CBOWEnsemble(V, members, name, dtype=torch.float64, **kwargs)
    X = torch.randint(0, V, (n, L), generator=torch.Generator().manual_seed(0))
    X[0] = torch.tensor([4, 4, 4])  # a token repeated: it counts three times
    logits = model(X)
    assert logits.shape == (3, n, V)
    for k, m in enumerate(members):
        W_E, W_U = model.W_E[k, :, : m.d].detach(), model.W_U[k, :, : m.d].detach()
        for i in range(n):
            h = sum(W_E[int(x)] for x in X[i])
            expected = W_U @ sigma(h)
            torch.testing.assert_close(logits[k, i].detach(), expected, rtol=1e-12, atol=1e-12)


def test_activation_values_at_sample_points():
    z = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    assert torch.equal(activation_fn("poly", [2.0, 0.0, 1.0])(z), torch.tensor([-3.0, 0.0, 12.0], dtype=torch.float64))
    assert torch.equal(activation_fn("monomial", power=4)(z), torch.tensor([1.0, 0.0, 16.0], dtype=torch.float64))
    for name in ("relu", "gelu", "tanh", "poly", "monomial"):
        assert activation_fn(name, [1.0])(torch.zeros(3)).abs().max() == 0  # σ(0) = 0 keeps padding at zero


@pytest.mark.parametrize("args,needle", [
    (("swish",), "unknown activation 'swish'"),
    (("poly", []), "coeffs"),
    (("monomial", (), 0), "power >= 1"),
])
def test_bad_activation_raises_value_error(args, needle):
    with pytest.raises(ValueError, match=needle):
        activation_fn(*args)
    with pytest.raises(ValueError, match=needle):
        CBOWEnsemble(5, [spec()], *args)


# ---------------------------------------------------------------- (d) mixed widths train like separate models

@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("activation", ["relu", "gelu", "tanh"])
def test_mixed_width_ensemble_trains_like_separate_members(optimizer, activation):
    torch.manual_seed(0)
    V, n, L = 12, 40, 2
    gen = torch.Generator().manual_seed(1)
    X, y = torch.randint(0, V, (n, L), generator=gen), torch.randint(0, V, (n,), generator=gen)
    members = [spec(seed=0, d=8, gamma=0.5), spec(seed=1, d=16, gamma=0.5)]

    def make_opt(params):
        if optimizer == "sgd":
            return torch.optim.SGD(params, lr=0.5, momentum=0.9)
        cls = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
        return cls(params, lr=0.05, weight_decay=0.1 if optimizer == "adamw" else 0.0)

    def train(model, steps=8):
        opt = make_opt(model.parameters())
        for _ in range(steps):
            opt.zero_grad()
            member_losses(model, X, y, backward=True)
            opt.step()
        return model

    dtype = torch.float64
    together = train(CBOWEnsemble(V, members, activation, dtype=dtype))
    for k, m in enumerate(members):
        alone = train(CBOWEnsemble(V, [m], activation, dtype=dtype))
        assert not torch.equal(alone.W_E[0], CBOWEnsemble(V, [m], activation, dtype=dtype).W_E[0])  # it trained
        torch.testing.assert_close(together.W_E[k, :, : m.d], alone.W_E[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(together.W_U[k, :, : m.d], alone.W_U[0], rtol=0, atol=1e-12)
        # padding stays exactly zero
        assert torch.count_nonzero(together.W_E[k, :, m.d:]) == 0
        assert torch.count_nonzero(together.W_U[k, :, m.d:]) == 0


@pytest.mark.parametrize("pool", ["sum", "mean"])
@pytest.mark.parametrize("bias", [False, True])
def test_bias_and_mean_pool_forward_equals_the_written_out_model(bias, pool):
    V, L, n = 9, 3, 20
    members = [spec(seed=s, d=d, gamma=0.4) for s, d in [(0, 5), (1, 7)]]
    model = CBOWEnsemble(V, members, "relu", dtype=torch.float64, bias=bias, pool=pool)
    if bias:
        assert torch.count_nonzero(model.b) == 0  # the bias starts at zero
        with torch.no_grad():
            model.b[:, :, :5].normal_(generator=torch.Generator().manual_seed(3))
    X = torch.randint(0, V, (n, L), generator=torch.Generator().manual_seed(0))
    logits = model(X)
    for k, m in enumerate(members):
        W_E, W_U = model.W_E[k, :, : m.d].detach(), model.W_U[k, :, : m.d].detach()
        b = model.b[k, 0, : m.d].detach() if bias else torch.zeros(m.d, dtype=torch.float64)
        for i in range(n):
            h = sum(W_E[int(x)] for x in X[i]) / (L if pool == "mean" else 1)
            torch.testing.assert_close(logits[k, i].detach(), W_U @ torch.relu(h + b), rtol=1e-12, atol=1e-12)


def test_a_trained_bias_moves_and_keeps_padding_at_zero():
    V, n, L = 12, 40, 2
    gen = torch.Generator().manual_seed(1)
    X, y = torch.randint(0, V, (n, L), generator=gen), torch.randint(0, V, (n,), generator=gen)
    model = CBOWEnsemble(V, [spec(seed=0, d=8, gamma=0.5), spec(seed=1, d=16, gamma=0.5)], "relu",
                         dtype=torch.float64, bias=True, pool="mean")
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(5):
        opt.zero_grad()
        member_losses(model, X, y, backward=True)
        opt.step()
    assert torch.count_nonzero(model.b[0, :, :8]) == 8
    assert torch.count_nonzero(model.b[0, :, 8:]) == 0 and torch.count_nonzero(model.W_E[0, :, 8:]) == 0


def test_bias_and_pool_reach_the_model_from_the_config():
    from ctxstair.models import build_ensemble
    from ctxstair.tasks.registry import make
    dataset = make("add", N=6)
    cfg = apply_overrides(RunConfig(), {"task.N": 6, "model.d": 4, "model.bias": True, "model.pool": "mean"})
    model = build_ensemble(cfg.validate(), dataset)
    assert model.pool == "mean" and tuple(model.b.shape) == (1, 1, 4)
    assert "b" in model.state_dict()
    assert "b" not in build_ensemble(RunConfig(), dataset).state_dict()


@pytest.mark.parametrize("n, V, d", [(7, 5, 3), (300, 60, 64)])  # below and above GATHER_MIN_WORK
def test_embedding_sum_by_gather_and_by_counts_agree_with_the_definition(n, V, d):
    from ctxstair.models import cbow

    gen = torch.Generator().manual_seed(0)
    W_E = torch.randn(3, V, d, generator=gen, dtype=torch.float64, requires_grad=True)
    X = torch.randint(V, (n, 4), generator=gen)
    X[0] = X[0, 0]  # a token repeated within a sample counts once per occurrence
    expected = torch.stack([sum(W_E[k, X[:, i]] for i in range(4)) for k in range(3)])
    assert (n * V * d >= cbow.GATHER_MIN_WORK) == (n == 300)
    got = cbow.embedding_sum(W_E, X)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    weights = torch.randn(3, n, d, generator=gen, dtype=torch.float64)
    (grad,) = torch.autograd.grad((got * weights).sum(), W_E)
    (grad_expected,) = torch.autograd.grad((expected * weights).sum(), W_E)
    torch.testing.assert_close(grad, grad_expected, atol=1e-12, rtol=0)
