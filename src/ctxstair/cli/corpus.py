"""``ctxstair corpus count`` and ``ctxstair corpus info``: corpus statistics over tokenized shards
(:mod:`ctxstair.corpus`, docs/corpora.md).

    ctxstair corpus count data/openwebtext/train.bin --tokenizer gpt2 --window 1024 --out stats/owt --workers 16
    ctxstair corpus count pile/ --tokenizer EleutherAI/pythia-160m --out stats/pile --ray auto
    ctxstair corpus info stats/owt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ctxstair.cli.analyze_model import DEFAULT_K, DEFAULT_PREFIX_LABELS, DEFAULT_WINDOW, DEFAULT_WINDOWS
from ctxstair.cli.options import add_quiet_option
from ctxstair.errors import InputError


def register(commands) -> None:
    """Add ``ctxstair corpus count`` and ``ctxstair corpus info``."""
    corpus = commands.add_parser("corpus", help="count a tokenized corpus once into a statistics directory")
    actions = corpus.add_subparsers(dest="corpus_command", required=True, parser_class=type(corpus))
    count = actions.add_parser("count", help="count token files (.bin, .npy, Megatron .bin/.idx, Parquet, Arrow, "
                                             "text, JSONL) into a statistics directory")
    count.add_argument("sources", nargs="+", help="token files or folders of them (text and JSONL: ctxstair corpus "
                                                  "tokenize first)")
    count.add_argument("--out", type=Path, required=True, help="the statistics directory")
    count.add_argument("--tokenizer", default=None,
                       help="the tokenizer of the ids: a tokenizer.json or .gguf file, a Hugging Face model "
                            "folder, a fetched model name (smollm2), or gpt2 (chooses and names the tracked tokens; "
                            "analyses refuse statistics of another tokenizer)")
    count.add_argument("--vocab-size", type=int, default=None, help="V (default: the tokenizer's)")
    count.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                       help=f"tokens per window (default {DEFAULT_WINDOW}, analyze-model's); the model's context "
                            "length for statistics of its training windows")
    count.add_argument("--documents", choices=("joined", "separate"), default="joined",
                       help="joined: a file's documents are one stream, windows may cross a document boundary "
                            "(nanoGPT, Megatron); separate: each document is cut on its own")
    count.add_argument("--count", default="unigram,next,prefix,sample",
                       help="which statistics, comma-separated: unigram, next, prefix, sample, bigram, groups (the "
                            "word groups of ctxstair semantics, per block of positions)")
    count.add_argument("--block-tokens", type=int, default=1000,
                       help="positions per bootstrap block of the word groups (ctxstair semantics' default)")
    count.add_argument("--k", type=int, default=DEFAULT_K, help="tracked tokens: the k most frequent "
                                                                         "word-like ones")
    count.add_argument("--tokens", default=None, help="tracked token ids given instead, comma-separated")
    count.add_argument("--prefix-labels", type=int, default=DEFAULT_PREFIX_LABELS,
                       help="labels of the prefix counts")
    count.add_argument("--sample-windows", type=int, default=DEFAULT_WINDOWS,
                       help="windows sampled (fixed seed) for the attention paths")
    count.add_argument("--seed", type=int, default=0, help="the sample's seed (the measurement's default)")
    count.add_argument("--dtype", default=None, help="token dtype of flat .bin files (default uint16)")
    count.add_argument("--column", default=None, help="token column of Parquet/Arrow tables (default input_ids)")
    count.add_argument("--text-ok", action="store_true",
                       help="count a flat .bin whose first MiB reads as text (refused otherwise: a text file "
                            "named .bin is not token ids)")
    count.add_argument("--workers", type=int, default=1, help="local worker processes")
    count.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="count on Ray instead: local (a Ray on this machine), auto (the cluster `ray start` "
                            "made) or a cluster address")
    count.add_argument("--unit-tokens", type=int, default=None, help="tokens per work unit")
    count.add_argument("--max-gib", type=float, default=2.0, help="memory budget of the workers' dense counts, GiB")
    count.add_argument("--resume", action="store_true", help="continue a killed count: finished units are kept")
    count.add_argument("--force", action="store_true", help="replace an existing statistics directory once the new "
                                                           "one is complete")
    add_quiet_option(count)
    count.set_defaults(handler=cmd_count)
    tokenize = actions.add_parser("tokenize", help="tokenize text and JSONL files into a Megatron .bin/.idx dataset "
                                                   "(one document per line or record)")
    tokenize.add_argument("files", nargs="+", type=Path,
                          help=".txt and .jsonl files, read in the order given, or folders of them (every .txt, "
                               ".text, .jsonl and .ndjson file below the folder, sorted by path)")
    tokenize.add_argument("--tokenizer", required=True,
                          help="a tokenizer.json or .gguf file, a Hugging Face model folder, a fetched model name "
                               "(smollm2) or gpt2")
    tokenize.add_argument("--out", type=Path, required=True, help="the dataset's prefix: writes OUT.bin and OUT.idx")
    tokenize.add_argument("--field", default="text", help="text field of JSONL records")
    tokenize.add_argument("--workers", type=int, default=1, help="tokenizing processes")
    add_quiet_option(tokenize)
    tokenize.set_defaults(handler=cmd_tokenize)
    info = actions.add_parser("info", help="what a statistics directory holds")
    info.add_argument("path", type=Path, help="a statistics directory")
    info.add_argument("--json", action="store_true", help="print the manifest")
    info.set_defaults(handler=cmd_info)


def cmd_count(args: argparse.Namespace) -> None:
    """Count, then print the one-line summary."""
    from ctxstair.corpus import count_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    started = time.monotonic()
    tokenizer = TextTokenizer.named(args.tokenizer) if args.tokenizer else None
    tokens = _ids(args.tokens) if args.tokens else None
    groups = _group_words(tokenizer) if "groups" in args.count.split(",") else None
    stats = count_corpus(args.sources, args.out, tokenizer=tokenizer, vocab_size=args.vocab_size, window=args.window,
                         documents=args.documents, count=args.count, tokens=tokens, k=args.k,
                         prefix_labels=args.prefix_labels, attention_windows=args.sample_windows, seed=args.seed,
                         dtype=args.dtype, column=args.column, workers=args.workers, ray=args.ray,
                         groups=groups, block_tokens=args.block_tokens, unit_tokens=args.unit_tokens,
                         resume=args.resume, force=args.force,
                         max_bytes=int(args.max_gib * 2**30), text_ok=args.text_ok)
    seconds = time.monotonic() - started
    print(f"{args.out}: {stats.summary()}; {seconds:.1f} s ({stats.manifest['tokens'] / max(seconds, 1e-9) / 1e6:.1f} "
          "M tokens/s)")


def cmd_tokenize(args: argparse.Namespace) -> None:
    """Tokenize, then print what was written."""
    from ctxstair.corpus import open_source, tokenize_files
    from ctxstair.text.tokenizer import TextTokenizer

    started = time.monotonic()
    index = tokenize_files(args.files, TextTokenizer.named(args.tokenizer), args.out, field=args.field,
                           workers=args.workers)
    source = open_source(index)
    seconds = time.monotonic() - started
    print(f"wrote {index.with_suffix('.bin')} and {index}: {source.n_tokens:,} tokens in "
          f"{len(source.document_lengths()):,} documents, {seconds:.1f} s")


def cmd_info(args: argparse.Namespace) -> None:
    """Print what the directory holds."""
    from ctxstair.corpus import read_stats
    from ctxstair.corpus.stats import ARRAYS

    stats = read_stats(args.path)
    if args.json:
        print(json.dumps(stats.manifest, indent=2))
        return
    m = stats.manifest
    print(f"{args.path}: {stats.summary()}")
    tokenizer = m["tokenizer"]
    if tokenizer is None:
        print("tokenizer: none recorded")
    else:
        print(f"tokenizer: {tokenizer['vocab_size']:,} tokens, vocabulary sha256 {tokenizer['vocab_sha256'][:16]}")
    print(f"windows: {m['window']} tokens, documents {m['documents']}; settings: {json.dumps(m['settings'])}")
    size = (args.path / ARRAYS).stat().st_size if (args.path / ARRAYS).is_file() else 0
    layouts = ("every array dense int64 (statistics version 1)" if "storage" not in m else ", ".join(
        f"{name} {entry['layout'] + ' ' if entry['layout'] != 'dense' else ''}{'/'.join(entry['stored'].values())}"
        for name, entry in m["storage"].items()))
    print(f"stored: {size:,} bytes; {layouts}")
    for source in m["sources"]:
        files = ", ".join(f"{f['name']} ({f['bytes']:,} bytes, sha256 {f['sha256'][:12]})" for f in source["files"])
        print(f"  {source['path']} ({source['kind']}, {source['dtype']}): {source['n_tokens']:,} tokens; {files}")


def _group_words(tokenizer) -> dict[str, list[int]]:
    """The words of ``ctxstair semantics``' groups with the tokens that spell them."""
    from ctxstair.semantics.structure import group_word_tokens

    if tokenizer is None:
        raise InputError("the word groups are found with the tokenizer: give --tokenizer")
    return group_word_tokens(tokenizer)


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--tokens must be comma-separated token ids, got {text!r}") from None
