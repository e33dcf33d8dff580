"""Order shares over training (SPEC §6.1): exact for polynomial σ, small-init dominance of order 0."""

import numpy as np
import pytest
import torch

from ctxstair import tasks
from ctxstair.analysis import analyse
from ctxstair.analysis.order_shares import read_order_shares
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.errors import InputError
from ctxstair.models import CBOWEnsemble, MemberSpec
from ctxstair.theory.shares import order_shares
from ctxstair.train import train_run


def _weights(V, d, gamma, seed=0):
    model = CBOWEnsemble(V, [MemberSpec(seed, d, gamma, gamma)], "poly", (1.0, 1.0), dtype=torch.float64)
    return model.W_E[0].detach().numpy(), model.W_U[0].detach().numpy()


def test_polynomial_shares_are_exact_and_order0_dominates_at_small_init():
    ds = tasks.make("add", N=10)
    small = order_shares(*_weights(ds.vocab_size, 64, 1.5), ds.X, ds.y, ds.tokens, "poly", (1.0, 1.0))
    large = order_shares(*_weights(ds.vocab_size, 64, 0.25), ds.X, ds.y, ds.tokens, "poly", (1.0, 1.0))
    for rows in (small, large):
        assert [r["order"] for r in rows] == [0, 1]
        assert abs(sum(r["share"] for r in rows) - 1) < 1e-12
        assert rows[0]["relative_residual"] < 1e-10
    assert small[0]["share"] > 0.95  # order 1 is O(d^-γ) relative to order 0 at small init
    assert large[1]["share"] > 5 * small[1]["share"]


def test_theory_csv_has_one_row_per_snapshot_member_and_order(tmp_path):
    cfg = apply_overrides(RunConfig(), {"task.N": 6, "model.d": 16, "model.activation": "relu", "train.optimizer": "gd",
                                        "train.lr": 1.0, "train.epochs": 30, "snapshots.every": 10, "train.members": 2})
    out = train_run(cfg, tmp_path / "run", progress=False)
    analyse(out, ["order_shares"])
    table = read_order_shares(out)
    epochs = sorted(set(table["epoch"].tolist()))
    assert epochs[0] == 0 and epochs[-1] == 30
    assert len(table["order"]) == len(epochs) * 2 * 2  # members × orders (L = 2: orders 0 and 1)
    assert np.all((table["share"] >= 0) & (table["share"] <= 1))
    assert np.all(np.abs(table["cosine_with_update"]) <= 1 + 1e-12)
    assert np.all(table["relative_residual"] < 1.0)


def test_order_shares_refuse_a_model_the_theory_does_not_describe(tmp_path):
    cfg = apply_overrides(RunConfig(), {"task.N": 6, "model.d": 8, "model.bias": True, "train.optimizer": "gd",
                                        "train.epochs": 2, "snapshots.every": 1})
    out = train_run(cfg, tmp_path / "run", progress=False)
    with pytest.raises(InputError, match="model.bias=false and model.pool=sum"):
        analyse(out, ["order_shares"])
    assert not (out / "theory.csv").exists()
