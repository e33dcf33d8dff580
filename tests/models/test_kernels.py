"""The compiled embedding sum gives torch's bits, forward and backward, so that no recipe's number moves."""

import pytest
import torch
from engine_helpers import grouped, trained

from ctxstair.config import RunConfig, apply_overrides
from ctxstair.models import kernels


def torch_gather_sum(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """What the engine computed before the compiled loops: torch's embedding, then the sum over positions."""
    return torch.nn.functional.embedding(rows, table).sum(dim=2)


def sum_and_gradient(function, table: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor):
    table = table.detach().clone().requires_grad_(True)
    h = function(table, rows)
    (h * weights).sum().backward()
    return h.detach(), table.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K, n, L, R, d", [(16, 1600, 2, 1296, 128), (2, 700, 1, 9, 5), (3, 400, 2, 7, 33),
                                           (2, 300, 3, 11, 8), (2, 200, 20, 6, 16)])
def test_forward_and_backward_are_torch_bit_for_bit(dtype, K, n, L, R, d):
    # Few rows (R) and many samples: each row is added into hundreds of times, so an order of the
    # additions other than torch's would show in the last bits (checked below for the backward).
    gen = torch.Generator().manual_seed(L * 1000 + d)
    table = torch.randn(R, d, generator=gen, dtype=dtype)
    rows = torch.randint(R, (K, n, L), generator=gen)
    weights = torch.randn(K, n, d, generator=gen, dtype=dtype)
    h_torch, grad_torch = sum_and_gradient(torch_gather_sum, table, rows, weights)
    h, grad = sum_and_gradient(kernels.GatherSum.apply, table, rows, weights)
    assert torch.equal(h, h_torch) and torch.equal(grad, grad_torch)


def test_the_comparison_tells_orders_of_addition_apart():
    """Adding the positions one after the other (all first positions, then all second ones) is the same sum
    in another order: the bitwise comparison above would catch a loop that did that."""
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(7, 33, generator=gen)
    rows = torch.randint(7, (3, 400, 2), generator=gen)
    weights = torch.randn(3, 400, 33, generator=gen)
    _, grad_torch = sum_and_gradient(torch_gather_sum, table, rows, weights)
    by_position = torch.zeros_like(table)
    for position in range(2):
        by_position.index_add_(0, rows[:, :, position].reshape(-1), weights.reshape(-1, 33))
    torch.testing.assert_close(by_position, grad_torch, rtol=0, atol=1e-4)  # sums of ≈ 170 terms of size 1
    assert not torch.equal(by_position, grad_torch)


@pytest.mark.parametrize("task", [{"task.name": "add", "task.N": 12},  # pairs: the compiled forward and backward
                                  {"task.name": "sum_mod", "task.N": 6, "task.L": 4}])  # 4 positions: torch's forward
def test_training_through_the_compiled_loops_gives_the_same_weights(task, monkeypatch):
    cfg = apply_overrides(RunConfig(), task | {"model.d": 40, "train.members": 3, "train.optimizer": "adam",
                                               "train.lr": 0.01, "analysis.enabled": False})
    calls = []
    apply = kernels.GatherSum.apply
    monkeypatch.setattr(kernels.GatherSum, "apply", lambda *args: calls.append(args[1].shape) or apply(*args))
    compiled = trained(cfg, grouped(cfg, 3, "gather"))
    assert calls  # the compiled loops ran
    monkeypatch.setattr(kernels, "COMPILED_DTYPES", ())
    calls.clear()
    reference = trained(cfg, grouped(cfg, 3, "gather"))
    assert not calls
    assert all(torch.equal(compiled[name], reference[name]) for name in reference)
