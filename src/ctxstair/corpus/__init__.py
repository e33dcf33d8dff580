"""Corpus statistics over tokenized pretraining shards (SPEC §7, docs/corpora.md): read token files in
place, count them once on many workers, keep the counts in a statistics directory that every
LM analysis reads.

    from ctxstair import corpus
    from ctxstair.text.tokenizer import TextTokenizer

    tok = TextTokenizer.named("gpt2")
    stats = corpus.count_corpus(["data/owt/train.bin"], "stats/owt", tokenizer=tok, window=1024, workers=8)
    stats.summary()                      # tokens, windows, sources, what was counted
    stats.array("unigram")               # (V,) int64
    stats.next_rows()                    # (T, V) int64 next-token counts of the tracked tokens

Modules: :mod:`~ctxstair.corpus.sources` (the readers: flat ``.bin``/``.npy``, Megatron
``.bin``/``.idx``, Parquet/Arrow, and text/JSONL tokenized into a Megatron dataset), :mod:`~ctxstair.corpus.units`
(what one work unit counts), :mod:`~ctxstair.corpus.executors` (local processes, Ray),
:mod:`~ctxstair.corpus.count` (the map-reduce) and :mod:`~ctxstair.corpus.stats` (the directory).
"""

from ctxstair.corpus.count import COUNTABLE, DEFAULT_COUNT, count_corpus
from ctxstair.corpus.sources import open_source, open_sources, windows
from ctxstair.corpus.stats import CorpusStats, read_stats, tokenizer_identity
from ctxstair.corpus.tokenize import tokenize_files

__all__ = ["COUNTABLE", "DEFAULT_COUNT", "CorpusStats", "count_corpus", "open_source", "open_sources", "read_stats",
           "tokenize_files", "tokenizer_identity", "windows"]
