"""The explorer pages in a real headless browser (Debian's Chromium, driven by playwright).

Each page is opened from disk; the tests check that it logs no error and asks the network for
nothing, then move its controls as a user would and compare what the page then shows — the
heatmap's values, the PCA points, the cursor, the titles and labels, typeset (ρ<sub>next</sub>,
never ``ρ_next``) — with numbers computed here from the output's files: a run, an LM run, a sweep,
a Hugging Face Trainer output measured by ``ctxstair.monitor`` and an ``analyze-model`` series.
The page times its redraws and its start (``performance.now()``): the tests check that it did, for
each redraw; the budgets are judged in ``benchmarks/explorer.py`` (``benchmarks/RESULTS.md``), not here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from explorer_helpers import RAW_MATH, ROUNDING, SMALL, TINY_LM, Page, browser
from monitor_helpers import TINY_ARGS, example
from repo_paths import ROOT
from safetensors.numpy import load_file

from ctxstair import rundir
from ctxstair.cli import main
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.recipes import run_recipe
from ctxstair.report.explorer import write_explorer
from ctxstair.run import Run
from ctxstair.sweep import run_sweep
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer

# Every page is built from a run made here, then driven in Chromium: ≈ 2 min on 2 cores.
pytestmark = pytest.mark.extended

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
    page.page.wait_for_function("document.getElementById('sig1-heatmap').layout.title.text.includes('c<sub>1</sub>')")
    c_1 = np.cos(2 * np.pi * np.arange(phi1.shape[2]) / phi1.shape[2])
    view = phi1 @ c_1
    assert np.abs(np.array(page.plot_data("sig1-heatmap")[0]["z"]) - unit_cosines(view)).max() <= ROUNDING

    page.page.click("#play")
    page.page.wait_for_function("window.explorer.index >= 2")  # play starts over from the end
    page.page.click("#play")
    assert page.page.locator("#play").inner_text().endswith("play")

    assert title_text(page, "alignment-curves") == "Alignment of Semb(t) with each signature order"
    assert "(0)" in page.subscripts("#alignment-curves .legend")  # order 0: Pearson ρ(0) with Ssig,(0)
    assert_typeset(page)
    assert page.errors == [] and page.requests == [page.url]
    # The page timed each redraw it made (the four slider moves, then at least two steps of play) and
    # became interactive after its script began; what those times may be is benchmarks/explorer.py's.
    timings, started, ready = page.evaluate("[window.explorer.timings, window.explorer.scriptAt, "
                                            "window.explorer.readyAt]")
    assert len(timings) >= 6 and all(t > 0 for t in timings) and 0 < started < ready
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
    assert title_text(page, "rho-next") == "ρnext: embeddings vs next-token signatures (SPEC §7)"
    assert_typeset(page)
    assert page.errors == [] and page.requests == [page.url]


def test_sweep_explorer_links_each_cell_to_its_run(tmp_path, chrome):
    out = tmp_path / "sweep"
    run_sweep("staircase-add", out, {"model.init.gamma": [0.5, 1.5], "model.d": [8, 16]},
              {k: v for k, v in SMALL.items() if k != "model.d"}, seeds=1, workers=1)
    assert main(["explore", str(out)]) == 0
    page = Page(chrome, out / "explorer.html")
    heatmap = page.plot_data("phase-0")[0]
    assert np.array(heatmap["z"]).shape == (2, 2)
    assert page.text("h1") == "sweep of staircase-add over model.init.gamma × model.d"
    assert_typeset(page)
    assert page.errors == [] and page.requests == [page.url]
    box = page.page.locator("#phase-0 .nsewdrag").bounding_box()  # the plot area: click its top-right cell
    page.page.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + 0.25 * box["height"])
    page.page.wait_for_url("**/cells/model.init.gamma=1.5__model.d=16/explorer.html")
    page.page.wait_for_function("window.explorer && window.explorer.ready && window.explorer.kind === 'run'")


def assert_typeset(page: Page) -> None:
    """No label in plain-text notation (``ρ_next``, ``S^emb``) anywhere the user reads."""
    text = page.text()
    assert RAW_MATH.findall(text) == [], text


def title_text(page: Page, plot: str) -> str:
    """A plot's title as a user reads it (Plotly puts zero-width spaces around a sub/superscript)."""
    return page.text(f"#{plot} .gtitle").replace("\u200b", "")


@pytest.fixture(scope="module")
def trainer_output(tmp_path_factory):
    """examples/trainer_staircase.py, shortened (tests/helpers/monitor_helpers.py): a 1-layer Llama trained 12
    steps by a Hugging Face Trainer with the staircase callback, checkpoints at steps 5, 10 and 12."""
    root = tmp_path_factory.mktemp("trainer")
    corpus = root / "tiny.txt"
    corpus.write_text(synthetic_corpus(n_sentences=3000))
    out = root / "run"
    example().main([*TINY_ARGS, "--out", str(out), "--corpus", str(corpus), "--report-to", "none"])
    return out


def checkpoint_cosines(folder: Path, ids: list[int]) -> np.ndarray:
    """The cosines of the embedding rows ``ids`` saved in a checkpoint folder."""
    return unit_cosines(load_file(folder / "model.safetensors")["model.embed_tokens.weight"].astype(np.float64)[ids])


