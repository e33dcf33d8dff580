"""Paper claim → paper settings → our setting → measured → verdict: one row per recipe (SPEC §8, §9).

The claims and settings are the paper's as SPEC §8 and §9 state them (:data:`PAPER`). Our setting and
the measured key numbers are read from each recipe's recorded example, ``EXAMPLES/NAME/`` with its
``summary.json`` and resolved configuration (written by ``scripts/record_examples.py``), so the
table says what was measured, not what the code would run today (tests/test_verdicts.py checks the
two agree)::

    python -m ctxstair.recipes.verdicts docs/examples/recipes      # the markdown table
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxstair import rundir
from ctxstair.config import Config, RunConfig
from ctxstair.config.lm import LMConfig
from ctxstair.recipes.base import all_recipes
from ctxstair.run import Run

#: SPEC §8: "Unless a row says otherwise".
_SPEC8 = "CBOW, d = 128, ReLU, small init, full dataset"

#: SPEC §8 F4, reproduced by two recipes (at a smaller N, and at the paper's).
_F4 = ("the activation's order gates the signature orders: learned iff K ≥ L; collapsed embeddings when K < L",
       "σ = z^K, K ∈ 1..6, L ∈ {2, 3, 4}, y = 1 + (Σ x_i) mod N, N = 50, all N^L sequences, 1000 epochs; "
       "CBOW, d = 128, small init")

#: Recipe name -> (the paper's claim, the paper's settings), both as SPEC §8/§9 state them.
PAPER: dict[str, tuple[str, str]] = {
    "activation-order": _F4,
    "activation-order-n50": _F4,
    "attention-arith": ("the attention-only model shows the same order-0 → order-1 staircase",
                        "attention-only model (d = 128, d_k = 64), F_add and F_mod, N = 20, 10,000 epochs; "
                        "small init, full dataset"),
    "attention-parity": ("attention sets the rate: anchors split by parity, noise embeddings one direction; "
                         "attention on noise → ≈ 0, anchor attention and anchor norm grow, noise norm stays",
                         "attention-only model; anchors 11..20, noise 21..60, L = 8, one anchor at a uniform "
                         "position, y = a mod 2, 10,000 samples drawn once, 200 epochs"),
    "composite": ("not a paper figure (SPEC §9 lineage benchmark, anchor functions): small init gives the "
                  "inferential answer x − 10 on the held-out pair (4, 3), not the symmetric x − 6",
                  "keys 20..99, key x at position p, anchors a1, a2 at p+1, p+2, rest noise, length 9; shifts "
                  "1:+5, 2:+1, 3:−2, 4:−8; y = x + s(a1) + s(a2), pair (3, 4) → x − 6; pair (4, 3) and a residue "
                  "rule's (key, position) held out"),
    "early-geometry": ("early geometry = order 0: S^emb ≈ S^sig,(0) at epoch ≈ 100 (band for add, 'X' for sub, "
                       "odd-part clusters for mul); F1: ordered line early, odd/even split late",
                       f"X = (x1, x2), x ∈ 1..N, N = 20, all N² pairs; add, sub = |x1 − x2|, mul; {_SPEC8}"),
    "ffn-vs-attention": ("structure ≠ solution: CBOW learns once aligned with order 1; attention-only aligns "
                         "but fails",
                         "F_mod, L = 2, N = 40, 1000 epochs, CBOW vs attention-only; d = 128, small init, "
                         "full dataset"),
    "higher-orders": ("ρ with S^(0) briefly ≈ 1, then negative, then ≈ 0; S^(1) and S^(2) → ≈ 1, S^(2) higher late",
                      f"X = (a1, a2, x), y = (a1 + a2 + x) mod |𝒳| (all order-0 signatures equal); {_SPEC8}"),
    "init-scaling": ("not a paper figure (SPEC §8's derived check of §6.2): the slope of log(order-m RMS / "
                     "order-0 RMS) against log d at initialization ≈ −mγ",
                     "not stated: a computation at initialization"),
    "label-law": ("softmax(W_U w_a) ≈ φ^(y;0)_a: high r, small KL/JSD",
                  "anchor a = 100, context 0..50, all 2,601 sequences (a, x1, x2), each label drawn once from "
                  "p_a over 0..50 ∈ {uniform, normal, Poisson λ = 10, exp(−5y)}; checkpoint at epoch 200; "
                  f"{_SPEC8}"),
    "lm-staircase": ("F7, measured on the paper's own LM: ρ_next rise–peak–decay; low held-out probe MSE; "
                     "early attention-path correlation",
                     "decoder LM from small init: 24 layers, hidden 1024, 16 heads × 96, MLP 4096, vocabulary "
                     "60,416, AdamW peak lr 2.5e-4, batch 256, 36B tokens"),
    "minmax": ("not a figure (SPEC §8 row S72): order-0 signatures of numbers ≈ ½·1{y=x} + 1/(2N), of a "
               "(2y−1)/N², of b (2(N−y)+1)/N²; their sum peaks at x1, x2 and the anchor's slope picks the "
               "right one",
               f"(c, x1, x2), c ∈ {{a, b}}, x ∈ 1..N; y = max if c = a else min; {_SPEC8}"),
    "modulus-onset": ("order-0 informativeness sets the onset: train acc ≥ 95 % after thousands of epochs "
                      "when M | N (4, 5, 10, 20), a few hundred otherwise",
                      f"y = (x1 + x2) mod M, N = 20, a range of M; {_SPEC8}"),
    "reason-memory": ("not a paper figure (SPEC §9 lineage benchmark, arXiv 2502.04375): small init favours "
                      "the reasoning anchors; reasoning-anchor embeddings ordered, memory-anchor ones alike",
                      "keys 21..120, memory anchors 1..10 (a fixed random label per (key, anchor)), reasoning "
                      "anchors 11..20 (y = key + Σ anchors), q = 2, L = 9; reasoning pairs (11, 13), (13, 11) "
                      "held out"),
    "seed-spectra": ("different geometries per seed, each best matched by a different frequency "
                     "k* = argmax_{k>10}",
                     f"10 seeds at epoch 1000; {_SPEC8}"),
    "signature-embeddings": ("(i) fixed signature embeddings converge much faster than (ii) trainable ones; "
                             "(iii) fixed random ones beat (ii) early",
                             "CBOW on F_mod with (i) fixed w_α = λ R φ^(y;1)_α v (R, v random, λ trained), "
                             "(ii) trainable, (iii) fixed random λ v_α; d = 128, ReLU, small init, full dataset"),
    "staircase-add": ("ρ_(0) ≈ 1 early, then drops; the order-1 probe better later; Fourier: low k early, "
                      "k = 20 late (F1: odd/even split)",
                      f"F_add, N = 40, 1200 epochs, snapshots early and late; {_SPEC8}"),
    "staircase-mod": ("all φ^(y;0) equal: embeddings collinear and the task not learned early; a mod-19 ring "
                      "late (1 → 20 → 39), task frequency k = 19",
                      f"F_mod = (x1 + x2 + 1) mod N, N = 40, 1200 epochs, snapshots early and late; {_SPEC8}"),
}

_MARKS = {True: "✓", False: "✗", None: "–"}
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
    experiment (name and SPEC figure), claim and paper_settings (:data:`PAPER`), our_setting,
    measured (each key number "name: measured ✓/✗/–", its commentary after a "; " left out),
    verdict; the last three "not recorded" where the example is missing."""
    rows = []
    for recipe in all_recipes():
        claim, settings = PAPER.get(recipe.name, ("missing from ctxstair.recipes.verdicts.PAPER",) * 2)
        row = {"experiment": f"{recipe.name} — {recipe.figure}", "claim": claim, "paper_settings": settings}
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
    facets["model"] = "CBOW" if model.kind == "cbow" else "attention-only"
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
    facets["γ"] = _gamma(model.init.gamma, {name: getattr(model.init, name) for name in
                                            ("embedding", "unembedding", "qk", "ov")})
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
            "γ": _gamma(model.gamma, {name.removeprefix("gamma_"): getattr(model, name) for name in
                                      ("gamma_embedding", "gamma_unembedding", "gamma_qk", "gamma_ov", "gamma_mlp")}),
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
    """Print the verdict table of an examples directory."""
    parser = argparse.ArgumentParser(prog="python -m ctxstair.recipes.verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", type=Path, help="the recorded examples, e.g. docs/examples/recipes")
    print(verdict_table(parser.parse_args(argv).examples))


if __name__ == "__main__":
    main()
