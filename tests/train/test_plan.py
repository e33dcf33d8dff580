"""The engine's execution plan (docs/design.md, "Execution plan"): every grouping of the members
gives the same weights bitwise, the rule picks what the engine always ran, the plan is recorded in
``resources.json`` and a resumed run keeps it, even where the rule would now choose otherwise."""

import json

import pytest
import torch
from engine_helpers import grouped, trained
from recipe_helpers import run_contents as contents

from ctxstair import tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.models import build_ensemble
from ctxstair.train import engine, plan, train_run

K = 6


def config(**overrides) -> RunConfig:
    base = {"task.N": 8, "model.d": 32, "train.members": K, "train.optimizer": "adam", "train.lr": 0.01,
            "train.epochs": 20, "snapshots.every": 10, "analysis.enabled": False}
    return apply_overrides(RunConfig(), base | {k.replace("__", "."): v for k, v in overrides.items()})


@pytest.mark.parametrize("overrides, embedding_sum", [
    ({}, "counts"), ({}, "gather"),
    ({"train__optimizer": "sgd", "train__batch_size": 20, "train__lr": 0.5}, "gather"),  # minibatches 20 and 4
    ({"model__kind": "attention", "model__d_k": 16}, None),
])
def test_every_grouping_gives_the_same_weights_bitwise(overrides, embedding_sum):
    cfg = config(**overrides)
    whole = trained(cfg, grouped(cfg, K, embedding_sum))
    for group in (2, 3, 4, 5):  # 4 and 5 leave a last group of 2 and of 1 (no group of one: a 1-member kernel)
        if K % group == 1:
            continue
        got = trained(cfg, grouped(cfg, group, embedding_sum))
        assert all(torch.equal(got[name], whole[name]) for name in whole), (group, embedding_sum)


def test_rule_at_the_benchmark_settings():
    """Staircase-add (n = 1,600, V = 81, d = 128, K = 32): two groups of 16, gathered; small models
    (n = 100, V = 21, d = 16, batches of 30 and a last one of 10) all at once, by count matmuls."""
    dataset = tasks.make("add", N=40)
    cfg = apply_overrides(RunConfig(), {"task.N": 40, "model.d": 128, "train.members": 32})
    assert plan.choose_plan(cfg, build_ensemble(cfg, dataset), dataset.n_samples).as_dict() == {
        "passes": [{"samples": 1600, "members_per_group": 16, "embedding_sum": "gather"}]}
    small = apply_overrides(RunConfig(), {"task.N": 10, "model.d": 16, "train.members": 32, "train.batch_size": 30})
    dataset = tasks.make("add", N=10)
    assert [(p.samples, p.members_per_group, p.embedding_sum)
            for p in plan.choose_plan(small, build_ensemble(small, dataset), 100).passes] == [
        (10, 32, "counts"), (30, 32, "counts"), (100, 32, "counts")]
    assert [plan.members_per_group(K, 81, 128, 1600, 4) for K in (1, 2, 17, 19, 32, 33)] == [1, 2, 17, 10, 16, 17]


def test_resume_keeps_the_recorded_plan(tmp_path, monkeypatch):
    cfg = config(**{"train.epochs": 20})
    reference = train_run(cfg, tmp_path / "reference", progress=False)
    recorded = json.loads((reference / "resources.json").read_text())["plan"]
    assert recorded == {"passes": [{"samples": 64, "members_per_group": K, "embedding_sum": "counts"}]}

    def stop(epoch):
        if epoch == 13:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "resumed", hook=stop, progress=False)
    assert json.loads((tmp_path / "resumed" / "resources.json").read_text())["plan"] == recorded
    # a rule that would now run one member at a time, summing by gathers (other bits): the resume must not use it
    monkeypatch.setattr(plan, "PASS_BYTES", 1)
    monkeypatch.setattr(plan, "embedding_sum_method", lambda n, V, d: "gather")
    assert plan.choose_plan(cfg, build_ensemble(cfg, tasks.make("add", N=8)), 64).as_dict() != recorded
    seen = []
    original = engine.member_losses
    monkeypatch.setattr(engine, "member_losses",
                        lambda *a, **kw: seen.append(kw["plan"].as_dict()) or original(*a, **kw))
    resumed = train_run(cfg, tmp_path / "resumed", resume=True, progress=False)
    assert seen and all(p == recorded for p in seen)
    assert json.loads((resumed / "resources.json").read_text())["plan"] == recorded
    assert contents(resumed) == contents(reference)


def test_a_fresh_run_follows_the_rule(tmp_path, monkeypatch):
    """The rule, not a constant, decides: a rule changed by monkeypatching is what a new run records."""
    monkeypatch.setattr(plan, "PASS_BYTES", 1)  # one member per group
    monkeypatch.setattr(plan, "embedding_sum_method", lambda n, V, d: "gather")
    run = train_run(config(), tmp_path / "run", progress=False)
    assert json.loads((run / "resources.json").read_text())["plan"] == {
        "passes": [{"samples": 64, "members_per_group": 1, "embedding_sum": "gather"}]}
