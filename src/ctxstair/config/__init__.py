"""Typed run configuration: nested dataclasses, YAML files and dotted ``--set`` overrides.

    cfg = RunConfig()                                   # defaults
    cfg = apply_overrides(cfg, parse_overrides(["train.lr=0.01", "task.N=40", "model.init.gamma=0.8"]))
    dump_yaml(cfg)                                      # the resolved config saved with every run

``task.<param>`` overrides go to ``task.params`` and are checked by the task registry; every other
key must name a field. An unknown key or a bad value raises InputError naming the key and what is
allowed (the CLI turns it into exit code 2).

A model section has the settings of every model kind, but each kind uses its own
(:data:`KIND_SETTINGS`, and ``coeffs``/``power`` only with the activation that reads them): an
override of a setting the chosen kind does not use is refused, naming the key and the kind, and a
run's ``config.yaml`` records only the settings its model uses (:func:`dump_yaml`). Files written
before, with every setting, still load: what the kind does not use was never read.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from ctxstair.checks import check_key_choice, check_minimum, check_positive
from ctxstair.devices import check_device_name
from ctxstair.errors import InputError

OPTIMIZERS = ("gd", "sgd", "adam", "adamw", "flow")
#: Adaptive torchdiffeq solvers offered for ``train.optimizer=flow`` (SPEC §5 "Training").
FLOW_METHODS = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
MODEL_KINDS = ("cbow", "attention")
ACTIVATIONS = ("relu", "gelu", "tanh", "poly", "monomial")
#: CBOW embedding modes (SPEC §8 F8b): trainable W_E, fixed λ R φ^{y;1}_α v, fixed random λ v_α.
EMBEDDINGS = ("trainable", "signature", "random")
#: How the CBOW model pools its context embeddings: Σ_i w_{x_i} (SPEC §5) or their mean.
POOLS = ("sum", "mean")
DTYPES = ("float32", "float64")
#: How the alignment probes are fitted (:func:`ctxstair.alignment.probe_alignment`'s ``method``).
PROBE_METHODS = ("fast", "reference")

# YAML 1.1 (PyYAML) reads "1e-3" as a string: only "1.0e-3" is a float there. Numbers in exponent
# notation are accepted as floats wherever a float is expected.
#: A nested config dataclass with ``validate() -> self`` (RunConfig, LMConfig).
Config = Any

_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


@dataclass
class TaskConfig:
    """Which dataset to train on (SPEC §8): a registered task and its parameters."""

    name: str = "add"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class InitConfig:
    """γ-initialization (SPEC §4): std ``d_in^-γ``; per-component γ overrides default to ``gamma``
    (``embedding`` also sets the positional embeddings; ``qk`` W_Q and W_K, ``ov`` W_V and W_O of the
    attention model and the decoder; ``mlp`` the decoder's MLP matrices). The ensemble models and the
    decoder spell γ the same way: ``model.init.<component>``."""

    gamma: float = 1.0
    embedding: float | None = None
    unembedding: float | None = None
    qk: float | None = None
    ov: float | None = None
    mlp: float | None = None

    def validate(self, prefix: str = "model.init") -> None:
        """Every γ given is a positive number (InputError naming the key)."""
        check_positive([(f"{prefix}.{f.name}", getattr(self, f.name)) for f in dataclasses.fields(self)
                        if getattr(self, f.name) is not None])


#: The components with a γ of their own (``model.init.<component>``), in the order of
#: :class:`InitConfig`; the decoder's γ roles (``ctxstair.models.causal_lm.ROLES``) are these.
GAMMA_COMPONENTS = tuple(field.name for field in dataclasses.fields(InitConfig) if field.name != "gamma")


@dataclass
class ModelConfig:
    """The model of SPEC §5: ``kind`` ``cbow`` (the feed-forward model; activation ``poly`` uses
    ``coeffs`` C_1..C_K, ``monomial`` uses ``power`` K) or ``attention`` (the attention-only model:
    query/key/value width ``d_k``, learned positional embeddings when ``positional``).

    ``embedding`` (CBOW only, SPEC §8 F8b): ``trainable`` W_E; ``signature``, fixed w_α = λ R φ^{y;1}_α v
    (R, v random and fixed); ``random``, fixed w_α = λ v_α (v_α random). In the fixed modes only the
    scalar λ of each member and W_U are trained; λ starts at d^-γ (``models/cbow.py``).

    ``bias`` and ``pool`` (CBOW only) are settings the paper leaves open: a trainable hidden bias b,
    started at zero, in f = W_U σ(h + b), and ``pool`` ``sum`` (SPEC §5's h = Σ_i w_{x_i}) or
    ``mean`` (h = Σ_i w_{x_i} / L). The gradient-flow theory (SPEC §6) assumes neither."""

    kind: str = "cbow"
    d: int = 128
    d_k: int = 64
    positional: bool = True
    activation: str = "relu"
    coeffs: list[float] = field(default_factory=lambda: [1.0, 1.0])
    power: int = 2
    embedding: str = "trainable"
    bias: bool = False
    pool: str = "sum"
    init: InitConfig = field(default_factory=InitConfig)

    def settings(self) -> tuple[str, ...]:
        """The settings this model uses (dotted, below ``model.``): its kind's (:data:`KIND_SETTINGS`),
        less ``coeffs`` / ``power`` unless the activation is the one that reads them."""
        return tuple(name for name in KIND_SETTINGS[self.kind]
                     if name not in _ACTIVATION_SETTINGS or _ACTIVATION_SETTINGS[name] == self.activation)


#: The settings of :class:`ModelConfig` that each model kind uses.
KIND_SETTINGS: dict[str, tuple[str, ...]] = {
    "cbow": ("kind", "d", "activation", "coeffs", "power", "embedding", "bias", "pool",
             "init.gamma", "init.embedding", "init.unembedding"),
    "attention": ("kind", "d", "d_k", "positional", "init.gamma", "init.embedding", "init.unembedding",
                  "init.qk", "init.ov"),
}
#: CBOW settings read by one activation only: the coefficients of ``poly``, the power of ``monomial``.
_ACTIVATION_SETTINGS = {"coeffs": "poly", "power": "monomial"}


@dataclass
class TrainConfig:
    """Optimisation (SPEC §5 "Training"): ``gd`` is full-batch gradient descent; ``batch_size`` 0
    means full batch; ``members`` ensemble members get seeds ``seed, seed+1, ...``.

    ``flow`` integrates the gradient flow dθ/dt = −∇L(θ) (− weight_decay·θ) exactly with an
    adaptive ODE solver (torchdiffeq ``flow_method``, in float64, tolerances ``flow_rtol`` and
    ``flow_atol``); "epoch" e then means flow time t = e·lr, so that gradient descent with step
    lr approximates the flow at the same epoch. It needs the full batch and no momentum.

    ``device``: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``.
    Bitwise reproducibility under a seed holds on the CPU; on a GPU runs agree to float rounding.
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    epochs: int = 3000
    batch_size: int = 0
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    members: int = 1
    dtype: str = "float32"
    flow_rtol: float = 1e-6
    flow_atol: float = 1e-8
    flow_method: str = "dopri5"
    device: str = "auto"


@dataclass
class SnapshotConfig:
    """Snapshot schedule: ``log_points`` log-spaced epochs up to ``every``, then every ``every`` epochs
    (epoch 0 and the last epoch always included). ``save=False`` (``ctxstair run --no-analysis``)
    writes no ``snapshots/*.safetensors``; resume checkpoints keep the schedule."""

    log_points: int = 16
    every: int = 100
    save: bool = True


@dataclass
class AnalysisConfig:
    """Alignment analysis after training (SPEC §3); probe defaults are the paper's settings.

    ``probe``: how the Adam fits are computed, ``fast`` (float32, closed-form gradient) or
    ``reference`` (float64 autograd); the same steps, numbers equal up to rounding
    (:mod:`ctxstair.alignment.probe`)."""

    enabled: bool = True
    probe: str = "fast"
    probe_folds: int = 5
    probe_steps: int = 300
    probe_lr: float = 0.01
    probe_restarts: int = 1
    probe_seed: int = 0


@dataclass
class RunConfig:
    """One training run: a recipe name and its task, model, training, snapshot and analysis settings."""

    #: What the ensemble engine counts: snapshot names, metrics rows and checkpoints are keyed by epoch.
    TIME_UNIT: ClassVar[str] = "epoch"

    recipe: str = "custom"
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)

    def validate(self) -> RunConfig:
        """Check value ranges and choices; return self or raise InputError naming the key."""
        check_key_choice("train.optimizer", self.train.optimizer, OPTIMIZERS)
        check_key_choice("model.activation", self.model.activation, ACTIVATIONS)
        check_key_choice("model.kind", self.model.kind, MODEL_KINDS)
        check_key_choice("model.embedding", self.model.embedding, EMBEDDINGS)
        if self.model.embedding != "trainable" and self.model.kind != "cbow":
            raise InputError(f"model.embedding={self.model.embedding} needs model.kind=cbow, got {self.model.kind!r}")
        check_key_choice("model.pool", self.model.pool, POOLS)
        if (self.model.bias or self.model.pool != "sum") and self.model.kind != "cbow":
            raise InputError(f"model.bias and model.pool are settings of model.kind=cbow, got {self.model.kind!r}")
        check_key_choice("train.dtype", self.train.dtype, DTYPES)
        check_key_choice("analysis.probe", self.analysis.probe, PROBE_METHODS)
        check_key_choice("train.flow_method", self.train.flow_method, FLOW_METHODS)
        check_device_name("train.device", self.train.device)
        check_minimum([
            ("model.d", self.model.d, 1), ("model.d_k", self.model.d_k, 1), ("model.power", self.model.power, 1),
            ("train.epochs", self.train.epochs, 1),
            ("train.batch_size", self.train.batch_size, 0), ("train.members", self.train.members, 1),
            ("train.seed", self.train.seed, 0), ("snapshots.log_points", self.snapshots.log_points, 0),
            ("snapshots.every", self.snapshots.every, 1), ("analysis.probe_folds", self.analysis.probe_folds, 2),
            ("analysis.probe_steps", self.analysis.probe_steps, 0),
            ("analysis.probe_restarts", self.analysis.probe_restarts, 1),
            ("train.momentum", self.train.momentum, 0), ("train.weight_decay", self.train.weight_decay, 0),
        ])
        check_positive([("train.lr", self.train.lr), ("analysis.probe_lr", self.analysis.probe_lr),
                        ("train.flow_rtol", self.train.flow_rtol), ("train.flow_atol", self.train.flow_atol)])
        self.model.init.validate()
        if self.train.optimizer == "flow":
            if self.train.batch_size != 0:
                raise InputError(f"train.optimizer=flow integrates the full-batch gradient flow: train.batch_size must "
                                 f"be 0 (full batch), got {self.train.batch_size}")
            if self.train.momentum != 0:
                raise InputError(f"train.optimizer=flow has no momentum: train.momentum must be 0, "
                                 f"got {self.train.momentum}")
        if self.model.activation == "poly" and not self.model.coeffs:
            raise InputError("model.coeffs must list at least one coefficient C_1 for activation 'poly'")
        return self

    def check_applies(self, keys: list[str]) -> None:
        """InputError, naming the key and the model kind, for an override ``keys`` of a model setting that
        this run's model does not use (:meth:`ModelConfig.settings`)."""
        used = self.model.settings()
        for key in keys:
            name = key.removeprefix("model.")
            if not key.startswith("model.") or name in used:
                continue
            if name in _ACTIVATION_SETTINGS and self.model.kind == "cbow":
                raise InputError(f"{key} is read only with model.activation={_ACTIVATION_SETTINGS[name]}, and this "
                                 f"run's activation is {self.model.activation}")
            raise InputError(f"{key} does not apply to model.kind={self.model.kind}; its settings: "
                             + ", ".join(f"model.{n}" for n in used))

    def recorded(self, data: dict) -> dict:
        """The dict of :func:`to_dict` with only the model settings this run uses (what ``config.yaml``
        holds)."""
        used = set(self.model.settings())
        model = {k: v for k, v in data["model"].items() if k in used or k == "init"}
        model["init"] = {k: v for k, v in model["init"].items() if f"init.{k}" in used}
        return {**data, "model": model}


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Parse ``["train.lr=0.01", "task.law=poisson", "model.coeffs=[1, 0.5]"]`` into a dict.

    Values are read by :func:`parse_value`; a malformed item or a repeated key raises InputError
    naming it.
    """
    parsed: dict[str, Any] = {}
    for item in items:
        key, raw = split_assignment(item, "--set", "key=value")
        if key in parsed:
            raise InputError(f"--set gives {key!r} twice")
        parsed[key] = parse_value(raw)
    return parsed


def split_assignment(item: str, option: str, form: str) -> tuple[str, str]:
    """``"key=raw"`` -> ``(key, raw)``; InputError naming ``option`` and the expected ``form`` otherwise."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"{option} expects {form}, got {item!r}")
    return key, raw


def parse_value(raw: str) -> Any:
    """A command-line value read as a YAML scalar or list (ints, floats — ``1e-3`` too, which YAML
    1.1 reads as a string —, booleans, null, strings, ``[a, b]``); a mapping stays the raw text."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        value = float(value)
    return raw if isinstance(value, dict) else value


def apply_overrides(cfg: Config, overrides: dict[str, Any]) -> Config:
    """Return a copy of ``cfg`` (a :class:`RunConfig` or another nested config dataclass with a
    ``validate()`` method, e.g. :class:`ctxstair.config.lm.LMConfig`) with dotted overrides applied
    and type-checked, then validated. An override of a setting the config's model does not use is
    refused (``check_applies``); a key the config class has renamed (``RENAMED``) is read under its
    new name, with a one-line notice."""
    cfg = from_dict(to_dict(cfg), type(cfg))
    overrides = {_new_name(type(cfg), key): value for key, value in overrides.items()}
    for key, value in overrides.items():
        path = key.split(".")
        if isinstance(cfg, RunConfig) and path[0] == "task" and len(path) == 2 and path[1] not in ("name", "params"):
            cfg.task.params[path[1]] = value
            continue
        target = cfg
        for depth, name in enumerate(path):
            fields = {f.name: f for f in dataclasses.fields(target)} if dataclasses.is_dataclass(target) else {}
            prefix = ".".join(path[:depth]) or "the config"
            if name not in fields:
                raise InputError(f"unknown config key {key!r}: {prefix} has {', '.join(fields) or 'no sub-keys'}")
            if depth == len(path) - 1:
                if dataclasses.is_dataclass(getattr(target, name)):
                    raise InputError(f"config key {key!r} is a section; set one of its keys, e.g. {key}.<name>")
                setattr(target, name, _coerce(key, value, _field_types(type(target))[name]))
            else:
                target = getattr(target, name)
    cfg = cfg.validate()
    if hasattr(cfg, "check_applies"):
        cfg.check_applies(list(overrides))
    return cfg


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict of the config (for YAML): the settings its model uses (``recorded``)."""
    data = dataclasses.asdict(cfg)
    return cfg.recorded(data) if hasattr(cfg, "recorded") else data


def from_dict(data: dict[str, Any], cls: type = None) -> Config:
    """Build a config of type ``cls`` (default :class:`RunConfig`) from a nested dict (e.g. a saved
    ``config.yaml``), checking every key; keys of an older spelling (``cls.RENAMED``) are read under
    their new names."""
    cls = cls or RunConfig
    for old in getattr(cls, "RENAMED", {}):
        data = _moved(data, old, _new_name(cls, old)) if _lookup(data, old) is not _MISSING else data
    return _build(cls, data, "")


_MISSING = object()


def _new_name(cls: type, key: str) -> str:
    """``key``, or its new name when ``cls.RENAMED`` lists it (with a one-line notice on stderr)."""
    new = getattr(cls, "RENAMED", {}).get(key)
    if new is None:
        return key
    print(f"ctxstair: note: {key} is now spelled {new}; the old spelling is read as the new one", file=sys.stderr)
    return new


def _lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def _moved(data: dict, old: str, new: str) -> dict:
    """A copy of the nested dict ``data`` with the value at dotted ``old`` moved to dotted ``new``."""
    value = _lookup(data, old)
    data = _without(data, old.split("."))
    *sections, last = new.split(".")
    result = dict(data)
    target = result
    for section in sections:
        target[section] = dict(target.get(section) or {})
        target = target[section]
    target[last] = value
    return result


def _without(data: dict, path: list[str]) -> dict:
    if len(path) == 1:
        return {k: v for k, v in data.items() if k != path[0]}
    return {**data, path[0]: _without(data[path[0]], path[1:])}


def dump_yaml(cfg: Config) -> str:
    """The resolved config as YAML, in field order."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def load_yaml(text: str, cls: type = None) -> Config:
    """Parse a YAML config of type ``cls`` (default :class:`RunConfig`); InputError on malformed
    YAML or unknown keys."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise InputError(f"config is not valid YAML: {error}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise InputError("config must be a YAML mapping of sections")
    return from_dict(data, cls).validate()


def _build(cls: type, data: Any, prefix: str):
    if not isinstance(data, dict):
        raise InputError(f"config section {prefix.rstrip('.') or 'root'!r} must be a mapping, got {data!r}")
    types_ = _field_types(cls)
    unknown = set(data) - set(types_)
    if unknown:
        raise InputError(f"unknown config key {prefix + sorted(unknown)[0]!r}; allowed: {', '.join(types_)}")
    kwargs = {}
    for name, value in data.items():
        kind = types_[name]
        if dataclasses.is_dataclass(kind):
            kwargs[name] = _build(kind, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(prefix + name, value, kind)
    return cls(**kwargs)


def _field_types(cls: type) -> dict[str, Any]:
    """Annotation of every field of the dataclass ``cls`` (class constants such as ``TIME_UNIT`` are not fields)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(key: str, value: Any, kind: Any) -> Any:
    """Check ``value`` against the annotation ``kind``; ints are accepted for floats."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _coerce(key, value, next(a for a in args if a is not type(None)))
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{key} must be a list like [1.0, 0.5], got {value!r}")
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"{key} must be a mapping, got {value!r}")
        return dict(value)
    if kind is float and isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:  # an int beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise InputError(f"{key} must be a finite number, got {value!r}")
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in (str, bool) and isinstance(value, kind):
        return value
    if kind is Any:
        return value
    raise InputError(f"{key} must be of type {getattr(kind, '__name__', kind)}, got {value!r}")
