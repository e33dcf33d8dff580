"""The word-group structure in words (SPEC §7, "Corpus semantics"): the lines ``ctxstair semantics``
prints and its ``report.md``, each score next to its chance level and interval, with a verdict.
"""

from __future__ import annotations

from ctxstair.semantics.scores import GROUP_MEASURES

EXPECTATIONS = {"ordered": "a path in the listed order", "cyclic": "a cycle in the listed order",
                "category": "a cluster of its own"}



# --- text: the printout and the report ----------------------------------------------------------


def format_score(value: float | None) -> str:
    """A score with three decimals, or ``n/a`` when it could not be measured."""
    return "  n/a" if value is None else f"{value:.3f}"


def _entries(result: dict) -> list[tuple[str, str, dict]]:
    """(name, kind, entry) for every group and for all categories together."""
    rows = [(name, entry["kind"], entry) for name, entry in result["groups"].items()]
    return rows + [("categories", "all", result["categories"])]


def _outside(entry: dict) -> bool:
    """Whether the point lies outside its bootstrap interval (a biased bootstrap)."""
    return bool(entry.get("ci")) and not entry["ci"][0] <= entry["value"] <= entry["ci"][1]


def _interval_text(entry: dict) -> str:
    if entry.get("ci"):
        return f"[{entry['ci'][0]:.2f}, {entry['ci'][1]:.2f}]" + ("!" if _outside(entry) else "")
    if entry.get("leave_one_out"):
        return f"1-out [{entry['leave_one_out'][0]:.2f}, {entry['leave_one_out'][1]:.2f}]"
    return "—"


def _words_text(name: str, entry: dict) -> str:
    if name == "categories":
        return f"{len(entry['words'])} words, {len(set(entry['labels']))} groups"
    return f"{len(entry['words'])}/{len(entry['words']) + len(entry['missing'])} words"


def verdict(entry: dict) -> str:
    """``holds`` when the 95 % interval lies above chance (signatures) or, without an interval,
    when p < 0.05 (embeddings); ``weak`` when p < 0.05 but the interval reaches chance; ``no``
    otherwise; ``n/a`` when undefined."""
    if entry.get("value") is None or entry.get("chance") is None:
        return "n/a"
    significant = entry["p_value"] is not None and entry["p_value"] < 0.05
    if entry.get("ci"):
        if entry["ci"][0] > entry["chance"] and significant:
            return "holds"
        return "weak" if significant else "no"
    return "holds" if significant else "no"


def summary_lines(result: dict, embeddings: dict | None = None) -> list[str]:
    """The table ``ctxstair semantics`` prints: per group (and for all categories together) one
    line for the signatures and, with ``embeddings``, one for the model's embeddings — score,
    chance, 95 % CI (or the leave-one-out range), p, verdict, words used / listed — then a line
    of word counts (signatures) and of the words left out."""
    header = (f"{'group':11s} {'measure':27s} {'source':10s} {'score':>6s} {'chance':>6s} {'95% CI':>18s} "
              f"{'p':>6s} {'verdict':7s} words")
    lines = [header]
    sources = [("signatures", result)] + ([("embeddings", embeddings)] if embeddings is not None else [])
    for name, _kind, _ in _entries(result):
        for i, (source, res) in enumerate(sources):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            measure = GROUP_MEASURES["category"] if name == "categories" else entry["measure"]
            chance = "   n/a" if entry.get("chance") is None else f"{entry['chance']:6.3f}"
            p = "   n/a" if entry.get("p_value") is None else f"{entry['p_value']:6.3f}"
            lines.append(f"{name if i == 0 else '':11s} {measure if i == 0 else '':27s} {source:10s} "
                         f"{format_score(entry['value']):>6s} {chance} {_interval_text(entry):>18s} {p} "
                         f"{verdict(entry):7s} {_words_text(name, entry)}")
        if name != "categories":
            entry = result["groups"][name]
            counts = ", ".join(f"{w} {c}" for w, c in zip(entry["words"], entry["counts"]))
            left_out = "; ".join(f"{w}: {why}" for w, why in entry["missing"].items())
            lines.append(f"{'':11s} counts: {counts or '—'}" + (f"; left out: {left_out}" if left_out else ""))
            if embeddings is not None and embeddings["groups"][name]["missing"]:
                lines.append(f"{'':11s} not in the model's vocabulary as one token: "
                             f"{', '.join(embeddings['groups'][name]['missing'])}")
    if any(_outside(entry) for _, _, entry in _entries(result)):
        lines.append("! the score lies outside its bootstrap interval: resampled corpora score differently on "
                     "average (counting noise blurs the structure); see bootstrap.mean in semantics.json")
    return lines


