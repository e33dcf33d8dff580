"""The one LM staircase measurement (SPEC §7, F7), which an LM run's analysis, ``analyze-model`` and
the monitor all call.

* :mod:`~ctxstair.measure.staircase` — ``StaircaseSettings`` and ``StaircaseSetup``: the corpus-side
  setup (tokens, signatures, probe labels, split) and ``measure(model)``, the rows of one model.
* :mod:`~ctxstair.measure.estimators` — one module per measure (ρ_next, the prefix probe, attention
  paths, path shares, unembedding alignment), which ``StaircaseSetup.measure`` runs in turn.
* :mod:`~ctxstair.measure.schema` — the measures' names, the rows' keys and the table's columns.
* :mod:`~ctxstair.measure.primitives` — the measurements on arrays and models that the estimators
  compute.
* :mod:`~ctxstair.measure.analyze_model` — ``analyze-model``: the measurement over every checkpoint
  of a source (:mod:`ctxstair.checkpoints`).
"""
