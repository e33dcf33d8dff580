"""Figures and reports built from computed arrays (the last stage of the data flow).

* :mod:`~ctxstair.report.figures` — panel helpers: ``similarity_heatmap``, ``pca_scatter``, ``save_figure``.
* :mod:`~ctxstair.report.signatures` — figures of a task's signature hierarchy (``signature_views``).
* :mod:`~ctxstair.report.run_figures` — figures of one run directory: ``staircase_figure``,
  ``fourier_heatmap``, ``geometry_figure``, ``pca_figure``, ``curves_figure`` (SPEC §3, §8).
* :mod:`~ctxstair.report.html` — ``write_report``: the self-contained ``report.html`` of a run.
"""
