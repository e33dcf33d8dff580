"""Synthetic tasks of SPEC §8 and §9: ``make(name, **params) -> Dataset`` and ``list()``.

Example::

    from ctxstair import tasks
    ds = tasks.make("add", N=20)      # all 400 pairs (x1, x2), y = x1 + x2
    ds.X.shape, ds.y.shape            # (400, 2), (400,)
"""

from ctxstair.tasks import anchors, arithmetic  # noqa: F401  (registers the tasks)
from ctxstair.tasks.dataset import Dataset
from ctxstair.tasks.registry import TaskInfo, list_tasks, make, register

list = list_tasks  # noqa: A001  (the issue's public name: tasks.list())

__all__ = ["Dataset", "TaskInfo", "list", "list_tasks", "make", "register"]
