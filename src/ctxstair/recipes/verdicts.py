"""Paper claim → paper settings → our setting → measured → verdict: one row per recipe (SPEC §8, §9).

The claims and settings are the paper's as SPEC §8 and §9 state them, each recipe's ``paper``
(:class:`~ctxstair.recipes.base.Paper`, set in its module). Our setting and the measured key numbers
are read from each recipe's recorded example, ``EXAMPLES/NAME/`` with its ``summary.json`` and
resolved configuration (written by ``scripts/record_examples.py``), so the table says what was
measured, not what the code would run today (tests/recipes/test_verdicts.py checks the two agree). The
table stands in docs/recipes.md between :data:`BEGIN` and :data:`END`; ``--write`` replaces it
there (``scripts/record_examples.py`` does after recording)::

    python -m ctxstair.recipes.verdicts docs/examples/recipes                          # the markdown table
    python -m ctxstair.recipes.verdicts docs/examples/recipes --write docs/recipes.md  # into the page
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxstair import rundir
from ctxstair.config import GAMMA_COMPONENTS, Config, RunConfig
from ctxstair.config.lm import LMConfig
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.recipes.base import all_recipes
from ctxstair.run import Run

#: The markers around the verdict table in docs/recipes.md.
BEGIN, END = "<!-- verdicts:begin -->", "<!-- verdicts:end -->"

_MARKS = {True: "✓", False: "✗", None: "–"}
_MODEL_NAMES = {"cbow": "CBOW", "attention": "attention-only"}
_OPTIMIZERS = {"gd": "GD", "sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "flow": "gradient flow"}
_COLUMNS = {"experiment": "experiment", "claim": "paper claim", "paper_settings": "paper settings",
            "our_setting": "our setting", "measured": "measured", "verdict": "verdict"}
NOT_RECORDED = "not recorded"
#: Facets left unsaid when every part has them as here (a part without the facet counts as this).
_USUAL = {"embedding": "trainable", "pool": "sum", "bias": "none"}


def verdict(key_numbers: list[Mapping[str, Any]]) -> str:
    """The verdict of a recipe's key numbers (SPEC §8's "what must be seen", judged: the
    ``key_numbers`` of its ``summary.json``, each a mapping with ``met`` true, false or null).

    "reproduced" when every judged one (``met`` not null) is met, "not reproduced" when none is,
    "partly" otherwise, and "—" when none is judged."""
    judged = [k["met"] for k in key_numbers if k["met"] is not None]
    if not judged:
        return "—"
    return "reproduced" if all(judged) else "not reproduced" if not any(judged) else "partly"


def our_setting(configs: Mapping[str, Config]) -> str:
    """One line describing a recipe's configurations, part name -> :class:`RunConfig` (or
    :class:`LMConfig`): model, optimisation and task (SPEC §5, §8) that all parts share, then what
    varies (:func:`_what_varies`)."""
    described = {part: _lm_facets(cfg) if isinstance(cfg, LMConfig) else _run_facets(cfg)
                 for part, cfg in configs.items()}
    labels = list(dict.fromkeys(label for facets in described.values() for label in facets))
    facets = {part: {label: found.get(label, _USUAL.get(label)) for label in labels}
              for part, found in described.items()}
    varying = [label for label in labels if len({f[label] for f in facets.values()}) > 1]
    first = next(iter(facets.values()))
    shared = ", ".join(f"{label} = {value}" for label, value in first.items()
                       if label not in varying and value is not None and value != _USUAL.get(label))
    return f"{shared}; {_what_varies(facets, varying)}" if varying else shared


def _what_varies(facets: dict[str, dict[str, str | None]], varying: list[str]) -> str:
    """The ``varying`` facets as a grid of factors, "(L, epochs) ∈ {(2, 1000), (3, 400)} × K ∈ 1..6",
    when the parts are every combination of the factors' values; else part by part. Facets that
    change together (the same parts share a value of each) make one factor."""
    rows = list(facets.values())
    factors: dict[tuple[int, ...], list[str]] = {}
    for label in varying:
        values = [f[label] for f in rows]
        factors.setdefault(tuple(values.index(v) for v in values), []).append(label)
    groups = list(factors.values())
    levels = [list(dict.fromkeys(tuple(f[label] or "–" for label in group) for f in rows)) for group in groups]
    distinct = {tuple(f[label] for label in varying) for f in rows}
    if (len(groups) > 1 or len(varying) == 1) and len(rows) == len(distinct) == math.prod(map(len, levels)):
        return " × ".join(_factor(group, values) for group, values in zip(groups, levels))
    return "; ".join(f"{part}: " + ", ".join(f"{label} = {f[label]}" for label in varying if f[label] is not None)
                     for part, f in facets.items())


def _factor(labels: list[str], values: list[tuple[str, ...]]) -> str:
    """``K ∈ 1..6`` for one label, ``(L, epochs) ∈ {(2, 1000), (3, 400)}`` for labels that vary together."""
    if len(labels) == 1:
        return f"{labels[0]} ∈ {_listing([value for (value,) in values], '{}')}"
    return f"({', '.join(labels)}) ∈ {{" + ", ".join(f"({', '.join(value)})" for value in values) + "}"


def verdict_rows(examples: Path) -> list[dict[str, str]]:
    """One row per registered recipe (sorted by name), read from ``examples/NAME/``: a dict of
    experiment (name and SPEC figure), claim and paper_settings (the recipe's ``paper``), our_setting,
    measured (each key number "name: measured ✓/✗/–", its commentary after a "; " left out),
    verdict; the last three "not recorded" where the example is missing."""
    rows = []
    for recipe in all_recipes():
        row = {"experiment": f"{recipe.name} — {recipe.figure}", "claim": recipe.paper.claim,
               "paper_settings": recipe.paper.settings}
        example = Path(examples) / recipe.name
        if not (example / "summary.json").is_file():
            rows.append({**row, "our_setting": NOT_RECORDED, "measured": NOT_RECORDED, "verdict": NOT_RECORDED})
            continue
        key_numbers = rundir.read_json(example, "summary.json")["key_numbers"]
        measured = "; ".join(f"{k['name']}: {_first_clause(k['measured'])} {_MARKS[k['met']]}" for k in key_numbers)
        rows.append({**row, "our_setting": _recorded_setting(example), "measured": measured,
                     "verdict": verdict(key_numbers)})
    return rows


def verdict_table(examples: Path) -> str:
    """:func:`verdict_rows` as a markdown table (no trailing newline), the block of docs/recipes.md."""
    lines = ["| " + " | ".join(_COLUMNS.values()) + " |", "|" + "---|" * len(_COLUMNS)]
    for row in verdict_rows(examples):
        lines.append("| " + " | ".join(_cell(row[key]) for key in _COLUMNS) + " |")
    return "\n".join(lines)


def with_table(doc: str, table: str) -> str:
    """The page ``doc`` with the block between :data:`BEGIN` and :data:`END` replaced by ``table``;
    InputError when the page lacks the markers."""
    if BEGIN not in doc or END not in doc:
        raise InputError(f"the page has no {BEGIN} … {END} block for the verdict table")
    head, rest = doc.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}"


def write_table(doc: Path, examples: Path) -> None:
    """Replace the verdict table in the page ``doc`` (docs/recipes.md) by :func:`verdict_table` of ``examples``."""
    atomic_write_text(doc, with_table(doc.read_text(encoding="utf-8"), verdict_table(examples)))


def _recorded_setting(example: Path) -> str:
    """Our setting as the example recorded it: its configs, or a computation's parameters."""
    if (example / "recipe.json").is_file():
        info = rundir.read_json(example, "recipe.json")
        if not info["parts"]:
            return "no training; " + ", ".join(f"{key.removeprefix('task.')} = {_value(value)}"
                                               for key, value in info["params"].items())
        return our_setting({part: Run(example / part).config for part in info["parts"]})
    return our_setting({"": Run(example).config})


def _run_facets(cfg: RunConfig) -> dict[str, str]:
    """Label -> value of what sets an ensemble run apart: task, model, optimisation."""
    model, train = cfg.model, cfg.train
    facets = {"task": cfg.task.name, **{key: _value(value) for key, value in cfg.task.params.items()}}
    facets["model"] = _MODEL_NAMES.get(model.kind, model.kind)
    if model.kind == "cbow":
        facets["σ"] = {"monomial": "z^K", "poly": "Σ C_k z^k"}.get(model.activation, model.activation)
        if model.activation == "monomial":
            facets["K"] = str(model.power)
        if model.activation == "poly":
            facets["C"] = _value(model.coeffs)
        facets.update(embedding=model.embedding, pool=model.pool, bias="trainable" if model.bias else "none")
    facets["d"] = str(model.d)
    if model.kind == "attention":
        facets["d_k"] = str(model.d_k)
    # The ensemble models have no MLP, so no γ of one.
    facets["γ"] = _gamma(model.init.gamma, {name: getattr(model.init, name) for name in GAMMA_COMPONENTS
                                            if name != "mlp"})
    facets["optimizer"] = (f"{_OPTIMIZERS[train.optimizer]} lr {train.lr:g}"
                           + (f", batch {train.batch_size}" if train.batch_size else "")
                           + (f", momentum {train.momentum:g}" if train.momentum else "")
                           + (f", weight decay {train.weight_decay:g}" if train.weight_decay else ""))
    facets["epochs"] = str(train.epochs)
    facets["seeds"] = str(train.members)
    return facets


def _lm_facets(cfg: LMConfig) -> dict[str, str]:
    """Label -> value of a language-model run: corpus, decoder, optimisation."""
    corpus, model, train = cfg.corpus, cfg.model, cfg.train
    decoder = (f"decoder of {model.hf_config}" if model.hf_config else
               f"{model.n_layers}-layer decoder (d {model.d_model}, {model.n_heads} heads × {model.head_dim}, "
               f"MLP {model.d_mlp})")
    return {"corpus": corpus.source, "tokenizer": f"{corpus.tokenizer} {corpus.vocab_size}",
            "window": str(corpus.window), "model": decoder,
            "γ": _gamma(model.init.gamma, {name: getattr(model.init, name) for name in GAMMA_COMPONENTS}),
            "optimizer": f"AdamW lr {train.lr:g}, batch {train.batch_size}", "steps": str(train.steps)}


def _gamma(base: float, overrides: dict[str, float | None]) -> str:
    """``1`` or ``1 (qk 1.5, ov 1.5)``: the γ of the init and the components that differ."""
    differ = ", ".join(f"{name} {value:g}" for name, value in overrides.items() if value is not None)
    return f"{base:g}" + (f" ({differ})" if differ else "")


def _value(value: Any) -> str:
    """A config value as text: floats without trailing zeros, lists through :func:`_listing`."""
    if isinstance(value, (list, tuple)):
        return _listing([_value(v) for v in value], "[]")
    return f"{value:g}" if isinstance(value, float) else str(value)


def _listing(texts: list[str], brackets: str) -> str:
    """``1..6`` for four or more consecutive integers, else the values inside ``brackets``."""
    if len(texts) >= 4 and all(t.lstrip("-").isdigit() for t in texts):
        numbers = [int(t) for t in texts]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{numbers[0]}..{numbers[-1]}"
    return brackets[0] + ", ".join(texts) + brackets[1]


def _first_clause(text: str) -> str:
    """``text`` up to its first "; " outside brackets, marked "…" when cut: a measured value's lead
    numbers, word for word, without its commentary."""
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == ";" and depth == 0:
            return text[:i] + " …"
    return text


def _cell(text: str) -> str:
    """``text`` safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def main(argv: list[str] | None = None) -> None:
    """Print the verdict table of an examples directory, or write it into a page."""
    parser = argparse.ArgumentParser(prog="python -m ctxstair.recipes.verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", type=Path, help="the recorded examples, e.g. docs/examples/recipes")
    parser.add_argument("--write", type=Path, metavar="PAGE",
                        help=f"replace the table between {BEGIN} and {END} in PAGE (e.g. docs/recipes.md)")
    args = parser.parse_args(argv)
    if args.write is None:
        print(verdict_table(args.examples))
    else:
        write_table(args.write, args.examples)


if __name__ == "__main__":
    main()
