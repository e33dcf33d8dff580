"""Probability signatures of a dataset (SPEC §2): statistics of the data, no model involved.

Example::

    from ctxstair import tasks, signatures
    ds = tasks.make("add", N=20)
    phi0 = signatures.label_signature(ds.X, ds.y, 0, ds.vocab_size, tokens=ds.tokens)  # (20, 41)
    phi1 = signatures.label_signature(ds.X, ds.y, 1, ds.vocab_size, tokens=ds.tokens,
                                      context=ds.tokens)                              # (20, 41, 20)
"""

from ctxstair.signatures.counting import cooccurrence_signature, label_signature, occurrence
from ctxstair.signatures.hierarchy import SignatureHierarchy, signature_hierarchy

__all__ = ["SignatureHierarchy", "cooccurrence_signature", "label_signature", "occurrence", "signature_hierarchy"]
