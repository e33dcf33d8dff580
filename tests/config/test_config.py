"""Run configuration: dotted overrides, YAML round trip, and one clear ValueError per bad input."""

import dataclasses

import pytest
import yaml

from ctxstair.config import RunConfig, apply_overrides, dump_yaml, from_dict, load_yaml, parse_overrides, to_dict
from ctxstair.errors import InputError


def test_dotted_overrides_reach_every_depth_and_leave_the_input_alone():
    base = RunConfig()
    items = ["train.lr=0.01", "model.init.gamma=0.8", "task.N=40", "model.activation=poly", "model.coeffs=[1, 0.5]",
             "model.init.embedding=null", "model.init.unembedding=0.75", "train.optimizer=sgd",
             "train.members=3", "analysis.enabled=false", "recipe=mine"]
    cfg = apply_overrides(base, parse_overrides(items))
    assert cfg.train.lr == 0.01 and isinstance(cfg.train.lr, float)
    assert cfg.model.init.gamma == 0.8
    assert cfg.task.params == {"N": 40}
    assert cfg.model.coeffs == [1.0, 0.5] and all(isinstance(c, float) for c in cfg.model.coeffs)
    assert cfg.model.init.embedding is None and cfg.model.init.unembedding == 0.75
    assert cfg.train.optimizer == "sgd" and cfg.train.members == 3
    assert cfg.analysis.enabled is False and cfg.recipe == "mine"
    # every other field keeps its default, and the input config is not modified
    assert cfg.train.epochs == base.train.epochs and cfg.model.d == base.model.d
    assert base == RunConfig() and base.task.params == {}


def test_int_is_accepted_for_float_and_exponent_notation_is_a_float():
    cfg = apply_overrides(RunConfig(), parse_overrides(["train.lr=1", "train.weight_decay=1e-3"]))
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert cfg.train.weight_decay == pytest.approx(1e-3)  # YAML 1.1 would read "1e-3" as a string
    assert load_yaml("train: {lr: 2e-2}").train.lr == pytest.approx(0.02)


def test_task_name_override_and_task_params_accumulate():
    cfg = apply_overrides(RunConfig(), {"task.name": "mod", "task.N": 12})
    cfg = apply_overrides(cfg, {"task.M": 3})
    assert cfg.task.name == "mod" and cfg.task.params == {"N": 12, "M": 3}


def test_yaml_round_trip_equals():
    cfg = apply_overrides(RunConfig(), parse_overrides([
        "train.lr=0.025", "task.N=40", "task.name=mod", "model.coeffs=[1, 0.5, -0.25]",
        "model.init.embedding=0.6", "model.activation=poly", "train.dtype=float64", "snapshots.every=7"]))
    text = dump_yaml(cfg)
    again = load_yaml(text)
    assert again == cfg
    assert dump_yaml(again) == text
    assert from_dict(to_dict(cfg)) == cfg
    # the dump lists every field, defaults filled in
    for f in dataclasses.fields(RunConfig().train):
        assert f"  {f.name}:" in text


def test_empty_yaml_is_the_default_config():
    assert load_yaml("") == RunConfig()


def _error(overrides) -> str:
    with pytest.raises(ValueError) as info:
        apply_overrides(RunConfig(), overrides)
    assert isinstance(info.value, InputError)
    return str(info.value)


@pytest.mark.parametrize("key,allowed", [
    ("foo", ["recipe", "task", "model", "train", "snapshots", "analysis"]),
    ("train.foo", ["optimizer", "lr", "epochs", "batch_size", "momentum", "weight_decay", "seed", "members", "dtype"]),
    ("model.init.foo", ["gamma", "embedding", "unembedding"]),
    ("snapshots.often", ["log_points", "every"]),
    ("model.d.x", ["no sub-keys"]),
])
def test_unknown_key_at_every_depth_names_key_and_allowed(key, allowed):
    message = _error({key: 1})
    assert repr(key) in message
    for name in allowed:
        assert name in message


@pytest.mark.parametrize("key", ["train", "model.init", "analysis"])
def test_section_set_as_value_is_refused(key):
    message = _error({key: 1})
    assert repr(key) in message and "section" in message


@pytest.mark.parametrize("key,value,kind", [
    ("train.lr", "fast", "float"),
    ("model.init.gamma", "big", "float"),
    ("train.epochs", 1.5, "int"),
    ("model.d", 32.0, "int"),
    ("train.epochs", True, "int"),
    ("train.members", False, "int"),
    ("analysis.enabled", 1, "bool"),
    ("train.optimizer", 3, "str"),
])
def test_wrong_type_names_key_and_type(key, value, kind):
    message = _error({key: value})
    assert message.startswith(key) and f"type {kind}" in message and repr(value) in message


def test_wrong_list_types():
    assert "model.coeffs must be a list" in _error({"model.coeffs": 3})
    assert "model.coeffs[1] must be of type float" in _error({"model.coeffs": [1, "x"]})
    assert "task.params must be a mapping" in _error({"task.params": 3})


@pytest.mark.parametrize("key,value,bound", [
    ("train.epochs", 0, ">= 1"),
    ("model.d", 0, ">= 1"),
    ("train.members", 0, ">= 1"),
    ("train.batch_size", -1, ">= 0"),
    ("snapshots.every", 0, ">= 1"),
    ("analysis.probe_folds", 1, ">= 2"),
    ("train.lr", 0, "> 0"),
    ("train.lr", -0.1, "> 0"),
    ("model.init.gamma", 0, "> 0"),
    ("model.init.embedding", -0.5, "> 0"),
    ("train.momentum", -0.9, ">= 0"),
    ("train.weight_decay", -1e-4, ">= 0"),
])
def test_out_of_range_names_key_and_bound(key, value, bound):
    message = _error({key: value})
    assert message.startswith(key) and bound in message


