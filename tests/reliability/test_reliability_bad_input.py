"""Bad input: wrong, out-of-range, malformed and oversized input to the command
line and the public API gives one clear InputError (exit code 2 and one line
``ctxstair: error: <message naming the problem>`` on the command line), never a traceback, and
leaves no output directory behind.

Covered: ``ctxstair run staircase-add --set KEY=VALUE`` (every known config key with a wrong type
or an out-of-range value, unknown keys, malformed items); task parameters through
``ctxstair.tasks.make`` and ``ctxstair signatures TASK --set`` (every task, every parameter,
oversized values refused before anything is allocated); token arrays given to the signature
functions; corpus files given to ``ctxstair lm train`` and ``ctxstair semantics``.

Every generated command-line input is invalid by construction, so a passing example never trains
(the small settings only bound the cost should a bad value be accepted by mistake).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import tempfile
import types
import typing

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ctxstair import signatures, tasks
from ctxstair.cli import main
from ctxstair.config import RunConfig, parse_value
from ctxstair.devices import DEVICE_PATTERN
from ctxstair.errors import InputError, TooLargeError

#: Examples per property; CTXSTAIR_FUZZ_EXAMPLES=1000 runs a deeper search (minutes). The examples are
#: the same in every run (``derandomize``): a suite that passed passes again; a deeper search draws more.
_EXAMPLES = int(os.environ.get("CTXSTAIR_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=max(1, _EXAMPLES * 3 // 8), deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """Run the command line in-process: (exit code, stderr)."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    return code, capsys.readouterr().err


