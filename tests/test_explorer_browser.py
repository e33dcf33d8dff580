"""The explorer pages in a real headless browser (Debian's Chromium, driven by playwright).

Each page is opened from disk; the tests check that it logs no error and asks the network for
nothing, then move its controls as a user would and compare what the page then shows — the
heatmap's values, the PCA points, the cursor — with numbers computed here from the run's files.
The redraw and start-up times are measured (``performance.now()`` in the page) and printed; the
budgets are judged in ``benchmarks/explorer.py`` (``benchmarks/RESULTS.md``), not here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from explorer_helpers import ROUNDING, SMALL, TINY_LM, Page, browser

from ctxstair import rundir
from ctxstair.cli import main
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.recipes import run_recipe
from ctxstair.report.explorer import write_explorer
from ctxstair.run import Run
from ctxstair.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
#: Where the README's screenshot lives; the test rewrites it when CTXSTAIR_SCREENSHOTS=1.
SCREENSHOT = ROOT / "docs" / "images" / "explorer-staircase-add.png"


@pytest.fixture(scope="module")
def chrome():
    with browser() as instance:
        yield instance


@pytest.fixture(scope="module")
def staircase_add(tmp_path_factory):
    """The staircase-add run at its defaults, made by ``ctxstair run`` (which writes its explorer)."""
    out = tmp_path_factory.mktemp("explore") / "staircase-add"
    assert main(["run", "staircase-add", "--out", str(out)]) == 0
    return out


def unit_cosines(rows: np.ndarray) -> np.ndarray:
    """Cosine matrix of the rows, written out."""
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit @ unit.T


def fixed_pca(E: np.ndarray) -> np.ndarray:
    """(S, n, 2): unit rows, centred per snapshot, on the top two principal directions of all of them."""
    frames = [rows / np.linalg.norm(rows, axis=1, keepdims=True) for rows in E]
    frames = np.stack([f - f.mean(axis=0) for f in frames])
    values, vectors = np.linalg.eigh(np.einsum("sni,snj->ij", frames, frames))
    return frames @ vectors[:, np.argsort(values)[::-1][:2]]


def test_ctxstair_run_writes_the_explorer_and_the_report_links_it(staircase_add):
    assert (staircase_add / "explorer.html").is_file()
    report = (staircase_add / "report.html").read_text()
    assert '<a href="explorer.html">' in report


def test_staircase_add_explorer_shows_each_snapshot_of_the_run(staircase_add, chrome, tmp_path):
    page = Page(chrome, staircase_add / "explorer.html")
    times = rundir.snapshot_times(staircase_add)
    tokens = rundir.read_signatures(staircase_add).tokens
    E = np.stack([rundir.load_snapshot(staircase_add, t)["W_E"][0][tokens] for t in times]).astype(np.float64)
    expected_pca = fixed_pca(E)
    lefts = []
    for index in (3, 14, 27, len(times) - 1):
        page.move_slider(index)
        heatmap = np.array(page.plot_data("emb-heatmap")[0]["z"])
        assert np.abs(heatmap - unit_cosines(E[index])).max() <= ROUNDING
        points = page.plot_data("pca")[0]
        shown = np.column_stack([points["x"], points["y"]])
        signs = np.sign(np.sum(shown * expected_pca[index], axis=0))  # a principal direction's sign is a choice
        assert np.abs(shown - expected_pca[index] * signs).max() <= 1e-4
        cursor = page.evaluate("""() => { const c = document.getElementById('alignment-curves-cursor');
                                          return [c.dataset.time, parseFloat(c.style.left)]; }""")
        assert cursor[0] == str(times[index])
        lefts.append(cursor[1])
        assert f"epoch {times[index]} " in page.page.locator("#time-label").inner_text()
    assert lefts == sorted(lefts) and len(set(lefts)) == len(lefts)  # later snapshots stand further right

    phi1 = rundir.read_signatures(staircase_add).orders[1]  # (T, labels, P)
    page.page.select_option("#fourier-k", "1")
    page.page.wait_for_function("document.getElementById('sig1-heatmap').layout.title.text.includes('c_1')")
    c_1 = np.cos(2 * np.pi * np.arange(phi1.shape[2]) / phi1.shape[2])
    view = phi1 @ c_1
    assert np.abs(np.array(page.plot_data("sig1-heatmap")[0]["z"]) - unit_cosines(view)).max() <= ROUNDING

    page.page.click("#play")
    page.page.wait_for_function("window.explorer.index >= 2")  # play starts over from the end
    page.page.click("#play")
    assert page.page.locator("#play").inner_text().endswith("play")

    assert page.errors == [] and page.requests == [page.url]
    timings = page.evaluate("window.explorer.timings")
    print(f"\nstaircase-add explorer: {(staircase_add / 'explorer.html').stat().st_size / 1e6:.2f} MB, interactive "
          f"{page.evaluate('window.explorer.readyAt'):.0f} ms after navigation, redraws {np.round(timings, 1)} ms")
    page.page.select_option("#fourier-k", str(phi1.shape[2] // 2))  # back to the default, the odd/even direction
    page.move_slider(len(times) // 2 + 4)
    page.page.screenshot(path=tmp_path / "explorer.png", full_page=True)
    if os.environ.get("CTXSTAIR_SCREENSHOTS"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "explorer.png", SCREENSHOT)


def test_language_model_explorer_shows_the_word_groups_at_each_step(tmp_path, chrome):
    out = tmp_path / "lm"
    run_recipe("lm-staircase", out, TINY_LM)
    write_explorer(out)
    page = Page(chrome, out / "explorer.html")
    times = rundir.snapshot_times(out)
    embedding = Run(out).config.model.embedding_key()
    tokenizer = TextTokenizer.load(out / "tokenizer.json")
    words, ids = page.evaluate("[window.explorer.data.words, window.explorer.data.token_ids]")
    assert [tokenizer.decode([i]).strip().lower() for i in ids] == [w.strip().lower() for w in words]
    for index in (1, len(times) - 1):
        page.move_slider(index)
        W_E = rundir.load_snapshot(out, times[index])[embedding].astype(np.float64)
        heatmap = np.array(page.plot_data("emb-heatmap")[0]["z"])
        assert np.abs(heatmap - unit_cosines(W_E[ids])).max() <= ROUNDING
        assert page.evaluate("document.getElementById('rho-next-cursor').dataset.time") == str(times[index])
    groups = page.plot_data("pca")
    assert [trace["name"] for trace in groups] == [g["name"] for g in page.evaluate("window.explorer.data.groups")]
    assert sum(len(trace["x"]) for trace in groups) == len(words)
    assert page.errors == [] and page.requests == [page.url]


def test_sweep_explorer_links_each_cell_to_its_run(tmp_path, chrome):
    out = tmp_path / "sweep"
    run_sweep("staircase-add", out, {"model.init.gamma": [0.5, 1.5], "model.d": [8, 16]},
              {k: v for k, v in SMALL.items() if k != "model.d"}, seeds=1, workers=1)
    assert main(["explore", str(out)]) == 0
    page = Page(chrome, out / "explorer.html")
    heatmap = page.plot_data("phase-0")[0]
    assert np.array(heatmap["z"]).shape == (2, 2)
    assert page.errors == [] and page.requests == [page.url]
    box = page.page.locator("#phase-0 .nsewdrag").bounding_box()  # the plot area: click its top-right cell
    page.page.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + 0.25 * box["height"])
    page.page.wait_for_url("**/cells/model.init.gamma=1.5__model.d=16/explorer.html")
    page.page.wait_for_function("window.explorer && window.explorer.ready && window.explorer.kind === 'run'")
