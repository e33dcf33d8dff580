"""``ctxstair analyze-model``: ρ_next and the prefix probe (SPEC §7) for an existing model's input
embeddings — a Hugging Face directory, a folder of its checkpoints, a GGUF file, ``smollm2``, an
LM run directory of this project (:mod:`ctxstair.lm.hf`), or revisions of a model on the Hugging
Face Hub (:mod:`ctxstair.lm.hub`) — and, for Llama-family models, the attention-path correlation
per layer with its permutation null and the path shares of the embedding update (SPEC §6.4, §7),
as ``ctxstair lm train`` computes them per snapshot.

    ctxstair data fetch smollm2 && ctxstair data fetch shakespeare
    ctxstair analyze-model smollm2 --corpus shakespeare --out runs/smollm2-shakespeare
    ctxstair analyze-model EleutherAI/pythia-160m --revisions log:16 --corpus shakespeare --out runs/pythia-160m
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from ctxstair import numerics


def register(commands) -> None:
    """Add ``analyze-model`` to the ``ctxstair`` sub-commands."""
    parser = commands.add_parser("analyze-model", help="ρ_next, the prefix probe, attention paths and path shares "
                                                       "of a trained model")
    parser.add_argument("model", help="Hugging Face model directory (safetensors weights; pickled .bin weights "
                                      "are refused), folder of checkpoint-<step> directories, .gguf file, fetched "
                                      "model name (smollm2), LM run directory, or a Hugging Face Hub model id "
                                      "ORG/NAME that is not an existing path (see --revisions)")
    parser.add_argument("--corpus", required=True,
                        help="synthetic, a fetched corpus name (shakespeare, wikipedia-excerpt) or a text file/folder")
    parser.add_argument("--k", type=int, default=200,
                        help="number of eligible tokens: the most frequent word-like ones")
    parser.add_argument("--window", type=int, default=128, help="tokens per corpus window")
    parser.add_argument("--max-tokens", type=int, default=2_000_000, help="use at most this many corpus tokens")
    parser.add_argument("--no-probe", action="store_true", help="skip the prefix probe and its baseline")
    parser.add_argument("--no-paths", action="store_true",
                        help="skip the attention-path correlations and path shares (Llama-family models only)")
    # Defaults None: lm.hf's ATTENTION_WINDOWS / PATH_WINDOWS, not imported here (it pulls in torch).
    parser.add_argument("--windows", type=int, default=None,
                        help="corpus windows sampled (fixed seed) for the attention-path correlation (default 32): "
                             "one forward pass over them; on SmolLM2 (30 layers) 32 windows of 128 tokens take "
                             "about 1 minute on 2 CPU cores (the whole default command: about 6 minutes)")
    parser.add_argument("--path-windows", type=int, default=None,
                        help="the first of those windows used for the path shares of the embedding update "
                             "(default 4, or --windows if smaller): one backward pass per path (2 × layers + 1); "
                             "on SmolLM2 about 35 s per window of 128 tokens on 2 CPU cores")
    parser.add_argument("--revisions", default=None,
                        help="Hub model only: the revisions to analyse, comma-separated (step0,step1000,step143000) "
                             "or log:N (N of the repository's step<N> revisions, log-spaced, first and last "
                             "included); default: main. Files come through huggingface_hub (downloaded, or from "
                             "its cache with HF_HUB_OFFLINE=1); for ρ_next and the probe only the file holding the "
                             "input embedding")
    parser.add_argument("--out", type=Path, default=None,
                        help="write analysis.json and analysis.png here (a Hub series also series.json and one "
                             "result per revision in revisions/, each as it finishes)")
    parser.add_argument("--resume", action="store_true",
                        help="Hub series: continue the series in --out (same model, corpus and settings); finished "
                             "revisions are read back, not measured again")
    parser.add_argument("--force", action="store_true", help="replace an existing --out directory")
    numerics.add_reproducible_option(parser)
    parser.set_defaults(handler=analyze_model_command)


def analyze_model_command(args: argparse.Namespace) -> None:
    """Analyse every checkpoint, print one line each; with ``--out`` write JSON and figure atomically."""
    from ctxstair.errors import InputError
    from ctxstair.io import fresh_output_dir
    from ctxstair.lm.corpus import load_text
    from ctxstair.lm.hf import ATTENTION_WINDOWS, PATH_WINDOWS, analyze_model
    from ctxstair.lm.hub import hub_id

    windows = ATTENTION_WINDOWS if args.windows is None else args.windows
    path_windows = min(PATH_WINDOWS, windows) if args.path_windows is None else args.path_windows
    if min(windows, path_windows) < 1:
        raise InputError(f"--windows and --path-windows must be at least 1, got {windows} and {path_windows}")
    if path_windows > windows:
        raise InputError(f"--path-windows {path_windows} exceeds --windows {windows}: the path shares use the first "
                         "of the windows sampled for the attention paths")
    repo_id = hub_id(args.model)
    if repo_id is not None:
        _analyze_series(args, repo_id, windows, path_windows)
        return
    if args.revisions is not None or args.resume:
        raise InputError(f"--revisions and --resume are for a Hugging Face Hub model id (org/name that is not an "
                         f"existing path), not {args.model}")
    # Entered first so that an existing --out is refused before the (minutes-long) analysis.
    output = contextlib.nullcontext() if args.out is None else fresh_output_dir(args.out, force=args.force)
    with output as staging:
        text = load_text(args.corpus)
        result = analyze_model(args.model, text, k=args.k, window=args.window, max_tokens=args.max_tokens,
                               probe=not args.no_probe, paths=not args.no_paths,
                               attention_windows=windows, path_windows=path_windows)
        _print_header(args, result["corpus"], len(result["tokens"]), result["paths"])
        for row in result["checkpoints"]:
            _print_row(row)
        if staging is not None:
            _write_outputs(result, staging, args.corpus)
    if args.out is not None:
        print(f"wrote {args.out / 'analysis.json'} and {args.out / 'analysis.png'}")


def _analyze_series(args: argparse.Namespace, repo_id: str, windows: int, path_windows: int) -> None:
    """``analyze-model ORG/NAME``: the revisions of a Hub model, one line each as it finishes; with
    ``--out`` each revision's result as it finishes, then ``analysis.json`` and ``analysis.png``."""
    from ctxstair.errors import InputError
    from ctxstair.lm.corpus import load_text
    from ctxstair.lm.hub import analyze_series, check_series_folder, parse_revisions, prepare_series, series_settings

    if args.resume and args.out is None:
        raise InputError("--resume needs --out: the folder of the series to continue")
    if args.resume and args.force:
        raise InputError("--resume continues the series in --out and --force replaces it: pass one of them")
    text = load_text(args.corpus)
    settings = series_settings(repo_id, parse_revisions(repo_id, args.revisions), text, args.corpus, k=args.k,
                               window=args.window, max_tokens=args.max_tokens, probe=not args.no_probe,
                               paths=not args.no_paths, attention_windows=windows, path_windows=path_windows)
    if args.out is not None:  # refused before anything is fetched
        check_series_folder(args.out, settings, resume=args.resume, force=args.force)
    plan = prepare_series(settings, text)
    corpus_windows = plan.prepared.windows
    _print_header(args, {"tokens": int(corpus_windows.size), "windows": int(corpus_windows.shape[0])},
                  plan.prepared.tokens.size, plan.sample)
    revisions = plan.revisions
    print(f"{len(revisions)} revisions: {', '.join(revisions)}; the tokenizer of {revisions[0]} serves all of them")

    def finished(row: dict, before: bool) -> None:
        if before:
            print(f"{row['name']}  skipped (done)")
        else:
            _print_row(row)

    result = analyze_series(plan, out=args.out, resume=args.resume, force=args.force, on_revision=finished,
                            progress=print)
    if args.out is not None:
        _write_outputs(result, args.out, args.corpus)
        print(f"wrote {args.out / 'analysis.json'} and {args.out / 'analysis.png'}")


