"""Shared by the explorer's tests and its benchmark: small runs to explore, and Debian's Chromium
driven by playwright.

Playwright's own browser download is not reachable here, so the system Chromium is launched by
path. Outside CI a missing Chromium skips the browser tests with the reason; with ``CI`` set (as
``.ci/run`` does) it fails them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

#: A small staircase-add run (as in tests/sweep/test_sweep.py): a few seconds on one core.
SMALL = {"task.N": 8, "model.d": 16, "train.epochs": 150, "snapshots.log_points": 6, "snapshots.every": 50,
         "analysis.probe_steps": 60}
#: A tiny lm-staircase run (as in tests/lm/test_train.py) whose tokenizer keeps many group words whole.
TINY_LM = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
           "corpus.window": 16, "corpus.vocab_size": 600, "corpus.max_tokens": 20000, "train.steps": 30,
           "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 4, "snapshots.every": 10,
           "analysis.k": 40, "analysis.probe_steps": 30, "analysis.windows": 16}
#: A mathematical label left in plain-text notation (``ρ_next``, ``S^emb``, ``W_O``): a lone letter
#: followed by ``_`` or ``^``. The page must show sub- and superscripts instead.
RAW_MATH = re.compile(r"(?<![\w.])[A-Za-zα-ωΑ-Ω][_^]")
#: How far a number of the page may be from the exact one: half a unit of its 4th decimal.
ROUNDING = 0.5e-4 + 1e-9

#: Flags for a headless Chromium as root on a machine without network: no sandbox, no GPU, and no
#: background connections (which a closed network refuses, many at a time).
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]


def chromium_path() -> str | None:
    """The system Chromium's path, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def browser() -> Iterator[object]:
    """A headless Chromium (playwright ``Browser``); pytest skips (fails in CI) when there is none."""
    import pytest

    path = chromium_path()
    if path is None:
        reason = "Chromium is not installed (apt-get install chromium); the explorer's browser tests need it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chrome = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        try:
            yield chrome
        finally:
            chrome.close()


class Page:
    """An explorer page open in the browser, with what it logged and asked the network for."""

    def __init__(self, chrome, path: Path, width: int = 1300, height: int = 1400):
        self.page = chrome.new_page(viewport={"width": width, "height": height})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.url = Path(path).resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_function("window.explorer && window.explorer.ready", timeout=60_000)

    def evaluate(self, script: str, arg=None):
        return self.page.evaluate(script, arg)

    def move_slider(self, index: int) -> None:
        """Set the slider to ``index`` as a user would (an input event) and wait for the redraw."""
        done = self.evaluate("window.explorer.timings.length")
        self.page.locator("#time-slider").fill(str(index))
        self.page.wait_for_function("([i, n]) => window.explorer.index === i && window.explorer.timings.length > n",
                                    arg=[index, done])

    def text(self, selector: str = "#app") -> str:
        """The text a user reads in ``selector``: the page's own and every plot's (titles, axes, legends)."""
        return self.page.locator(selector).first.evaluate("(node) => node.textContent")

    def subscripts(self, selector: str) -> list[str]:
        """The texts Plotly draws lowered and smaller (a ``<sub>``) inside ``selector``'s SVG text."""
        return self.evaluate("""(selector) => Array.from(document.querySelectorAll(selector + ' tspan'))
            .filter((t) => parseFloat(t.getAttribute('dy') || '0') > 0 && (t.style.fontSize || '').endsWith('%'))
            .map((t) => t.textContent)""", selector)

    def plot_data(self, element_id: str) -> list[dict]:
        """The traces Plotly holds for the plot ``element_id`` (``x``, ``y``, ``z``, ``text``, ``name``)."""
        return self.evaluate("""(id) => document.getElementById(id).data.map((trace) => ({
            x: trace.x, y: trace.y, z: trace.z, text: trace.text, name: trace.name}))""", element_id)
