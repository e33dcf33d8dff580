"""Word-group structure (numbers in order, weekdays on a cycle, categories as clusters) in a
corpus's next-token signatures and in a model's input embeddings, against a permutation null with
block-bootstrap intervals (SPEC §7, "Corpus semantics").

* :mod:`~ctxstair.semantics.structure` — ``group_structure`` (a corpus, or its counted statistics)
  and ``embedding_structure`` (a model's input embeddings).
* :mod:`~ctxstair.semantics.scores` — the scores of each kind of group and their permutation null.
* :mod:`~ctxstair.semantics.summary` — the printout and ``report.md``.
* :mod:`~ctxstair.semantics.measurement` — ``ctxstair semantics``: check, score, write.

Example::

    from ctxstair.semantics.structure import group_structure
    from ctxstair.text.corpora import load_text
    from ctxstair.text.tokenizer import TextTokenizer
    text = load_text("synthetic")
    result = group_structure(text, TextTokenizer.train_bpe(text, vocab_size=2000))
"""