def _assert_refused(code: int, err: str, *names: str) -> None:
    """Exit code 2, exactly one line ``ctxstair: error: ...`` naming one of ``names``."""
    assert code == 2, err
    assert err.startswith("ctxstair: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert any(name in err for name in names), (names, err)


# ------------------------------------------------------------------ config overrides (run --set)

#: Settings that keep a run tiny, should a bad value ever be accepted.
SMALL = {"task.N": "5", "train.epochs": "2", "snapshots.log_points": "1", "snapshots.every": "1"}

#: Lower bounds of RunConfig.validate: key -> (bound, strict).
LOWER = {"model.d": (1, False), "model.d_k": (1, False), "model.power": (1, False), "train.epochs": (1, False),
         "train.batch_size": (0, False), "train.members": (1, False), "train.seed": (0, False),
         "snapshots.log_points": (0, False), "snapshots.every": (1, False), "analysis.probe_folds": (2, False),
         "analysis.probe_steps": (0, False), "analysis.probe_restarts": (1, False),
         "train.lr": (0, True), "analysis.probe_lr": (0, True), "train.flow_rtol": (0, True),
         "train.flow_atol": (0, True), "model.init.gamma": (0, True), "model.init.embedding": (0, True),
         "model.init.unembedding": (0, True), "model.init.qk": (0, True), "model.init.ov": (0, True),
         "train.momentum": (0, False), "train.weight_decay": (0, False)}
#: String keys with a fixed set of choices (train.device: auto, cpu, cuda, cuda:N).
CHOICES = {"train.optimizer", "model.activation", "model.kind", "model.embedding", "train.dtype",
           "train.flow_method", "train.device"}


def _leaf_keys(cls: type, prefix: str = "") -> dict[str, object]:
    """Every settable dotted key of a config dataclass and its annotation."""
    keys, hints = {}, typing.get_type_hints(cls)
    for name, kind in ((f.name, hints[f.name]) for f in dataclasses.fields(cls)):  # fields, not class constants
        if dataclasses.is_dataclass(kind):
            keys.update(_leaf_keys(kind, f"{prefix}{name}."))
        else:
            keys[prefix + name] = kind
    return keys


KEYS = _leaf_keys(RunConfig)

_words = st.from_regex(r"[a-z][a-z_]{0,9}", fullmatch=True)
_not_a_number = st.sampled_from(["abc", "fast", "1..2", "0x", "[1, ]", "1,5", "one", "{a: 1}", "ten4"])
_bool_raw = st.sampled_from(["true", "false", "yes", "off"])
_list_raw = st.sampled_from(["[1, 2]", "[]", "[a]"])
_non_finite = st.sampled_from([".nan", ".inf", "-.inf", "1e999", "-1e999", "nan"])


def _bad_raw(key: str) -> st.SearchStrategy[str]:
    """Raw ``--set`` values that ``key`` must refuse: a wrong type or a value out of range."""
    kind = KEYS[key]
    base = typing.get_args(kind)[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind
    if base is int:
        low = LOWER.get(key, (None, False))[0]
        below = [st.integers(max_value=low - 1).map(str)] if low is not None else []
        return st.one_of(st.sampled_from(["2.5", "1e-3", "-0.5"]), _not_a_number, _bool_raw, _list_raw, *below)
    if base is float:
        low, strict = LOWER.get(key, (None, False))
        out = [st.floats(max_value=low, allow_nan=False, exclude_max=not strict).map(repr)] if low is not None else []
        return st.one_of(_not_a_number, _bool_raw, _list_raw, _non_finite, *out)
    if base is bool:
        return st.one_of(st.integers(-5, 5).map(str), _list_raw, _not_a_number.filter(lambda raw: raw != "{a: 1}"))
    if base is str and key in CHOICES:
        return st.one_of(_words.filter(lambda w: not isinstance(parse_value(w), bool)
                                       and not DEVICE_PATTERN.fullmatch(w)
                                       and w not in ("gd", "sgd", "adam", "adamw", "flow", "relu", "gelu", "tanh",
                                                     "poly", "monomial", "cbow", "attention", "trainable", "signature",
                                                     "random", "float32", "float64", "dopri5", "dopri8", "bosh3",
                                                     "fehlberg2", "adaptive_heun")),
                         st.integers().map(str), _list_raw)
    if base is str:  # free text (recipe): only other types are wrong
        return st.one_of(st.integers().map(str), _list_raw, st.sampled_from(["true", "null", "1.5"]))
    if typing.get_origin(base) is list:
        return st.one_of(st.sampled_from(["3", "abc", "[a, 1]", "[.nan]", "[1, .inf]", "true"]))
    if typing.get_origin(base) is dict:
        return st.sampled_from(["3", "abc", "[1]", "{a: 1}"])
    raise AssertionError(f"no bad values for {key}: {kind}")


def _run_argv(out: pathlib.Path, items: list[str]) -> list[str]:
    """``run staircase-add`` with the small settings (except the keys the items set) and ``items``."""
    given_keys = {item.partition("=")[0].strip() for item in items}
    # --no-analysis sets these two keys itself (recipes.base.NO_ANALYSIS) and refuses them in --set.
    quiet = [] if given_keys & {"analysis.enabled", "snapshots.save"} else ["--no-analysis"]
    argv = ["run", "staircase-add", "--out", str(out), *quiet]
    for key, value in SMALL.items():
        if key not in given_keys:
            argv.append(f"--set={key}={value}")
    return argv + [f"--set={item}" for item in items]


@FUZZ
@given(data=st.data())
def test_run_refuses_known_keys_with_bad_values(capsys, data):
    key = data.draw(st.sampled_from(sorted(k for k in KEYS if k not in ("recipe",)) + ["task.N", "recipe"]))
    raw = data.draw(_bad_raw(key) if key != "task.N" else
                    st.one_of(st.integers(max_value=1).map(str), st.sampled_from(["2.5", "abc", "true", "[5]"]),
                              st.integers(min_value=2**61).map(str)))
    if key == "task.name":
        raw = data.draw(_words.filter(lambda w: w not in {t.name for t in tasks.list()}
                                      and not isinstance(parse_value(w), bool)))
    with tempfile.TemporaryDirectory() as tmp:
        code, err = _cli(_run_argv(pathlib.Path(tmp) / "out", [f"{key}={raw}"]), capsys)
        _assert_refused(code, err, key, f"'{key.split('.')[-1]}'", f"{key.split('.')[-1]}=",
                        *(["unknown task"] if key == "task.name" else []))
        assert os.listdir(tmp) == []


@FUZZ
@given(section=st.sampled_from(["", "task.", "model.", "model.init.", "train.", "snapshots.", "analysis.", "train.lr.",
                                "nosuch."]),
       name=_words, raw=st.sampled_from(["1", "abc", "0.5", "[1]"]))
def test_run_refuses_unknown_keys(capsys, section, name, raw):
    key = section + name
    assume(key not in KEYS)
    assume(not (section == "task." and name in ("N", "name", "params")))  # task.<x> is a task parameter
    assume(not (section == "" and name in ("model", "train", "task", "snapshots", "analysis", "recipe")))
    assume(not (section == "model." and name == "init"))  # sections are tested below
    with tempfile.TemporaryDirectory() as tmp:
        code, err = _cli(_run_argv(pathlib.Path(tmp) / "out", [f"{key}={raw}"]), capsys)
        _assert_refused(code, err, repr(key), repr(name))
        assert os.listdir(tmp) == []


@FEW
@given(item=st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="=\x00", blacklist_categories=("Cs",)),
            min_size=1, max_size=12),
    st.text(alphabet=" \t", max_size=3).map(lambda space: space + "=1"),
))
def test_run_refuses_malformed_items(capsys, item):
    with tempfile.TemporaryDirectory() as tmp:
        code, err = _cli(_run_argv(pathlib.Path(tmp) / "out", [item]), capsys)
        _assert_refused(code, err, "--set expects key=value")
        assert os.listdir(tmp) == []


