"""A different frequency per seed (SPEC §8 App. D): ``seed-spectra``.

    ctxstair run seed-spectra --out runs/seed-spectra            # App. D (add and mod), about 1 min

Defaults, and why (docs/recipes.md has the measurements): two parts, ``add`` and ``mod`` (the paper
shows both), each its staircase recipe's configuration (``staircase-add``: ReLU, GD lr 2;
``staircase-mod``: tanh, Adam lr 1e-2; γ = 1, N = 40) with 10 ensemble members to epoch 1000,
snapshots only at 0 and 1000 (the Fourier profile is read at the last one). Next to the Fourier
alignment that defines k*, the report gives it with the order-0 structure partialled out (SPEC §3
"Separating the orders"): every ``add`` seed's S^emb is dominated by the order-0 band that all seeds
share (on ``mod`` the order-0 signatures are all equal, so there is nothing to partial out and the
two numbers coincide). Two chance levels say what "a different frequency per seed" is worth: the
number of distinct values that random draws from the candidate frequencies give, and, per seed, a
permutation null of the best alignment (the same maximum over k with the tokens relabelled).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import compare, cosine_matrix, fourier_signatures, partial_correlation, signature_cosine
from ctxstair.alignment.similarity import permuted_partial_correlation, permuted_pearson
from ctxstair.analysis import measures as ms
from ctxstair.config import RunConfig, SnapshotConfig
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, get, register
from ctxstair.report import learning_figures
from ctxstair.report.formats import fmt

#: App. D: k* = argmax over k > 10 of the Fourier alignment.
SPECTRA_K_MIN = 11
#: Token permutations of the chance level of a seed's best Fourier alignment (a p-value's resolution: 1/201).
SPECTRA_PERMUTATIONS = 200
#: A seed's k* counts as a real match when its best alignment beats the permutation null at this level.
SPECTRA_ALPHA = 0.05


def _spectra_config(source: str) -> RunConfig:
    """Recipe ``source``'s configuration with 10 members to epoch 1000, snapshots at 0 and 1000."""
    cfg = get(source).runs()[""]
    return dataclasses.replace(cfg, recipe="seed-spectra",
                               train=dataclasses.replace(cfg.train, epochs=1000, members=10),
                               snapshots=SnapshotConfig(log_points=0, every=1000))


#: The parts of ``seed-spectra``: task -> the staircase recipe whose configuration it uses.
SPECTRA_PARTS = {"add": "staircase-add", "mod": "staircase-mod"}


def _pairs(values: list[float]) -> str:
    """'mean (min to max)' of a list of correlations."""
    return f"{fmt(float(np.mean(values)))} ({fmt(min(values))} to {fmt(max(values))})" if values else "n/a"


def _partial(S_emb: object, S_1: object, S0: np.ndarray) -> np.ndarray:
    """Pearson of ``S_emb`` with ``S_1`` controlling for ``S0``; the plain Pearson when ``S0`` is constant
    (all order-0 signatures equal): controlling for a constant removes nothing."""
    if not compare(S0, S0)["defined"]:
        return np.asarray(compare(S_emb, S_1)["pearson"])
    return np.asarray(partial_correlation(S_emb, S_1, S0))


def _permuted_partial(S_emb: np.ndarray, S_1: np.ndarray, S0: np.ndarray, permutations: np.ndarray) -> np.ndarray:
    """:func:`_partial` of ``S_emb[π][:, π]`` with ``S_1`` controlling for ``S0``, for each permutation π (P,)."""
    if not compare(S0, S0)["defined"]:
        return permuted_pearson(S_emb, S_1, permutations)
    return permuted_partial_correlation(S_emb, S_1, S0, permutations)


