"""The explorer's budgets on the staircase-add run: file size, time to interactive, redraw per step.

    python benchmarks/explorer.py [RUN_DIR]    # about 1 min on 2 quiet cores; needs Chromium

Without RUN_DIR it trains ``staircase-add`` at its defaults into a temporary directory first
(about 40 s). ``ctxstair explore`` then writes the page, which is opened ``LOADS`` times in
headless Chromium (Debian's, driven by playwright as in the browser tests), each time in a fresh
page: time to interactive is ``performance.now()`` when every plot has drawn — from the start of
navigation, so it includes reading the 5.7 MB file and compiling plotly.js. In the last load the
slider is moved through every snapshot, one step at a time, as a user dragging it would; each
redraw is timed in the page from the input event until every plot has redrawn. Budgets: at most
10 MB, interactive within 2 s, a redraw in at most 100 ms.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

LOADS = 5
BROWSER_HELPERS = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "explorer_helpers.py"


def _browser_helpers():
    spec = importlib.util.spec_from_file_location("explorer_helpers", BROWSER_HELPERS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from ctxstair.cli import main as ctxstair

    helpers = _browser_helpers()
    if helpers.chromium_path() is None:
        sys.exit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp) / "staircase-add"
        if len(sys.argv) <= 1:
            assert ctxstair(["run", "staircase-add", "--out", str(run)]) == 0
        print(f"\nmachine: {os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}\n")
        start = time.perf_counter()
        assert ctxstair(["explore", str(run)]) == 0
        written = time.perf_counter() - start
        page_file = run / "explorer.html"
        ready, redraws = [], []
        with helpers.browser() as chrome:
            for load in range(LOADS):
                page = helpers.Page(chrome, page_file)
                ready.append(page.evaluate("window.explorer.readyAt"))
                if load == LOADS - 1:
                    for index in range(1, len(page.evaluate("window.explorer.data.times"))):
                        page.move_slider(index)
                    redraws = page.evaluate("window.explorer.timings")[1:]  # the first is the page's own show(0)
                assert page.errors == [] and page.requests == [page.url], (page.errors, page.requests)
                page.page.close()
        size = page_file.stat().st_size / 1e6
    print(f"| measure | value | budget |\n|---|---|---|\n| file size | {size:.2f} MB | ≤ 10 MB |\n"
          f"| time to interactive (median of {LOADS} loads) | {statistics.median(ready):.0f} ms "
          f"(loads: {', '.join(f'{r:.0f}' for r in ready)}) | ≤ 2000 ms |\n"
          f"| redraw per slider step (median; max) over {len(redraws)} steps | {statistics.median(redraws):.0f} ms; "
          f"{max(redraws):.0f} ms | ≤ 100 ms |\n| writing the page (`ctxstair explore`) | {written:.1f} s | |\n")
    met = size <= 10 and statistics.median(ready) <= 2000 and max(redraws) <= 100
    print(f"explorer budgets: {size:.2f} MB, interactive in {statistics.median(ready):.0f} ms, redraw "
          f"{statistics.median(redraws):.0f} ms median and {max(redraws):.0f} ms max "
          f"({'all met' if met else 'not all met'}); load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