@pytest.mark.parametrize("items,names", [
    (["model=3"], ["'model' is a section"]),
    (["model.init=0.5"], ["'model.init' is a section"]),
    (["train.lr=1", "train.lr=2"], ["'train.lr' twice"]),
    (["train.optimizer=flow", "train.batch_size=4"], ["train.batch_size must be 0"]),
    (["train.optimizer=flow", "train.momentum=0.5"], ["train.momentum must be 0"]),
    (["model.embedding=signature", "model.kind=attention"], ["model.embedding=signature needs model.kind=cbow"]),
    (["model.activation=poly", "model.coeffs=[]"], ["model.coeffs"]),
    (["train.members=0"], ["train.members must be >= 1"]),
    (["train.lr=.nan"], ["train.lr must be a finite number"]),
    (["train.momentum=.nan"], ["train.momentum must be a finite number"]),
    (["model.coeffs=[1, .inf]"], ["model.coeffs[1] must be a finite number"]),
    (["task.N=100000000"], ["task 'add' with N=100000000", "above the budget"]),
    (["task.params=3"], ["task.params must be a mapping"]),
])
def test_run_refuses_targeted_configs(tmp_path, capsys, items, names):
    code, err = _cli(_run_argv(tmp_path / "out", items), capsys)
    _assert_refused(code, err, *names)
    assert list(tmp_path.iterdir()) == []


def test_run_refuses_an_oversized_model(tmp_path, capsys):
    code, err = _cli(_run_argv(tmp_path / "out", ["model.d=1000000000000"]), capsys)
    _assert_refused(code, err, "model.d")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ task parameters

TASKS = {info.name: info.params for info in tasks.list()}

_odd_values = st.one_of(
    st.integers(-3, 12),
    st.integers(min_value=10**8, max_value=2**70), st.integers(max_value=-10**8, min_value=-(2**70)),
    st.sampled_from([2**60, 2**60 + 1, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 2.0, -1.0, 1e300]),
    st.booleans(), st.none(), st.text(max_size=5),
    st.lists(st.integers(-3, 30), max_size=4), st.tuples(st.integers(-3, 30), st.integers(-3, 30)),
    st.lists(st.tuples(st.integers(8, 22), st.integers(8, 22)), max_size=3).map(tuple),
    st.tuples(st.text(max_size=2)),
)


def _near(default: object) -> st.SearchStrategy:
    """The default or a value close to it (valid more often than not)."""
    if isinstance(default, int) and not isinstance(default, bool):
        return st.integers(default - 3, default + 3) | st.integers(min(0, default), max(0, 2 * default + 2))
    if isinstance(default, float):
        return st.floats(default - 1, default + 1)
    return st.just(default)


def _names_one_of(message: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])", message) for name in names)


@FUZZ
@given(data=st.data())
def test_task_parameters_give_a_dataset_or_an_input_error_naming_them(monkeypatch, data):
    # A small budget (64 MiB) so that anything large is refused, not allocated.
    monkeypatch.setenv("CTXSTAIR_MAX_GIB", "0.0625")
    name = data.draw(st.sampled_from(sorted(TASKS)))
    keys = data.draw(st.lists(st.sampled_from(sorted(TASKS[name])), min_size=1, max_size=3, unique=True))
    params = {key: data.draw(_near(TASKS[name][key]) | _odd_values) for key in keys}
    try:
        dataset = tasks.make(name, **params)
    except InputError as error:
        event(f"refused ({type(error).__name__})")
        assert "\n" not in str(error)
        assert _names_one_of(str(error), params), (name, params, str(error))
    else:
        event("a dataset")
        assert dataset.X.dtype == np.int64 and dataset.X.ndim == 2 and dataset.X.shape[0] >= 1
        assert dataset.X.nbytes <= 2**26