def _spectra_seeds(run: Path, last: int, sigs, S: list[np.ndarray], S0: np.ndarray) -> list[dict]:
    """Per seed: k*, the Fourier alignment at k* (plain and with S^sig,(0) partialled out), each with
    its permutation p-value, and the training accuracy, at epoch ``last``; ``S``: the seeds' S^emb."""
    members = ms.members(run)
    # S^sig,(1)(c_k) for every k of alignment.csv, to repeat the Fourier alignment with the shared
    # order-0 structure partialled out (SPEC §3 "Separating the orders")
    ks = ms.fourier_profile(run, members[0], last)[0]
    S_k = np.stack([signature_cosine(h) for h in fourier_signatures(sigs.orders[1], ks)])
    # Chance level of "the best frequency": the same maximum over k > SPECTRA_K_MIN - 1, with the seed's
    # tokens relabelled at random (the same permutations for every seed).
    rng = np.random.default_rng(0)
    permutations = np.stack([rng.permutation(sigs.tokens.size) for _ in range(SPECTRA_PERMUTATIONS)])
    per = []
    for m, seed in zip(members, ms.member_seeds(run)):
        ks, r = ms.fourier_profile(run, m, last)
        k_star, r_star = ms.best_frequency(ks, r, k_min=SPECTRA_K_MIN)
        partial = _partial(S[m], S_k, S0)
        searched = np.flatnonzero(ks >= SPECTRA_K_MIN)
        null = np.max([permuted_pearson(S[m], S_k[i], permutations) for i in searched], axis=0)
        p_value = float((1 + np.sum(null >= r_star)) / (1 + SPECTRA_PERMUTATIONS))
        # The partialled alignment at k* against the best partialled alignment over k with the tokens
        # relabelled: conservative, since k* was chosen by the plain r, not by the partialled one.
        partial_star = float(partial[ks == k_star][0])
        partial_null = np.max([_permuted_partial(S[m], S_k[i], S0, permutations) for i in searched], axis=0)
        partial_p = float((1 + np.sum(partial_null >= partial_star)) / (1 + SPECTRA_PERMUTATIONS))
        per.append(dict(seed=seed, k_star=k_star, r_star=r_star, partial_r_star=partial_star,
                        null_p=p_value, null_q95=float(np.quantile(null, 0.95)), partial_null_p=partial_p,
                        accuracy=float(ms.metric_series(run, m, "acc")[1][-1]), ks=ks.tolist(), r=r.tolist(),
                        partial=partial.tolist()))
    return per


def spectra_numbers(run: Path) -> dict:
    """The numbers of one part of ``seed-spectra`` at its last snapshot (``last``): per seed
    (``per``, :func:`_spectra_seeds`), the seeds' S^emb (``S``) and the task tokens, the number of
    candidate frequencies (``n_k``) and the distinct values random draws from them would give
    (``chance_distinct``), the seeds beating the permutation null (plain, partialled), the Pearson of
    every pair of seeds' S^emb (plain and controlling for S^sig,(0)), the seeds per k*
    (``by_k``) and the alignment at k* per seed (plain, partialled)."""
    last = rundir.snapshot_times(run)[-1]
    sigs = rundir.read_signatures(run)
    S = [cosine_matrix(w) for w in rundir.load_snapshot(run, last)["W_E"][:, sigs.tokens].astype(np.float64)]
    S0 = signature_cosine(sigs.orders[0])
    per = _spectra_seeds(run, last, sigs, S, S0)
    n_k = int(np.sum(np.asarray(per[0]["ks"]) >= SPECTRA_K_MIN))
    pairs = [(i, j) for i in range(len(S)) for j in range(i + 1, len(S))]
    return dict(
        last=last, per=per, S=S, tokens=sigs.tokens, n_k=n_k,
        # Distinct values among len(per) independent uniform draws from n_k frequencies, on average.
        chance_distinct=n_k * (1 - (1 - 1 / n_k) ** len(per)),
        beating=sum(p["null_p"] < SPECTRA_ALPHA for p in per),
        partial_beating=sum(p["partial_null_p"] < SPECTRA_ALPHA for p in per), pairs=pairs,
        between=[float(compare(S[i], S[j])["pearson"]) for i, j in pairs],
        between_partial=[float(_partial(S[i], S[j], S0)) for i, j in pairs],
        by_k={k: [p["seed"] for p in per if p["k_star"] == k] for k in sorted({p["k_star"] for p in per})},
        r_stars=[p["r_star"] for p in per], partial_stars=[p["partial_r_star"] for p in per])


def _shared_text(by_k: dict[int, list[int]]) -> str:
    """The frequencies that more than one seed share, with their seeds: 'k = 13 for seeds 2, 7'."""
    return "; ".join(f"k = {k} for seeds {', '.join(map(str, seeds))}" for k, seeds in by_k.items() if len(seeds) > 1)