def test_boundary_values_are_accepted():
    cfg = apply_overrides(RunConfig(), {"train.epochs": 1, "train.batch_size": 0, "train.momentum": 0,
                                        "snapshots.log_points": 0, "analysis.probe_steps": 0})
    assert cfg.train.epochs == 1 and cfg.snapshots.log_points == 0


@pytest.mark.parametrize("key,value,allowed", [
    ("train.optimizer", "rmsprop", ["gd", "sgd", "adam", "adamw"]),
    ("model.activation", "swish", ["relu", "gelu", "tanh", "poly", "monomial"]),
    ("train.dtype", "float16", ["float32", "float64"]),
])
def test_bad_choice_names_key_and_choices(key, value, allowed):
    message = _error({key: value})
    assert message.startswith(key) and repr(value) in message
    for name in allowed:
        assert name in message


def test_pool_choice_and_cbow_only_settings():
    message = _error({"model.pool": "max"})
    assert message.startswith("model.pool") and "sum" in message and "mean" in message
    for key, value in (("model.bias", True), ("model.pool", "mean")):
        assert "model.kind=cbow" in _error({"model.kind": "attention", key: value})


def test_poly_needs_coefficients():
    assert "model.coeffs" in _error({"model.activation": "poly", "model.coeffs": []})


@pytest.mark.parametrize("text,needle", [
    ("train: {lr: 1, foo: 2}", "'train.foo'; allowed: optimizer, lr, epochs"),
    ("model: {init: {bar: 1}}", "'model.init.bar'; allowed: gamma, embedding, unembedding"),
    ("nosection: 1", "'nosection'"),
    ("train: 3", "'train' must be a mapping"),
    ("train: {epochs: 0}", "train.epochs must be >= 1"),
    ("train: {optimizer: lbfgs}", "train.optimizer must be one of"),
    ("[1, 2]", "mapping"),
    ("a: [", "not valid YAML"),
])
def test_load_yaml_errors(text, needle):
    with pytest.raises(ValueError) as info:
        load_yaml(text)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_parse_overrides_values_and_errors():
    parsed = parse_overrides(["a.b=3", "c=0.5", "d=true", "e=null", "f=[1, 2]", "g=hello", "h=x=y"])
    assert parsed == {"a.b": 3, "c": 0.5, "d": True, "e": None, "f": [1, 2], "g": "hello", "h": "x=y"}
    for items, needle in [(["train.lr"], "key=value"), (["=3"], "key=value"),
                          (["train.lr=1", "train.lr=2"], "'train.lr' twice"),
                          (["task.N=4", " task.N =5"], "'task.N' twice")]:
        with pytest.raises(ValueError) as info:
            parse_overrides(items)
        assert isinstance(info.value, InputError) and needle in str(info.value)


@pytest.mark.parametrize("kind, items, message", [
    ("attention", ["model.activation=tanh"], "model.activation does not apply to model.kind=attention; its settings: "
                                             "model.kind, model.d, model.d_k, model.positional, model.init.gamma"),
    ("attention", ["model.pool=mean"], "model.bias and model.pool are settings of model.kind=cbow, got 'attention'"),
    ("cbow", ["model.init.qk=2"], "model.init.qk does not apply to model.kind=cbow"),
    ("cbow", ["model.d_k=8"], "model.d_k does not apply to model.kind=cbow"),
    ("cbow", ["model.power=3"], "model.power is read only with model.activation=monomial, and this run's activation "
                                "is relu"),
    ("cbow", ["model.init.mlp=2"], "model.init.mlp does not apply to model.kind=cbow"),
])
def test_an_override_the_model_does_not_use_is_refused_naming_the_key_and_the_kind(kind, items, message):
    with pytest.raises(InputError, match=message) as error:
        apply_overrides(RunConfig(), parse_overrides([f"model.kind={kind}", *items]))
    assert "\n" not in str(error.value)
    # What the model does use goes through, also when the same overrides choose the kind.
    assert apply_overrides(RunConfig(), parse_overrides(["model.kind=attention", "model.d_k=8"])).model.d_k == 8
    monomial = apply_overrides(RunConfig(), parse_overrides(["model.activation=monomial", "model.power=3"]))
    assert monomial.model.power == 3


def test_config_yaml_records_only_what_the_model_uses_and_old_files_still_load():
    attention = apply_overrides(RunConfig(), {"model.kind": "attention"})
    recorded = dump_yaml(attention)
    model = yaml.safe_load(recorded)["model"]
    assert list(model) == ["kind", "d", "d_k", "positional", "init"]
    assert list(model["init"]) == ["gamma", "embedding", "unembedding", "qk", "ov"]
    assert "coeffs:" not in dump_yaml(RunConfig()) and "coeffs:" in dump_yaml(
        apply_overrides(RunConfig(), {"model.activation": "poly"}))
    # A file written before, with every setting, loads: what the kind does not use was never read.
    old = dataclasses.asdict(attention)
    assert "activation" in old["model"]
    assert load_yaml(dump_yaml(from_dict(old))) == load_yaml(recorded)