# (task, params) -> what the refusal names: sizes far above the budget are refused before allocating.
HUGE = [
    ("add", {"N": 10**9}), ("sub", {"N": 10**6}), ("mul", {"N": 2**40}), ("mod", {"N": 10**7}),
    ("modsum", {"N": 10**7}), ("sum_mod", {"L": 10**9}), ("sum_mod", {"N": 10**9, "L": 3, "max_samples": 10**30}),
    ("minmax", {"N": 10**9}), ("two_anchor", {"p": 10**5}), ("label_law", {"n_context": 10**9, "anchor": 2 * 10**9}),
    ("parity", {"n_samples": 10**12}), ("parity", {"L": 10**12}), ("parity", {"noise_hi": 10**15}),
    ("composite", {"n_samples": 10**10}), ("composite", {"n_eval": 10**10}),
    ("composite", {"key_hi": 10**14, "noise_hi": 10**14}), ("composite", {"seq_len": 10**12}),
    ("composite", {"anchors": tuple(range(1, 10**5)), "shifts": (0,) * (10**5 - 1),
                   "key_lo": 10**5, "key_hi": 10**5 + 50, "noise_lo": 10**5, "noise_hi": 10**5 + 50}),
    ("reason_memory", {"n_samples": 10**10}),
    ("reason_memory", {"q": 10**6, "seq_len": 10**6 + 1, "n_samples": 1, "n_eval": 1, "heldout": ()}),
    ("reason_memory", {"memory_hi": 10**13, "reasoning_lo": 10**13 + 1, "reasoning_hi": 10**13 + 20,
                       "key_lo": 10**13 + 30, "key_hi": 10**13 + 60, "heldout": ()}),
]


@pytest.mark.parametrize("name,params", HUGE, ids=[f"{n}-{'-'.join(p)}" for n, p in HUGE])
def test_huge_task_parameters_are_refused_before_allocating(name, params):
    with pytest.raises(InputError) as error:
        tasks.make(name, **params)
    assert _names_one_of(str(error.value), params), str(error.value)
    assert isinstance(error.value, TooLargeError) or "max_samples" in str(error.value) or "table" in str(error.value)


def _bad_task_raw(default: object) -> st.SearchStrategy[str]:
    """``--set`` values no parameter with this default accepts."""
    beyond = st.integers(min_value=2**60 + 1, max_value=2**80).map(str)
    if isinstance(default, bool):
        return st.sampled_from(["3", "abc", "[1]"])
    if isinstance(default, int):
        return st.one_of(st.sampled_from(["2.5", "abc", "true", "false", "[1, 2]", "null", ".nan"]), beyond,
                         beyond.map(lambda raw: "-" + raw))
    if isinstance(default, float):
        return st.sampled_from(["abc", "true", "[1]", ".nan", ".inf", "-.inf", "null"])
    if isinstance(default, str):
        return st.one_of(st.sampled_from(["3", "true", "[a]"]), _words.filter(lambda w: w not in ("uniform", "normal",
                                                                                                  "poisson", "exp")))
    return st.sampled_from(["3", "abc", "true", "[a, b]", "[1.5]", "[[1, x]]"])  # tuples


@FUZZ
@given(data=st.data())
def test_signatures_command_refuses_bad_task_parameters(capsys, data):
    name = data.draw(st.sampled_from(sorted(TASKS)))
    param = data.draw(st.sampled_from(sorted(TASKS[name])))
    raw = data.draw(_bad_task_raw(TASKS[name][param]))
    if name == "reason_memory" and param == "heldout":
        raw = data.draw(st.sampled_from(["3", "abc", "[[1, 2]]", "[[11, 13, 12]]", "[[11.5, 13]]"]))
    with tempfile.TemporaryDirectory() as tmp:
        code, err = _cli(["signatures", name, f"--set={param}={raw}", "--out", str(pathlib.Path(tmp) / "out")], capsys)
        _assert_refused(code, err, f"'{param}'", f"{param}=")
        assert os.listdir(tmp) == []


@pytest.mark.parametrize("argv,names", [
    (["signatures", "add", "--set", "N=1000000000"], ["task 'add' with N=1000000000", "above the budget"]),
    (["signatures", "sum_mod", "--set", "L=1000000000"], ["max_samples"]),
    (["signatures", "label_law", "--set", "anchor=1000000000000000"], ["vocab_size=1000000000000001"]),
    (["signatures", "add", "--set", "N=5", "--order", "2"], ["order must be in 0..1"]),
    (["signatures", "add", "--set", "N=5", "--order", "-1"], ["order must be in 0..1"]),
    (["signatures", "nosuch"], ["unknown task 'nosuch'"]),
    (["signatures", "add", "--set", "X=1"], ["unknown parameter 'X'"]),
    (["signatures", "add", "--set", "N=5", "--max-gib", "0"], ["--max-gib must be positive"]),
    (["signatures", "add", "--set", "N=5", "--order", "x"], ["--order"]),
])
def test_signatures_command_targeted(tmp_path, capsys, argv, names):
    code, err = _cli(argv + ["--out", str(tmp_path / "out")], capsys)
    _assert_refused(code, err, *names)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ token arrays (signature API)