def _print_header(args: argparse.Namespace, corpus: dict, n_tokens: int, paths: dict | None) -> None:
    """The model, the corpus and its token set, and what is done about the path measures."""
    print(f"{args.model} on {args.corpus}: {corpus['tokens']:,} tokens in {corpus['windows']:,} windows, "
          f"{n_tokens} eligible tokens")
    if paths is not None and paths["skipped"] is not None:
        print(f"attention paths and path shares not measured: {paths['skipped']}")
    elif paths is not None:
        print(f"attention paths on {paths['attention_windows']} windows and path shares on {paths['path_windows']} "
              f"of them, {paths['window']} tokens each (sample seed {paths['seed']}); null: largest |r| of "
              f"{paths['null_permutations']} token permutations")


def _print_row(row: dict) -> None:
    """One checkpoint's line, and its path measures below it."""
    print(_summary_line(row))
    for line in _path_lines(row):
        print(f"    {line}")


def _write_outputs(result: dict, folder: Path, corpus_name: str) -> None:
    """``analysis.json`` (the result without its similarity arrays) and ``analysis.png`` in ``folder``,
    each written atomically."""
    from ctxstair.io import atomic_write_text

    summary = {key: value for key, value in result.items() if key != "similarity"}
    summary["corpus"]["name"] = corpus_name
    atomic_write_text(folder / "analysis.json", json.dumps(summary, indent=2) + "\n")
    _write_figure(result, folder / "analysis.png")