def _judge_spectra_part(task: str, n: dict) -> list[KeyNumber]:
    """The key numbers of one part of ``seed-spectra`` (named ``task: ...``) from :func:`spectra_numbers`."""
    last, per, by_k, n_k, pairs = n["last"], n["per"], n["by_k"], n["n_k"], n["pairs"]
    r_stars, partial_stars, shared = n["r_stars"], n["partial_stars"], _shared_text(n["by_k"])
    return [
        KeyNumber(f"{task}: k* = argmax over k > {SPECTRA_K_MIN - 1} of the Fourier alignment at epoch {last}, per "
                  f"seed (r; r controlling for S^sig,(0))",
                  "; ".join(f"seed {p['seed']}: {p['k_star']} ({fmt(p['r_star'], 2)}; "
                            f"{fmt(p['partial_r_star'], 2)})" for p in per),
                  "each seed best matched by its own frequency", None),
        KeyNumber(f"{task}: distinct k* over the seeds", f"{len(by_k)} of {len(per)} ({', '.join(map(str, by_k))})"
                  + (f"; shared: {shared}" if shared else "")
                  + f"; {n['chance_distinct']:.1f} on average if each seed's k* were drawn at random from the {n_k} "
                  "frequencies",
                  f"a different frequency for every seed: {len(per)} of {len(per)}", len(by_k) == len(per)),
        KeyNumber(f"{task}: k* above chance: the best alignment over k > {SPECTRA_K_MIN - 1} against the same maximum "
                  f"with the tokens relabelled ({SPECTRA_PERMUTATIONS} permutations), p per seed",
                  "; ".join(f"seed {p['seed']}: p = {p['null_p']:.3f} (r {fmt(p['r_star'], 2)} vs 95 % of chance "
                            f"{fmt(p['null_q95'], 2)})" for p in per) + f"; {n['beating']} of {len(per)} below "
                  f"{SPECTRA_ALPHA}",
                  f"every seed's k* a real match (p < {SPECTRA_ALPHA})", n["beating"] == len(per)),
        KeyNumber(f"{task}: Fourier alignment at k*: Pearson r, and r controlling for S^sig,(0) (median, range over "
                  f"seeds; seeds whose partialled r beats the best partialled r over k > {SPECTRA_K_MIN - 1} with the "
                  "tokens relabelled)",
                  f"{fmt(ms.median(r_stars))} ({fmt(min(r_stars))} to {fmt(max(r_stars))}); "
                  f"{fmt(ms.median(partial_stars))} ({fmt(min(partial_stars))} to {fmt(max(partial_stars))}); "
                  f"{n['partial_beating']} of {len(per)} above chance (p < {SPECTRA_ALPHA}: "
                  f"{', '.join(str(p['seed']) for p in per if p['partial_null_p'] < SPECTRA_ALPHA) or 'none'})",
                  "not asserted: how well k* matches", None),
        KeyNumber(f"{task}: S^emb of two seeds at epoch {last}: Pearson over token pairs, and controlling for "
                  f"S^sig,(0) (mean, range over {len(pairs)} pairs)",
                  f"{_pairs(n['between'])}; {_pairs(n['between_partial'])}",
                  "different geometries: not asserted (no threshold in the paper)", None),
        KeyNumber(f"{task}: training accuracy at epoch {last} (median, min)",
                  f"{fmt(ms.median([p['accuracy'] for p in per]))}, {fmt(min(p['accuracy'] for p in per))}",
                  "not asserted", None),
    ]