V = 7
_any_dtype = st.sampled_from([np.float64, np.float32, np.bool_, np.int8, np.int64, np.uint16, np.complex64, "U2",
                              object])


def _elements(dtype):
    if dtype is object:
        return st.one_of(st.integers(-2, 9), st.none(), st.text(max_size=2), st.floats())
    return None


@st.composite
def _token_arrays(draw, ndim=None):
    if draw(st.booleans()):  # integer ids, mostly in range
        shape = (draw(st.integers(1, 4)),) if ndim == 1 else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        dtype = draw(st.sampled_from([np.int64, np.int32, np.uint8]))
        low = 0 if dtype is np.uint8 else -1
        return draw(hnp.arrays(dtype, shape, elements=st.integers(0, V - 1) | st.integers(low, V)))
    dtype = draw(_any_dtype)
    shape = draw(hnp.array_shapes(min_dims=0 if ndim is None else ndim, max_dims=3 if ndim is None else ndim,
                                  min_side=0, max_side=4))
    return draw(hnp.arrays(np.dtype(dtype), shape, elements=_elements(dtype)))


def _api_calls(X, y, order, vocab_size):
    """Every public estimator fed with the same arguments (next-token ones take X as windows)."""
    return [
        ("label_signature", lambda: signatures.label_signature(X, y, order, vocab_size)),
        ("cooccurrence_signature", lambda: signatures.cooccurrence_signature(X, order, vocab_size)),
        ("occurrence", lambda: signatures.occurrence(X, vocab_size)),
        ("next_token_signature", lambda: signatures.next_token_signature(X, vocab_size)),
        ("next_token_occurrence", lambda: signatures.next_token_occurrence(X, vocab_size)),
        ("position_label_signature", lambda: signatures.position_label_signature(X, y, vocab_size, positions=(0,))),
    ]


@FUZZ
@given(X=_token_arrays(), y=st.one_of(_token_arrays(ndim=1), st.none(), st.lists(st.integers(0, 6), max_size=4)),
       order=st.one_of(st.integers(-2, 3), st.sampled_from([1.0, True, "1", None])),
       vocab_size=st.one_of(st.just(V), st.integers(-2, 9), st.sampled_from([7.0, True, "7", None, np.int64(7)])))
def test_signature_api_returns_arrays_or_input_errors(X, y, order, vocab_size):
    for name, call in _api_calls(X, y, order, vocab_size):
        try:
            result = call()
        except InputError as error:
            event("refused")
            assert "\n" not in str(error), (name, str(error))
        else:
            event(f"{name} computed")
            assert np.all(np.isfinite(result)), name


def _valid():
    X = np.array([[1, 2, 3], [3, 2, 1], [0, 6, 5]])
    return X, np.array([1, 2, 0])