def test_trainer_output_explorer_shows_every_measured_step_and_each_checkpoint(trainer_output, chrome):
    assert main(["explore", str(trainer_output)]) == 0
    page = Page(chrome, trainer_output / "explorer.html")
    steps = [1, 2, 3, 5, 10, 12]  # the callback's log points (4) and every 5 steps, and the checkpoints
    assert page.evaluate("window.explorer.data.times") == steps
    assert page.text("h1") == "Trainer output (llama) measured by ctxstair.monitor: 6 measured steps"
    assert title_text(page, "rho-next") == "ρnext: embeddings vs next-token signatures (SPEC §7)"
    assert page.subscripts("#rho-next .gtitle") == ["next"]
    assert "W" in title_text(page, "attention-paths") and page.subscripts("#attention-paths .gtitle") == ["O", "V"]
    assert_typeset(page)
    ids = page.evaluate("window.explorer.data.token_ids")
    lefts = []
    for index, (step, shown) in enumerate(zip(steps, [5, 5, 5, 5, 10, 12])):  # before step 5: its checkpoint
        page.move_slider(index)
        assert page.text("#time-label").startswith(f"step {step} · {index + 1} of 6")
        heatmap = np.array(page.plot_data("emb-heatmap")[0]["z"])
        assert np.abs(heatmap - checkpoint_cosines(trainer_output / f"checkpoint-{shown}", ids)).max() <= ROUNDING
        heading = title_text(page, "emb-heatmap")
        assert heading.startswith(f"Semb at step {shown}" +
                                  (f" (the first checkpoint, saved after step {step})" if step < 5 else "ρnext"))
        cursor = page.evaluate("""() => { const c = document.getElementById('rho-next-cursor');
                                          return [c.dataset.time, parseFloat(c.style.left)]; }""")
        assert cursor[0] == str(step)
        lefts.append(cursor[1])
    assert lefts == sorted(lefts) and len(set(lefts)) == len(lefts)
    assert page.errors == [] and page.requests == [page.url]


def test_trainer_output_between_and_without_saved_models(trainer_output, chrome, tmp_path):
    bare = shutil.copytree(trainer_output, tmp_path / "bare")
    shutil.copyfile(bare / "checkpoint-12" / rundir.TRAINER_STATE, bare / rundir.TRAINER_STATE)
    shutil.rmtree(bare / "checkpoint-10")  # step 10 was measured live, but its model was not kept
    assert main(["explore", str(bare)]) == 0
    page = Page(chrome, bare / "explorer.html")
    page.move_slider(4)
    ids = page.evaluate("window.explorer.data.token_ids")
    heatmap = np.array(page.plot_data("emb-heatmap")[0]["z"])
    assert np.abs(heatmap - checkpoint_cosines(trainer_output / "checkpoint-5", ids)).max() <= ROUNDING
    assert title_text(page, "emb-heatmap").startswith("Semb at step 5 (the latest checkpoint before step 10)")

    for folder in bare.glob("checkpoint-*"):
        shutil.rmtree(folder)
    assert main(["explore", str(bare)]) == 0
    page = Page(chrome, bare / "explorer.html")
    assert page.text("#geometry-note").startswith("The embedding geometry is not available: this Trainer output")
    assert page.text("h1") == "Trainer output measured by ctxstair.monitor: 6 measured steps"
    assert str(tmp_path) not in (bare / "explorer.html").read_text()  # no machine path in the page
    assert page.page.locator("#pca, #emb-heatmap").count() == 0
    page.move_slider(4)
    assert page.text("#time-label").startswith("step 10 ")
    assert page.evaluate("document.getElementById('rho-next-cursor').dataset.time") == "10"
    assert_typeset(page)
    assert page.errors == [] and page.requests == [page.url]


@pytest.fixture(scope="module")
def series(trainer_output):
    """``analyze-model --out`` on the Trainer output's three checkpoints, with small settings."""
    out = trainer_output.parent / "series"
    analyze_model(trainer_output, text=(trainer_output.parent / "tiny.txt").read_text(), k=20, window=32,
                  max_tokens=20000, probe_steps=30, attention_windows=8, path_windows=1, null_permutations=10,
                  prefix_labels=100, out=out)
    return out


def test_series_explorer_shows_each_checkpoint_and_says_when_its_rows_are_missing(series, trainer_output, chrome,
                                                                                 tmp_path):
    assert main(["explore", str(series)]) == 0
    page = Page(chrome, series / "explorer.html")
    assert page.text("h1") == "analyze-model series of run: 3 checkpoints"
    assert str(series.parent) not in (series / "explorer.html").read_text()  # its source is a machine path
    assert [p["id"] for p in page.evaluate("window.explorer.data.panels")] == [
        "rho-next", "probe", "attention-paths", "path-shares", "unembedding"]
    assert_typeset(page)
    ids = page.evaluate("window.explorer.data.token_ids")
    rho = page.plot_data("rho-next")[0]
    for index, step in enumerate((5, 10, 12)):
        page.move_slider(index)
        assert page.text("#time-label").startswith(f"step {step} (checkpoint-{step}) · {index + 1} of 3")
        heatmap = np.array(page.plot_data("emb-heatmap")[0]["z"])
        assert np.abs(heatmap - checkpoint_cosines(trainer_output / f"checkpoint-{step}", ids)).max() <= ROUNDING
        assert title_text(page, "emb-heatmap") == (f"Semb at step {step} (checkpoint-{step})"
                                                   f"ρnext = {rho['y'][index]:.3f}")
    assert page.errors == [] and page.requests == [page.url]

    older = shutil.copytree(series, tmp_path / "older")
    for rows in (older / "checkpoints").glob("*.npz"):
        rows.unlink()
    assert main(["explore", str(older)]) == 0
    page = Page(chrome, older / "explorer.html")
    assert "not available" in page.text("#geometry-note") and page.page.locator("#emb-heatmap").count() == 0
    page.move_slider(2)
    assert page.evaluate("document.getElementById('probe-cursor').dataset.time") == "12"
    assert page.errors == [] and page.requests == [page.url]