def _describe_spectra_part(task: str, n: dict) -> str:
    """The paragraph of one part of ``seed-spectra`` from :func:`spectra_numbers`."""
    last, per, by_k, n_k = n["last"], n["per"], n["by_k"], n["n_k"]
    r_stars, partial_stars = n["r_stars"], n["partial_stars"]
    return (
        f"On `{task}`, {len(per)} seeds read at epoch {last}: two seeds' embedding similarity matrices correlate "
        f"{_pairs(n['between'])}, and {_pairs(n['between_partial'])} controlling for S^sig,(0). Restricted to "
        f"k > {SPECTRA_K_MIN - 1}, the Fourier frequency whose order-1 geometry best matches a seed's embeddings takes "
        f"{len(by_k)} distinct values over {len(per)} seeds ({', '.join(map(str, by_k))})"
        + ("; every seed has its own." if len(by_k) == len(per) else
           f"; the expectation that every seed has its own is not met ({_shared_text(by_k)}).")
        + f" Drawn at random from the {n_k} frequencies, {len(per)} seeds would give "
        f"{n['chance_distinct']:.1f} distinct values on average; {n['beating']} of {len(per)} seeds' best alignments "
        f"beat the chance level of the best of "
        f"{n_k} frequencies with the tokens relabelled (p < {SPECTRA_ALPHA}). The alignment at k* is "
        f"{fmt(min(r_stars))} to {fmt(max(r_stars))}, and {fmt(min(partial_stars))} to "
        f"{fmt(max(partial_stars))} with S^sig,(0) partialled out."
    )


def _draw_spectra_part(task: str, n: dict) -> Figures:
    """Every seed's S^emb with its k*, and every seed's Fourier profile, of one part of ``seed-spectra``."""
    last, per, S, tokens = n["last"], n["per"], n["S"], n["tokens"]
    return {
        f"{task}_geometries.png": (f"`{task}`: S^emb of the task tokens at epoch {last} for every seed, titled with "
                                   "its k* and r.",
                                   learning_figures.similarity_grid(
                                       [(f"seed {p['seed']}: k* = {p['k_star']}, r = {p['r_star']:.2f}", s)
                                        for p, s in zip(per, S)], tokens,
                                       f"{task}: embedding similarity $S^{{\\mathrm{{emb}}}}$ at epoch {last}, "
                                       "one panel per seed")),
        f"{task}_fourier.png": (f"`{task}`: Fourier alignment over k at epoch {last} for every seed (Pearson r, "
                                "and r controlling for S^sig,(0)); k* marked.",
                                learning_figures.fourier_profiles_figure(per, SPECTRA_K_MIN)),
    }


def _spectra_part_rows(task: str, n: dict) -> list[dict]:
    """``summary.csv`` rows of one part of ``seed-spectra``: one per seed."""
    return [{"task": task, **{key: p[key] for key in ("seed", "k_star", "r_star", "partial_r_star", "null_p",
                                                       "partial_null_p", "accuracy")}} for p in n["per"]]


def _summarise_spectra_part(n: dict) -> dict:
    """``summary.json`` of one part of ``seed-spectra``."""
    return {"epoch": n["last"], "k_min": SPECTRA_K_MIN, "members": n["per"], "between_seed_pearson": n["between"],
            "between_seed_partial": n["between_partial"]}


def measure_spectra(out: Path, paths: dict[str, Path]) -> dict[str, dict]:
    """Task -> :func:`spectra_numbers` of each part of ``seed-spectra`` present."""
    return {task: spectra_numbers(paths[task]) for task in SPECTRA_PARTS if task in paths}


register(TrainedRecipe(
    name="seed-spectra", figure="SPEC §8 D (App. D)",
    expectation="10 seeds of staircase-add and of staircase-mod at epoch 1000: different geometries, each best "
                "matched by a different frequency k* = argmax over k > 10",
    cpu_time="≈ 1 min",
    paper=Paper("different geometries per seed, each best matched by a different frequency "
                "k* = argmax_{k>10}",
                f"10 seeds at epoch 1000; {SPEC8_SETTINGS}"),
    runs=lambda: {task: _spectra_config(source) for task, source in SPECTRA_PARTS.items()},
    measure=measure_spectra,
    judge=lambda parts: [k for task, n in parts.items() for k in _judge_spectra_part(task, n)],
    describe=lambda parts: " ".join(_describe_spectra_part(task, n) for task, n in parts.items()),
    draw=lambda paths, parts: {name: fig for task, n in parts.items()
                               for name, fig in _draw_spectra_part(task, n).items()},
    summary=lambda parts: {task: _summarise_spectra_part(n) for task, n in parts.items()},
    member_rows=lambda parts: [row for task, n in parts.items() for row in _spectra_part_rows(task, n)],
))