@pytest.mark.parametrize("case,X,y,vocab_size,names", [
    ("float ids", np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1, 2]), V, ["X must hold integer", "dtype float64"]),
    ("NaN ids", np.array([[np.nan, 2.0], [3.0, 4.0]]), np.array([1, 2]), V, ["X must hold integer"]),
    ("bool ids", np.array([[True, False], [False, True]]), np.array([1, 0]), V, ["dtype bool"]),
    ("object ids", np.array([[1, None], [2, 3]], dtype=object), np.array([1, 2]), V, ["dtype object"]),
    ("string ids", np.array([["a", "b"], ["c", "d"]]), np.array([1, 2]), V, ["dtype <U1"]),
    ("ragged ids", [[1, 2], [3]], np.array([1, 2]), V, ["X must be a rectangular array", "X must hold integer"]),
    ("1-D X", np.array([1, 2, 3]), np.array([1, 2, 3]), V, ["shape (n_samples, seq_len)"]),
    ("3-D X", np.ones((2, 2, 2), dtype=int), np.array([1, 2]), V, ["shape (n_samples, seq_len)"]),
    ("empty X", np.zeros((0, 3), dtype=int), np.zeros(0, dtype=int), V, ["is empty"]),
    ("no positions", np.zeros((2, 0), dtype=int), np.array([1, 2]), V, ["is empty"]),
    ("negative id", np.array([[1, -1], [2, 3]]), np.array([1, 2]), V, ["token id -1"]),
    ("id >= vocab", np.array([[1, 7], [2, 3]]), np.array([1, 2]), V, ["token id 7", "0..6"]),
    ("label >= vocab", *_valid()[:1], np.array([1, 2, 9]), V, ["y contains token id 9"]),
    ("negative label", *_valid()[:1], np.array([1, -2, 0]), V, ["y contains token id -2"]),
    ("float labels", *_valid()[:1], np.array([1.0, 2.0, 0.0]), V, ["y must hold integer"]),
    ("short labels", *_valid()[:1], np.array([1, 2]), V, ["y must have shape (3,)"]),
    ("2-D labels", *_valid()[:1], np.array([[1, 2, 0]]), V, ["y must have shape (3,)"]),
    ("ragged labels", *_valid()[:1], [[1], [2, 3]], V, ["y must be a rectangular array", "y must"]),
    ("zero vocab", *_valid(), 0, ["vocab_size must be a positive integer"]),
    ("float vocab", *_valid(), 7.0, ["vocab_size must be a positive integer"]),
    ("bool vocab", *_valid(), True, ["vocab_size must be a positive integer"]),
    ("huge vocab", *_valid(), 10**15, ["vocab_size=1000000000000000", "above the budget"]),
])
def test_label_and_cooccurrence_signatures_refuse_bad_arrays(case, X, y, vocab_size, names):
    calls = [lambda: signatures.label_signature(X, y, 1, vocab_size)]
    if "label" not in case:  # the co-occurrence signature takes no labels
        calls.append(lambda: signatures.cooccurrence_signature(X, 1, vocab_size))
    for call in calls:
        with pytest.raises(InputError) as error:
            call()
        assert any(name in str(error.value) for name in names), (case, str(error.value))


@pytest.mark.parametrize("case,kwargs,names", [
    ("order float", dict(order=1.0), ["order must be an integer"]),
    ("order bool", dict(order=True), ["order must be an integer"]),
    ("order too big", dict(order=3), ["order must be in 0..2"]),
    ("order negative", dict(order=-1), ["order must be in 0..2"]),
    ("weights short", dict(weights=[1.0]), ["weights must have shape (3,)"]),
    ("weights NaN", dict(weights=[1.0, np.nan, 1.0]), ["weights must be finite"]),
    ("weights negative", dict(weights=[1.0, -1.0, 1.0]), ["weights must be finite, non-negative"]),
    ("weights strings", dict(weights=["a", "b", "c"]), ["weights must be a rectangular array of numbers"]),
    ("tokens duplicate", dict(tokens=[1, 1]), ["tokens contains duplicate"]),
    ("tokens float", dict(tokens=[1.5]), ["tokens must be a non-empty 1-D list"]),
    ("tokens empty", dict(tokens=[]), ["tokens must be a non-empty 1-D list"]),
    ("context out of range", dict(context=[0, 9]), ["context contains token id 9"]),
    ("labels ragged", dict(labels=[[1], [2, 3]]), ["labels must be a rectangular array"]),
    ("too large", dict(order=2, max_bytes=1000), ["above the budget"]),
])
def test_label_signature_refuses_bad_arguments(case, kwargs, names):
    X, y = _valid()
    kwargs = {"order": 1, **kwargs}
    with pytest.raises(InputError) as error:
        signatures.label_signature(X, y, kwargs.pop("order"), V, **kwargs)
    assert any(name in str(error.value) for name in names), (case, str(error.value))


@pytest.mark.parametrize("case,windows,vocab_size,kwargs,names", [
    ("float windows", np.array([[1.0, 2.0]]), V, {}, ["windows must hold integer"]),
    ("NaN windows", np.array([[np.nan, 2.0]]), V, {}, ["windows must hold integer"]),
    ("string windows", np.array([["a", "b"]]), V, {}, ["windows must hold integer"]),
    ("object windows", np.array([[1, "b"]], dtype=object), V, {}, ["windows must hold integer"]),
    ("ragged windows", [[1, 2, 3], [1]], V, {}, ["windows must be a rectangular array"]),
    ("1-D windows", np.array([1, 2, 3]), V, {}, ["shape (n_samples, seq_len)"]),
    ("T = 1", np.array([[1], [2]]), V, {}, ["T >= 2"]),
    ("empty", np.zeros((0, 4), dtype=int), V, {}, ["is empty"]),
    ("negative id", np.array([[1, -3]]), V, {}, ["token id -3"]),
    ("id >= vocab", np.array([[1, 8]]), V, {}, ["token id 8"]),
    ("weights mismatched", np.array([[1, 2], [2, 3]]), V, {"weights": [1.0]}, ["weights must have shape (2,)"]),
    ("tokens out of range", np.array([[1, 2]]), V, {"tokens": [7]}, ["tokens contains token id 7"]),
    ("huge vocab", np.array([[1, 2]]), 10**15, {"tokens": [1], "labels": [2]}, ["vocab_size=1000000000000000"]),
    ("dense too large", np.array([[1, 2]]), 10**6, {}, ["next-token signature", "above the budget"]),
])
def test_next_token_signature_refuses_bad_windows(case, windows, vocab_size, kwargs, names):
    with pytest.raises(InputError) as error:
        signatures.next_token_signature(windows, vocab_size, **kwargs)
    assert any(name in str(error.value) for name in names), (case, str(error.value))


