"""One file per residual-stream layout: each defines ``ADAPTER`` (:class:`~ctxstair.models.view.adapter.Adapter`),
and every file here is read by :func:`~ctxstair.models.view.adapter.registry`. A new family with the layout
of one of them is a ``model_types`` entry there; a new layout is a new file and its entry in the family test."""
