"""``ctxstair analyze-model``: the LM staircase measurement (SPEC §6.4, §7) of a trained model's
checkpoints — a Hugging Face directory, a folder of its checkpoints, a GGUF file, ``smollm2``, an LM
run directory of this project, or revisions of a model on the Hugging Face Hub
(:mod:`ctxstair.checkpoints`) — measured one checkpoint at a time by :mod:`ctxstair.measure.analyze_model`:
ρ_next, the prefix probe and, for models of a family with a view, the attention-path correlation per layer with
its permutation null and the path shares of the embedding update, as ``ctxstair lm train`` and the
monitor compute them.

    ctxstair data fetch smollm2 && ctxstair data fetch shakespeare
    ctxstair analyze-model smollm2 --corpus shakespeare --out runs/smollm2-shakespeare
    ctxstair analyze-model runs/lm --out runs/lm-analysed            # our run, on its own training windows
    ctxstair analyze-model EleutherAI/pythia-160m --revisions log:16 --corpus shakespeare --out runs/pythia-160m
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxstair import numerics
from ctxstair.cli.options import add_figure_format_option, add_quiet_option
from ctxstair.config.lm import LMAnalysisConfig
from ctxstair.corpus.count import WINDOW as COUNT_WINDOW

#: The defaults of the measurement, for the help: :class:`~ctxstair.config.lm.LMAnalysisConfig`'s, which
#: :class:`ctxstair.measure.staircase.StaircaseSettings` takes (read from the config, which loads no torch).
DEFAULT_K, DEFAULT_PREFIX_LABELS = LMAnalysisConfig.k, LMAnalysisConfig.prefix_labels
DEFAULT_WINDOWS, DEFAULT_PATH_WINDOWS = LMAnalysisConfig.windows, LMAnalysisConfig.path_windows
#: ``analyze-model``'s corpus windows (:data:`ctxstair.measure.analyze_model.WINDOW`, ``MAX_TOKENS``): the
#: window of corpus statistics, and a token budget repeated here so that ``ctxstair --help`` loads no torch
#: (a test checks it is the measurement's).
DEFAULT_WINDOW, DEFAULT_MAX_TOKENS = COUNT_WINDOW, 2_000_000
#: For an LM run of ours analysed on its own windows the measurement's settings are the run's
#: (its config's analysis section), so every measurement option is None unless given.
_OURS = "; for an LM run of ours on its own windows, the run's own setting"


def register(commands) -> None:
    """Add ``analyze-model`` to the ``ctxstair`` sub-commands."""
    parser = commands.add_parser("analyze-model", help="ρ_next, the prefix probe, attention paths and path shares "
                                                       "of a trained model")
    parser.add_argument("model", help="Hugging Face model directory (safetensors weights; pickled .bin weights "
                                      "are refused), folder of checkpoint-<step> directories, .gguf file, fetched "
                                      "model name (smollm2), LM run directory, or a Hugging Face Hub model id "
                                      "ORG/NAME that is not an existing path (see --revisions)")
    parser.add_argument("--corpus", default=None,
                        help="synthetic, a fetched corpus name (shakespeare, wikipedia-excerpt) or a text file/folder; "
                             "for an LM run directory of ours, default: the run's own training windows")
    parser.add_argument("--stats", type=Path, default=None,
                        help="a statistics directory (ctxstair corpus count) instead of --corpus: its counts and "
                             "window sample, counted with the model's tokenizer (statistics of another tokenizer "
                             "are refused before the model's weights are read)")
    parser.add_argument("--run-windows", type=Path, default=None,
                        help="an LM run directory of ours whose training windows and analysis settings replace "
                             "--corpus, as for the run itself: its exported model RUN/hf_model gives the run's "
                             "own numbers")
    parser.add_argument("--k", type=int, default=None,
                        help=f"number of eligible tokens: the most frequent word-like ones "
                             f"(default {DEFAULT_K}{_OURS})")
    parser.add_argument("--prefix-labels", type=int, default=None,
                        help=f"labels of the prefix signature: the tokens and the most frequent next tokens "
                             f"(default {DEFAULT_PREFIX_LABELS}{_OURS})")
    parser.add_argument("--probe-steps", type=int, default=None,
                        help=f"Adam steps of each probe fit (default 300, SPEC §3{_OURS})")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="tokens per corpus window")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="use at most this many corpus tokens")
    parser.add_argument("--no-probe", action="store_true", help="skip the prefix probe and its baseline")
    parser.add_argument("--no-paths", action="store_true",
                        help="skip the attention-path correlations and path shares (models with a view only)")
    parser.add_argument("--windows", type=int, default=None,
                        help=f"corpus windows sampled (fixed seed) for the attention-path correlation (default "
                             f"{DEFAULT_WINDOWS}{_OURS}): one forward pass over them; on SmolLM2 (30 layers) 32 "
                             "windows of 128 tokens take about 1 minute on 2 CPU cores")
    parser.add_argument("--path-windows", type=int, default=None,
                        help=f"the first of those windows used for the path shares of the embedding update "
                             f"(default {DEFAULT_PATH_WINDOWS}, or --windows if smaller{_OURS}): one backward pass "
                             "per path (2 × layers + 1); on SmolLM2 about 35 s per window of 128 tokens on 2 CPU "
                             "cores")
    parser.add_argument("--revisions", default=None,
                        help="Hub model only: the revisions to analyse, comma-separated (step0,step1000,step143000) "
                             "or log:N (N of the repository's revisions named by their step, log-spaced, first and "
                             "last included: step<N>, stage1-step<N>-tokens<M>B, ckpt_<N>, step-<N>, checkpoint-<N>); "
                             "default: main. Files come through huggingface_hub (downloaded, or from "
                             "its cache with HF_HUB_OFFLINE=1); for ρ_next and the probe only the file holding the "
                             "input embedding")
    parser.add_argument("--evict-measured", action="store_true",
                        help="Hub model only: delete each revision this run downloaded from the Hugging Face cache "
                             "once it is measured (and main, read for the series checks, at the end), so a long "
                             "series holds about one revision on disk; revisions whose weights were cached before "
                             "the run are kept")
    parser.add_argument("--keep-flagged", action="store_true",
                        help="keep in the curves the checkpoints whose embedding is byte-identical to an earlier "
                             "one's or to main's (flagged; by default left out, drawn as hollow markers)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write series.json, one result per checkpoint in checkpoints/ (each as it finishes), "
                             "then analysis.json, similarity.npz and analysis.png (with its --figure-format copy) here")
    parser.add_argument("--resume", action="store_true",
                        help="continue the analysis in --out (same model, corpus and settings); finished "
                             "checkpoints are read back, not measured again")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --out directory (once the new analysis is complete)")
    add_figure_format_option(parser)
    numerics.add_reproducible_option(parser)
    add_quiet_option(parser)
    parser.set_defaults(handler=analyze_model_command)


def analyze_model_command(args: argparse.Namespace) -> None:
    """Analyse every checkpoint (:func:`ctxstair.measure.analyze_model.analyze_model`), print one line each; with
    ``--out`` write each checkpoint as it finishes, then the result and its figure."""
    from functools import partial

    from ctxstair.checkpoints.hub import hub_id
    from ctxstair.errors import InputError
    from ctxstair.measure.analyze_model import RESULT_FILE, analyze_model
    from ctxstair.report.lm_figures import write_analysis_figure

    if args.resume and args.force:
        raise InputError("--resume continues the analysis in --out and --force replaces it: pass one of them")
    if args.resume and args.out is None:
        raise InputError("--resume needs --out: the folder of the analysis to continue")
    for option, value in (("--windows", args.windows), ("--path-windows", args.path_windows)):
        if value is not None and value < 1:
            raise InputError(f"{option} must be at least 1, got {value}")
    if None not in (args.windows, args.path_windows) and args.path_windows > args.windows:
        raise InputError(f"--path-windows {args.path_windows} exceeds --windows {args.windows}: the path shares use "
                         "the first of the windows sampled for the attention paths")
    given = {"k": args.k, "prefix_labels": args.prefix_labels, "probe_steps": args.probe_steps,
             "attention_windows": args.windows, "path_windows": args.path_windows}
    settings = {name: value for name, value in given.items() if value is not None}
    if args.windows is not None and args.path_windows is None:  # the path shares use the first of the windows
        settings["path_windows"] = min(DEFAULT_PATH_WINDOWS, args.windows)
    settings.update({"probe": False} if args.no_probe else {}, **({"paths": False} if args.no_paths else {}))

    def finished(row: dict, before: bool) -> None:
        print(f"{row['name']}  skipped (done)" if before else _summary_line(row))
        for line in [] if before else _path_lines(row):
            print(f"    {line}")

    result = analyze_model(args.model, args.corpus, stats=args.stats, run_windows=args.run_windows, window=args.window,
                           max_tokens=args.max_tokens,
                           revisions=args.revisions, out=args.out, resume=args.resume, force=args.force,
                           keep_flagged=args.keep_flagged, evict_measured=args.evict_measured,
                           on_start=lambda source, setup: _print_header(args, setup, source), on_row=finished,
                           progress=print if hub_id(args.model) is not None else None,
                           finish=partial(write_analysis_figure, figure_format=args.figure_format),
                           **settings)
    if result["paths_skipped"] is not None:
        print(f"attention paths and path shares not measured: {result['paths_skipped']}")
    for line in _check_lines(result["checks"]):
        print(line)
    if args.out is not None:
        figures = " and ".join(
            str(args.out / f"analysis.{kind}") for kind in dict.fromkeys(("png", args.figure_format)))
        print(f"wrote {args.out / RESULT_FILE} and {figures}")


def _print_header(args: argparse.Namespace, setup, source) -> None:
    """The model, the corpus and its token set, and what is done about the path measures."""
    corpus = setup.corpus
    where = args.corpus or (f"the statistics {args.stats}" if args.stats else
                            f"the training windows of {args.run_windows}" if args.run_windows else
                            "its own training windows")
    print(f"{args.model} on {where}: {corpus['windows'] * corpus['window']:,} tokens in {corpus['windows']:,} "
          f"windows, {setup.tokens.size} eligible tokens")
    if getattr(source, "revisions", None):
        revisions = source.revisions
        print(f"{len(revisions)} revisions: {', '.join(revisions)}; the tokenizer of {revisions[0]} serves all of them")
    settings = setup.settings
    if settings.paths and source.positions is not None:
        window = min(setup.sample.shape[1], source.positions)
        print(f"attention paths on {setup.sample.shape[0]} windows and path shares on "
              f"{min(settings.path_windows, setup.sample.shape[0])} of them, {window} tokens each (sample seed "
              f"{settings.seed}); null: largest |r| of {settings.null_permutations} token permutations")


def _check_lines(checks: dict) -> list[str]:
    """What the series checks found (:func:`ctxstair.measure.analyze_model.series_checks`): the flagged checkpoints
    and why, whether the check against ``main`` was made, and the vocabulary padding."""
    where = "kept in the curves (--keep-flagged)" if checks["keep_flagged"] else "left out of the curves"
    lines = [f"flagged {name}, {where}: {'; '.join(why)}" for name, why in checks["flagged"].items()]
    if not checks["main"]["checked"]:
        lines.append(f"embeddings not compared with main: {checks['main']['why']}")
    if checks["padding_rows"]:
        lines.append(f"{checks['embedding_rows']} embedding rows for {checks['tokenizer_size']} tokens: "
                     f"{checks['padding_rows']} padding rows, which no text uses")
    return lines


def _summary_line(row: dict) -> str:
    """``step ... ρ_next pearson ... spearman ... probe MSE ... (shuffled ...)`` for one checkpoint."""
    import math

    where = row["name"] if row["step"] is None else f"step {row['step']:>8d}"
    line = f"{where}  ρ_next pearson {row['rho_next']:+.3f} spearman {row['rho_next_spearman']:+.3f}"
    if math.isnan(row["rho_next"]):
        line += " (undefined: a constant similarity triangle)"
    if "probe_heldout_mse" in row:
        line += (f"  probe held-out MSE {row['probe_heldout_mse']:.4f} "
                 f"(shuffled baseline {row['probe_shuffled_mse']:.4f})")
    return line


def _path_lines(row: dict) -> list[str]:
    """The attention-path correlations (all layers up to 6, else the largest and how many beat the
    null) and the path shares (direct, attention and MLP totals, and the largest path) of one
    checkpoint; [] when they were not measured."""
    import numpy as np

    from ctxstair.measure.schema import ATTENTION_CORR, ATTENTION_NULL, PATH_SHARE, parts

    layers = parts(row, ATTENTION_CORR)
    if not layers:
        return []
    c = np.array([row[f"{ATTENTION_CORR}/{layer}"] for layer in layers], dtype=float)
    n = np.array([row[f"{ATTENTION_NULL}/{layer}"] for layer in layers], dtype=float)
    shares = {part: row[f"{PATH_SHARE}/{part}"] for part in parts(row, PATH_SHARE)}
    above = int(np.sum(np.abs(c) > n))
    if c.size <= 6:
        by_layer = "  ".join(f"{layer}: {value:+.3f} (null {bound:.3f})" for layer, value, bound in zip(layers, c, n))
        attention = f"attention-path corr by layer  {by_layer}"
    else:
        best = int(np.nanargmax(np.abs(c))) if np.isfinite(c).any() else 0
        attention = (f"attention-path corr: largest |r| {c[best]:+.3f} in layer {layers[best]} (null {n[best]:.3f}); "
                     f"median {np.nanmedian(c):+.3f}")
    attention += f"; |r| above the null in {above} of {c.size} layers"
    total = {kind: sum(v for name, v in shares.items() if name.split(".")[0] == kind) for kind in ("attn", "mlp")}
    largest = max((name for name in shares if name not in ("embed", "unembed")), key=lambda name: shares[name],
                  default=None)
    share = (f"path shares of the embedding update: direct {shares['embed']:.3f}, attention {total['attn']:.3f}, "
             f"MLP {total['mlp']:.3f}")
    if "unembed" in shares:  # a tied unembedding updates the same matrix from the output side
        share += f", unembedding (tied) {shares['unembed']:.3f}"
    if largest is not None:
        share += f"; largest other path {largest} {shares[largest]:.3f}"
    return [attention, share]