@pytest.mark.parametrize("case,windows,ids,names", [
    ("float windows", np.array([[1.0, 2.0, 3.0]]), [1], ["windows must hold integer"]),
    ("ragged windows", [[1, 2, 3], [1]], [1], ["windows must be a rectangular array"]),
    ("negative id", np.array([[1, -2, 3]]), [1], ["token id -2"]),
    ("huge id", np.array([[1, 2, 10**15]]), [1], ["vocab_size=1000000000000001", "above the budget"]),
    ("ids strings", np.array([[1, 2, 3]]), ["a"], ["must be a non-empty 1-D list"]),
])
def test_prefix_signature_refuses_bad_windows(case, windows, ids, names):
    with pytest.raises(InputError) as error:
        signatures.prefix_signature(windows, ids, ids, ids)
    assert any(name in str(error.value) for name in names), (case, str(error.value))


# ------------------------------------------------------------------ corpus files (lm train, semantics)

def _corpus_argv(command: str, corpus: pathlib.Path, out: pathlib.Path) -> list[str]:
    if command == "lm":
        return ["lm", "train", f"--set=corpus.source={corpus}", "--set=train.steps=2", "--no-analysis",
                "--out", str(out)]
    return ["semantics", str(corpus), "--out", str(out)]


def _make_corpus(kind: str, root: pathlib.Path, monkeypatch) -> tuple[pathlib.Path, str]:
    """Write the bad corpus ``kind`` under ``root``; returns its path and the file the error must name."""
    root.mkdir()
    if kind == "missing":
        return root / "nope.txt", "nope.txt"
    if kind == "empty folder":
        return root, str(root)
    if kind == "folder without .txt":
        (root / "notes.md").write_text("monday tuesday\n" * 50)
        return root, str(root)
    if kind == "folder of blank files":
        (root / "a.txt").write_text("")
        (root / "b.txt").write_text(" \n\n")
        return root, str(root)
    if kind == "unreadable file in folder":
        (root / "a.txt").write_text("monday tuesday wednesday\n" * 50)
        locked = root / "locked.txt"
        locked.write_text("secret words\n")
        locked.chmod(0)
        if os.geteuid() == 0:  # root reads anything: make the read fail as it would for a user
            original = pathlib.Path.read_text

            def read_text(self, *args, **kwargs):
                if self.name == "locked.txt":
                    raise PermissionError(13, "Permission denied", str(self))
                return original(self, *args, **kwargs)

            monkeypatch.setattr(pathlib.Path, "read_text", read_text)
        return root, "locked.txt"
    path = root / "corpus.txt"
    data = {
        "empty file": b"",
        "whitespace only": b" \n\t\n\r\n   \n" * 100,
        "binary with NUL": bytes(range(256)) * 20,
        "NUL in ASCII text": b"monday tuesday\x00wednesday\n" * 100,
        "invalid UTF-8": ("monday tuesday " * 100).encode() + b"\xff\xfe\x80" + b" friday\n" * 10,
        "UTF-16 text": "monday tuesday wednesday\n".encode("utf-16") * 50,
        "one huge line": b"a" * 20_000_000,
    }[kind]
    path.write_bytes(data)
    return path, str(path)


CORPUS_CASES = {
    "missing": ["not a file or folder"],
    "empty folder": ["holds no *.txt files"],
    "folder without .txt": ["holds no *.txt files"],
    "folder of blank files": ["holds no text"],
    "unreadable file in folder": ["cannot read corpus file", "Permission denied"],
    "empty file": ["holds no text (empty or only whitespace)"],
    "whitespace only": ["holds no text (empty or only whitespace)"],
    "binary with NUL": ["NUL character", "not UTF-8"],
    "NUL in ASCII text": ["holds a NUL character (at character 14)"],
    "invalid UTF-8": ["is not UTF-8 text (byte 1500)"],
    "UTF-16 text": ["is not UTF-8 text (byte 0)"],
    "one huge line": ["more than 10000 characters without whitespace on line 1"],
}