def report_markdown(info: dict, embeddings: dict | None = None) -> str:
    """``report.md`` of ``ctxstair semantics``: the setting, then each structure's numbers in
    words next to what SPEC §7 expects, for the signatures and (if given) the embeddings, and a
    table. ``info`` is :func:`group_structure`'s result with ``corpus``, ``tokenizer`` (optionally
    ``tokenizer_description``) and, with embeddings, ``model`` added."""
    tokens = info.get("tokenizer_description", info["tokenizer"])
    lines = [f"# Corpus semantics: {info['corpus']}", "",
             f"Corpus `{info['corpus']}`, {info['n_tokens']:,} tokens ({tokens}). Next-token signatures "
             f"of each word; chance = mean of {info['null']['n_permutations']} random permutations of the order or "
             f"labels (seed {info['null']['seed']}); 95 % interval = percentile interval over "
             f"{info['bootstrap']['replicates']} bootstrap corpora of {info['bootstrap']['n_blocks']} blocks of "
             f"{info['bootstrap']['block_tokens']} tokens each."]
    if embeddings is not None:
        lines += ["", f"Embeddings: input-embedding rows of `{info['model']}` ({embeddings['dim']} dimensions, its own "
                      "tokenizer), the same null; no confidence interval (the matrix is fixed), the range with one "
                      "word left out instead."]
    lines += ["", "## Structures", ""]
    for name, kind, _ in _entries(info):
        expect = EXPECTATIONS["category"] if name == "categories" else EXPECTATIONS[kind]
        label = "all categories together" if name == "categories" else f"{name} ({kind})"
        parts = []
        for source, res in [("signatures", info)] + ([("embeddings", embeddings)] if embeddings else []):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            parts.append(f"{source}: {_sentence(entry)}")
        lines.append(f"* **{label}** — expected: {expect}. " + " ".join(parts))
    lines += ["", "| group | source | measure | score | chance | 95 % CI | p | verdict | words used / listed |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, _, _ in _entries(info):
        for source, res in [("signatures", info)] + ([("embeddings", embeddings)] if embeddings else []):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            measure = GROUP_MEASURES["category"] if name == "categories" else entry["measure"]
            chance = "n/a" if entry.get("chance") is None else f"{entry['chance']:.3f}"
            p = "n/a" if entry.get("p_value") is None else f"{entry['p_value']:.3f}"
            score = format_score(entry["value"]).strip()
            lines.append(f"| {name} | {source} | {measure.replace('|', '&#124;')} | {score} | {chance} "
                         f"| {_interval_text(entry)} | {p} | {verdict(entry)} | {_words_text(name, entry)} |")
    lines += ["", "## Words and counts (signatures)", ""]
    for name, entry in info["groups"].items():
        counts = ", ".join(f"{w} {c}" for w, c in zip(entry["words"], entry["counts"])) or "none"
        left_out = "; ".join(f"{w} ({why})" for w, why in entry["missing"].items())
        lines.append(f"* {name}: {counts}" + (f". Left out: {left_out}" if left_out else ""))
    return "\n".join(lines) + "\n"


def _sentence(entry: dict) -> str:
    if entry.get("value") is None:
        return "not measurable (too few words)."
    text = f"{entry['value']:.2f}"
    if entry.get("ci"):
        text += f" (95 % CI {entry['ci'][0]:.2f} to {entry['ci'][1]:.2f}"
        if _outside(entry):
            text += (f"; the point lies outside it: resampled corpora average {entry['bootstrap']['mean']:.2f}, "
                     "counting noise shifts this score")
        text += ")"
    elif entry.get("leave_one_out"):
        text += f" (one word left out: {entry['leave_one_out'][0]:.2f} to {entry['leave_one_out'][1]:.2f})"
    if entry.get("chance") is None:
        return text + "."
    words = {"holds": "above chance: the structure holds",
             "weak": "p < 0.05 but the interval reaches chance: weak",
             "no": "not distinguishable from chance"}[verdict(entry)]
    return f"{text} vs chance {entry['chance']:.2f}, p = {entry['p_value']:.3f}: {words}."
