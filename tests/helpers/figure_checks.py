"""Helpers shared by the tests of figure files: record every figure a command saves, and name the
axes of a figure that draw nothing (an empty panel)."""

import contextlib

import matplotlib.figure
import pytest


@contextlib.contextmanager
def saved_figures():
    """Within the block, every figure written with ``Figure.savefig`` is appended to the list yielded
    (once per figure, however many formats it is written in)."""
    figures = []
    save = matplotlib.figure.Figure.savefig

    def recording(fig, *args, **kwargs):
        if all(fig is not seen for seen in figures):
            figures.append(fig)
        return save(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", recording)
        yield figures


def empty_axes(fig: matplotlib.figure.Figure) -> list[str]:
    """The axes of ``fig`` that hold no data — no line, marker, bar, image or patch: a panel left empty
    or switched off takes room on the page and shows nothing. Named by title, or by position."""
    return [ax.get_title() or f"axes {i}" for i, ax in enumerate(fig.axes)
            if not (ax.lines or ax.collections or ax.images or ax.patches or ax.containers)]


def assert_no_empty_axes(figures: list) -> None:
    """Every figure drew something in every axes it has, and there was at least one figure."""
    assert figures
    empty = {fig.get_suptitle() or f"figure {i}": names for i, fig in enumerate(figures) if (names := empty_axes(fig))}
    assert empty == {}