@pytest.mark.parametrize("command", ["lm", "semantics"])
@pytest.mark.parametrize("kind", sorted(CORPUS_CASES))
def test_bad_corpus_files_are_refused(tmp_path, capsys, monkeypatch, command, kind):
    corpus, named = _make_corpus(kind, tmp_path / "in", monkeypatch)
    out = tmp_path / "out"
    code, err = _cli(_corpus_argv(command, corpus, out), capsys)
    _assert_refused(code, err, *CORPUS_CASES[kind])
    assert named in err, err
    assert not out.exists()


@FEW
@given(blob=st.binary(min_size=1, max_size=2000), at=st.integers(0, 2000))
def test_random_binary_corpora_are_refused(capsys, blob, at):
    blob = blob[:at] + b"\x00" + blob[at:]
    for command in ("lm", "semantics"):
        with tempfile.TemporaryDirectory() as tmp:
            corpus = pathlib.Path(tmp) / "blob.txt"
            corpus.write_bytes(blob)
            code, err = _cli(_corpus_argv(command, corpus, pathlib.Path(tmp) / "out"), capsys)
            _assert_refused(code, err, "NUL character", "not UTF-8")
            assert str(corpus) in err and os.listdir(tmp) == ["blob.txt"]


@FEW
@given(text=st.text(alphabet=" \t\n\r\x0b\x0c", max_size=300))
def test_blank_corpora_are_refused(capsys, text):
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp) / "blank.txt"
        corpus.write_text(text)
        code, err = _cli(_corpus_argv("lm", corpus, pathlib.Path(tmp) / "out"), capsys)
        _assert_refused(code, err, "holds no text")
        assert str(corpus) in err and os.listdir(tmp) == ["blank.txt"]


def test_lm_train_refuses_a_corpus_too_small_for_two_windows(tmp_path, capsys):
    # Refused after tokenising, before anything is written or trained.
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("hello world.\n")
    out = tmp_path / "out"
    code, err = _cli(_corpus_argv("lm", corpus, out), capsys)
    _assert_refused(code, err, "fewer than two windows of 64")
    assert not out.exists()


def test_lm_train_refuses_a_corpus_the_analysis_could_not_use(tmp_path, capsys):
    """'hello world' repeated: enough windows to train, but only 3 word-like tokens for the analysis
    — refused before training instead of failing after it."""
    corpus = tmp_path / "two-words.txt"
    corpus.write_text("hello world " * 400)
    out = tmp_path / "out"
    code, err = _cli(["lm", "train", "--set", f"corpus.source={corpus}", "--set", "corpus.window=16",
                      "--set", "corpus.vocab_size=300", "--out", str(out)], capsys)
    _assert_refused(code, err, "the analysis needs at least 4")
    assert str(corpus) in err and not out.exists()


def test_lm_train_refuses_an_oversized_model_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    code, err = _cli(["lm", "train", "--set", "model.d_model=10000000", "--set", "train.steps=2", "--out", str(out)],
                     capsys)
    _assert_refused(code, err, "the embedding W_E (vocab, model.d_model) of shape")
    assert "GiB, above the budget" in err and not out.exists()


@pytest.mark.parametrize("key", ["analysis.enabled=true", "snapshots.save=0"])
def test_no_analysis_refuses_the_keys_it_sets(tmp_path, capsys, key):
    code, err = _cli(["run", "staircase-add", "--no-analysis", "--set", key, "--out", str(tmp_path / "out")], capsys)
    _assert_refused(code, err, f"do not also --set {key.partition('=')[0]}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options,names", [
    (["--vocab-size", "100"], ["vocab_size must be an integer >= 257"]),
    (["--min-count", "0"], ["min_count must be an integer >= 1, got 0"]),
    (["--tokenizer", "nope"], ["invalid choice: 'nope'"]),
])
def test_semantics_refuses_bad_options(tmp_path, capsys, options, names):
    corpus = tmp_path / "days.txt"
    corpus.write_text("on monday we work . on tuesday we rest .\n" * 20)
    out = tmp_path / "out"
    code, err = _cli(_corpus_argv("semantics", corpus, out) + options, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and any(n in err for n in names), err
    assert not out.exists()