def _summary_line(row: dict) -> str:
    """``step ... ρ_next pearson ... spearman ... probe MSE ... (shuffled ...)`` for one checkpoint."""
    where = row["name"] if row["step"] is None else f"step {row['step']:>8d}"
    line = f"{where}  ρ_next pearson {row['rho_next_pearson']:+.3f} spearman {row['rho_next_spearman']:+.3f}"
    if not row["rho_next_defined"]:
        line += " (undefined: a constant similarity triangle)"
    if row["probe_heldout_mse"] is not None:
        line += (f"  probe held-out MSE {row['probe_heldout_mse']:.4f} "
                 f"(shuffled baseline {row['shuffled_heldout_mse']:.4f})")
    return line


def _path_lines(row: dict) -> list[str]:
    """The attention-path correlations (all layers up to 6, else the largest and how many beat the
    null) and the path shares (direct, attention and MLP totals, and the largest path) of one
    checkpoint; [] when they were not measured."""
    import numpy as np

    corr, null, shares = row["attention_path_corr"], row["attention_path_null"], row["path_share"]
    if corr is None:
        return []
    c, n = np.array(corr, dtype=float), np.array(null, dtype=float)
    above = int(np.sum(np.abs(c) > n))
    if c.size <= 6:
        layers = "  ".join(f"{layer}: {value:+.3f} (null {bound:.3f})" for layer, (value, bound)
                           in enumerate(zip(c, n)))
        attention = f"attention-path corr by layer  {layers}"
    else:
        best = int(np.nanargmax(np.abs(c))) if np.isfinite(c).any() else 0
        attention = (f"attention-path corr: largest |r| {c[best]:+.3f} in layer {best} (null {n[best]:.3f}); "
                     f"median {np.nanmedian(c):+.3f}")
    attention += f"; |r| above the null in {above} of {c.size} layers"
    total = {kind: sum(v for name, v in shares.items() if name.split(".")[0] == kind) for kind in ("attn", "mlp")}
    largest = max((name for name in shares if name != "embed"), key=lambda name: shares[name], default=None)
    share = (f"path shares of the embedding update: direct {shares['embed']:.3f}, attention {total['attn']:.3f}, "
             f"MLP {total['mlp']:.3f}")
    if largest is not None:
        share += f"; largest other path {largest} {shares[largest]:.3f}"
    return [attention, share]


