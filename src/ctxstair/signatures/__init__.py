"""Probability signatures of a dataset (SPEC §2): statistics of the data, no model involved — except
:func:`attention_label_signature`, which weights them by a model's attention on the data (SPEC §6.3).

Example::

    from ctxstair import tasks, signatures
    ds = tasks.make("add", N=20)
    phi0 = signatures.label_signature(ds.X, ds.y, 0, ds.vocab_size, tokens=ds.tokens)  # (20, 41)
    phi1 = signatures.label_signature(ds.X, ds.y, 1, ds.vocab_size, tokens=ds.tokens,
                                      context=ds.tokens)                              # (20, 41, 20)
    last = signatures.position_label_signature(ds.X, ds.y, ds.vocab_size, positions=(1,))
    # P(y = ν, x_2 = β | x_I = α) for the last of the 2 positions, (41, 41, 41) indexed (α, ν, β)

Corpus windows (n, T), one row per training window (SPEC §6.4, §7)::

    phi_nt = signatures.next_token_signature(windows, V, tokens=frequent)     # (k, V)
    phi_1 = signatures.prefix_signature(windows, frequent, labels, context)   # (k, m, c)
"""

from ctxstair.signatures.counting import cooccurrence_signature, label_signature, occurrence
from ctxstair.signatures.hierarchy import SignatureHierarchy, signature_hierarchy
from ctxstair.signatures.next_token import (
    NextTokenCounts,
    next_token_occurrence,
    next_token_signature,
    previous_token_signature,
)
from ctxstair.signatures.positional import attention_label_signature, position_label_signature
from ctxstair.signatures.prefix import prefix_counts, prefix_signature

__all__ = [
    "NextTokenCounts",
    "SignatureHierarchy",
    "attention_label_signature",
    "cooccurrence_signature",
    "label_signature",
    "next_token_occurrence",
    "next_token_signature",
    "previous_token_signature",
    "occurrence",
    "position_label_signature",
    "prefix_counts",
    "prefix_signature",
    "signature_hierarchy",
]
