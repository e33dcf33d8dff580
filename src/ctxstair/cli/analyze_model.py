"""``ctxstair analyze-model``: ρ_next and the prefix probe (SPEC §7) for an existing model's input
embeddings — a Hugging Face directory, a folder of its checkpoints, a GGUF file, ``smollm2``, or an
LM run directory of this project (:mod:`ctxstair.lm.hf`).

    ctxstair data fetch smollm2 && ctxstair data fetch shakespeare
    ctxstair analyze-model smollm2 --corpus shakespeare --out runs/smollm2-shakespeare
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from ctxstair import numerics


def register(commands) -> None:
    """Add ``analyze-model`` to the ``ctxstair`` sub-commands."""
    parser = commands.add_parser("analyze-model", help="ρ_next and the prefix probe for a trained model's embeddings")
    parser.add_argument("model", help="Hugging Face model directory (safetensors weights; pickled .bin weights "
                                      "are refused), folder of checkpoint-<step> directories, .gguf file, fetched "
                                      "model name (smollm2) or LM run directory")
    parser.add_argument("--corpus", required=True,
                        help="synthetic, a fetched corpus name (shakespeare, wikipedia-excerpt) or a text file/folder")
    parser.add_argument("--k", type=int, default=200,
                        help="number of eligible tokens: the most frequent word-like ones")
    parser.add_argument("--window", type=int, default=128, help="tokens per corpus window")
    parser.add_argument("--max-tokens", type=int, default=2_000_000, help="use at most this many corpus tokens")
    parser.add_argument("--no-probe", action="store_true", help="ρ_next only: skip the prefix probe and its baseline")
    parser.add_argument("--out", type=Path, default=None, help="write analysis.json and analysis.png here")
    parser.add_argument("--force", action="store_true", help="replace an existing --out directory")
    numerics.add_reproducible_option(parser)
    parser.set_defaults(handler=analyze_model_command)


def analyze_model_command(args: argparse.Namespace) -> None:
    """Analyse every checkpoint, print one line each; with ``--out`` write JSON and figure atomically."""
    from ctxstair.io import atomic_write_text, fresh_output_dir
    from ctxstair.lm.corpus import load_text
    from ctxstair.lm.hf import analyze_model

    # Entered first so that an existing --out is refused before the (minutes-long) analysis.
    output = contextlib.nullcontext() if args.out is None else fresh_output_dir(args.out, force=args.force)
    with output as staging:
        text = load_text(args.corpus)
        result = analyze_model(args.model, text, k=args.k, window=args.window, max_tokens=args.max_tokens,
                               probe=not args.no_probe)
        corpus = result["corpus"]
        print(f"{args.model} on {args.corpus}: {corpus['tokens']:,} tokens in {corpus['windows']:,} windows, "
              f"{len(result['tokens'])} eligible tokens")
        for row in result["checkpoints"]:
            print(_summary_line(row))
        if staging is not None:
            summary = {key: value for key, value in result.items() if key != "similarity"}
            summary["corpus"]["name"] = args.corpus
            atomic_write_text(staging / "analysis.json", json.dumps(summary, indent=2) + "\n")
            _write_figure(result, staging / "analysis.png")
    if args.out is not None:
        print(f"wrote {args.out / 'analysis.json'} and {args.out / 'analysis.png'}")


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


def _write_figure(result: dict, path: Path) -> None:
    """Pair scatter of the last checkpoint (S^emb against S^next); with several checkpoints also
    ρ_next and the probe MSE over steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ctxstair.alignment.similarity import upper_triangle
    from ctxstair.report.figures import save_figure

    rows = result["checkpoints"]
    curves = len(rows) > 1
    fig, axes = plt.subplots(1, 3 if curves else 1, figsize=(15 if curves else 5.5, 4.5), squeeze=False)
    ax = axes[0, 0]
    last = rows[-1]
    ax.scatter(upper_triangle(result["similarity"]["next"]), upper_triangle(result["similarity"]["embedding"][-1]),
               s=3, alpha=0.3, edgecolors="none")
    ax.set_xlabel("S^next: cosine of next-token signatures")
    ax.set_ylabel("S^emb: cosine of input embeddings")
    ax.set_title(f"{last['name']}: ρ_next = {last['rho_next_pearson']:.3f} (Pearson), "
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
    fig.tight_layout()
    save_figure(fig, path)