def _write_figure(result: dict, path: Path) -> None:
    """Pair scatter of the last checkpoint (S^emb against S^next); with several checkpoints also
    ρ_next and the probe MSE over steps. With the path measures also the attention-path correlation
    per layer with its null and the path shares of one checkpoint (beside the scatter); with several
    checkpoints these make a second row: the correlation as a heatmap over layer and step, the path
    shares of the last checkpoint, and the direct, attention and MLP shares over steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ctxstair.alignment.similarity import upper_triangle
    from ctxstair.report.figures import save_figure

    rows = result["checkpoints"]
    curves = len(rows) > 1 and all(row["step"] is not None for row in rows)  # revisions such as main have none
    paths = rows[-1]["attention_path_corr"] is not None
    n_cols = 3 if curves or paths else 1
    n_rows = 2 if paths and curves else 1
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(5.5 * n_cols, 4.8 * n_rows), squeeze=False)
    ax = axes[0, 0]
    last = rows[-1]
    ax.scatter(upper_triangle(result["similarity"]["next"]), upper_triangle(result["similarity"]["embedding"][-1]),
               s=3, alpha=0.3, edgecolors="none")
    ax.set_xlabel("S^next: cosine of next-token signatures")
    ax.set_ylabel("S^emb: cosine of input embeddings")
    ax.set_title(f"{last['name']}\nρ_next = {last['rho_next_pearson']:.3f} (Pearson), "
                 f"{len(result['tokens'])} tokens", fontsize=10)
    if curves:
        steps = np.array([row["step"] for row in rows])
        for key, label in (("rho_next_pearson", "Pearson"), ("rho_next_spearman", "Spearman")):
            axes[0, 1].plot(steps, [row[key] for row in rows], marker="o", ms=3, label=label)
        axes[0, 1].set_ylabel("ρ_next")
        axes[0, 1].set_title("ρ_next over training", fontsize=10)
        if rows[0]["probe_heldout_mse"] is not None:
            for key, label in (("probe_heldout_mse", "prefix probe"), ("shuffled_heldout_mse", "shuffled baseline")):
                axes[0, 2].plot(steps, [row[key] for row in rows], marker="o", ms=3, label=label)
            axes[0, 2].set_ylabel("MSE on held-out token pairs")
            axes[0, 2].set_title("first-order probe (held-out tokens)", fontsize=10)
        else:
            axes[0, 2].set_axis_off()
        for ax in axes[0, 1:]:
            ax.set_xscale("symlog", linthresh=1)  # log-spaced snapshots; step 0 stays on the axis
            ax.set_xlabel("training step")
            if ax.has_data():
                ax.legend(fontsize=8)
    if paths:
        # Without steps to plot against, the path panels show the last checkpoint alone.
        _path_panels(result if curves else {**result, "checkpoints": rows[-1:]}, axes[1] if curves else axes[0, 1:], np)
    fig.tight_layout()
    save_figure(fig, path)


#: Colour of the direct, attention and MLP paths in the path-share panels.
_PATH_COLOURS = {"embed": "tab:green", "attn": "tab:blue", "mlp": "tab:orange"}


def _path_panels(result: dict, axes, np) -> None:
    """The path panels of :func:`_write_figure` on ``axes`` (three for several checkpoints, else two):
    attention-path correlations, path shares, and the shares over steps."""
    from matplotlib.ticker import MaxNLocator

    rows = [row for row in result["checkpoints"] if row["attention_path_corr"] is not None]
    last = rows[-1]
    sample = result["paths"]
    where = f"{sample['attention_windows']} windows of {sample['window']} tokens"
    ax = axes[0]
    if len(rows) > 1:
        corr = np.array([row["attention_path_corr"] for row in rows], dtype=float).T  # (layers, steps)
        bound = float(np.nanmax(np.abs(corr))) if np.isfinite(corr).any() else 1.0
        image = ax.imshow(corr, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-bound, vmax=bound,
                          interpolation="nearest")
        ax.figure.colorbar(image, ax=ax, label="attention-path correlation r")
        above = np.abs(corr) > np.array([row["attention_path_null"] for row in rows], dtype=float).T
        layer, step = np.nonzero(above)
        ax.scatter(step, layer, marker="*", s=12, color="black", label="|r| above the permutation null")
        ax.set_xticks(range(len(rows)), [str(row["step"]) for row in rows], rotation=90, fontsize=6)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step")
        ax.set_ylabel("layer ℓ")
        ax.set_title(f"attention-path correlation by layer and step ({where})", fontsize=10)
        if above.any():
            ax.legend(fontsize=7, loc="upper right")
    else:
        layers = np.arange(len(last["attention_path_corr"]))
        ax.plot(layers, last["attention_path_corr"], marker="o", ms=3, label="correlation r")
        ax.plot(layers, last["attention_path_null"], ls="--", color="grey",
                label=f"null: largest |r| of {sample['null_permutations']} permutations")
        ax.axhline(0, color="black", lw=0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer ℓ")
        ax.set_ylabel("corr(S(φ^{attn,ℓ}), S(W_O W_V w))")
        ax.set_title(f"{last['name']}\nattention-path correlation per layer ({where})", fontsize=10)
        ax.legend(fontsize=8)
    ax = axes[1]
    shares = last["path_share"]
    layers = np.arange(len(last["attention_path_corr"]))
    for kind, label in (("attn", "attention path attn.ℓ"), ("mlp", "MLP path mlp.ℓ")):
        ax.plot(layers, [shares[f"{kind}.{layer}"] for layer in layers], marker="o", ms=3, label=label,
                color=_PATH_COLOURS[kind])
    ax.axhline(shares["embed"], ls="--", color=_PATH_COLOURS["embed"],
               label=f"direct path embed ({shares['embed']:.3f})")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer ℓ")
    ax.set_ylabel("share of the summed path norms over T")
    ax.set_title(f"{last['name']}\npath shares of the embedding update ({sample['path_windows']} windows)",
                 fontsize=10)
    ax.legend(fontsize=8)
    if len(rows) == 1 and len(axes) > 2:  # several checkpoints, the path measures of only one
        axes[2].set_axis_off()
    if len(rows) > 1:
        ax = axes[2]
        steps = np.array([row["step"] for row in rows])
        for kind, label in (("embed", "direct"), ("attn", "attention (all layers)"), ("mlp", "MLP (all layers)")):
            ax.plot(steps, [sum(v for name, v in row["path_share"].items() if name.split(".")[0] == kind)
                            for row in rows], marker="o", ms=3, label=label, color=_PATH_COLOURS[kind])
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("training step")
        ax.set_ylabel("share of the summed path norms over T")
        ax.set_title("path shares over training", fontsize=10)
        ax.legend(fontsize=8)
