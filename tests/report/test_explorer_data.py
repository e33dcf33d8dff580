"""`ctxstair explore` without a browser: the PCA pictures (`pca_paths`), the data of the run,
language-model and sweep pages checked against the run directory's files by brute force, the CLI's
exit codes, and that a page is a pure function of the files."""

import csv
import itertools
import json
import re
import shutil

import numpy as np
import pytest
from explorer_helpers import ROUNDING, SMALL, TINY_LM
from short_runs import FIGURE_FORMAT

from ctxstair import rundir
from ctxstair.alignment.pca import pca_paths
from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.recipes import run_recipe
from ctxstair.report.explorer import EXPLORER, write_explorer
from ctxstair.report.explorer.lm_data import lm_payload
from ctxstair.report.explorer.page import plotly_js
from ctxstair.report.explorer.run_data import run_payload
from ctxstair.report.explorer.sweep_data import sweep_payload
from ctxstair.report.sweep_figures import phase_specs
from ctxstair.run import Run
from ctxstair.sweep import run_sweep
from ctxstair.text.synthetic import SYNTHETIC_GROUPS
from ctxstair.text.tokenizer import TextTokenizer


def brute_cosines(rows) -> np.ndarray:
    """Cosine matrix of the rows (trailing axes flattened) by explicit loops; a zero row gives 0."""
    rows = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
    n = len(rows)
    S = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            na, nb = np.sqrt(rows[a] @ rows[a]), np.sqrt(rows[b] @ rows[b])
            if na > 0 and nb > 0:
                S[a, b] = (rows[a] @ rows[b]) / (na * nb)
    return S


def unit_centred(frame) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), then the mean row subtracted, by loops."""
    frame = np.asarray(frame, dtype=np.float64)
    unit = np.zeros_like(frame)
    for i, row in enumerate(frame):
        norm = np.sqrt(row @ row)
        if norm > 0:
            unit[i] = row / norm
    return unit - unit.sum(axis=0) / len(unit)


def own_pca(centred) -> np.ndarray:
    """The rows' coordinates on their own top two principal components (sign arbitrary)."""
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    return u[:, :2] * s[:2]


def distances(points) -> np.ndarray:
    """All pairwise Euclidean distances of the rows."""
    points = np.asarray(points, dtype=np.float64)
    return np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)


def read_csv(path) -> list[dict]:
    """A CSV file's rows as dicts of strings."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def drifting_frames(seed: int, S: int = 6, n: int = 9, d: int = 5) -> np.ndarray:
    """(S, n, d) random vectors that move a little from one snapshot to the next, at varied scales."""
    rng = np.random.default_rng(seed)
    E = np.cumsum(rng.normal(size=(S, n, d)) * np.array([1.0] + [0.3] * (S - 1))[:, None, None], axis=0)
    return E * rng.uniform(0.1, 10.0, size=(S, n, 1))


# --- pca_paths -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pca_paths_fixed_is_the_unit_centred_rows_on_the_stacked_top_two_directions(seed):
    E = drifting_frames(seed)
    E[0, 3] = 0.0  # a zero row stays at the origin of its unit vectors
    paths = pca_paths(E)
    basis = paths["basis"]
    assert basis.shape == (5, 2) and paths["fixed"].shape == paths["procrustes"].shape == (6, 9, 2)
    np.testing.assert_allclose(basis.T @ basis, np.eye(2), atol=1e-12)
    centred = np.stack([unit_centred(frame) for frame in E])
    for s in range(len(E)):
        np.testing.assert_allclose(paths["fixed"][s], centred[s] @ basis, atol=1e-12)
    stacked = centred.reshape(-1, 5)
    _, vectors = np.linalg.eigh(stacked.T @ stacked)  # ascending eigenvalues: the last two are the top
    top = vectors[:, -2:]
    np.testing.assert_allclose(basis @ basis.T, top @ top.T, atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pca_paths_procrustes_frames_are_own_pcas_turned_onto_their_successors(seed):
    E = drifting_frames(seed)
    aligned = pca_paths(E)["procrustes"]
    own = np.stack([own_pca(unit_centred(frame)) for frame in E])
    for c in range(2):  # the last frame is its own PCA, up to the sign of each component
        last, mine = aligned[-1][:, c], own[-1][:, c]
        assert min(np.abs(last - mine).max(), np.abs(last + mine).max()) < 1e-10
    for s in range(len(E)):  # an orthogonal transform of the frame's own PCA: the same distances
        np.testing.assert_allclose(distances(aligned[s]), distances(own[s]), atol=1e-10)
    rng = np.random.default_rng(seed)
    for s in range(len(E) - 1):
        gap = np.linalg.norm(aligned[s] - aligned[s + 1])
        for flips in itertools.product([1.0, -1.0], repeat=2):
            assert gap <= np.linalg.norm(own[s] * np.array(flips) - own[s + 1]) + 1e-10
        for _ in range(20):
            rotation, _ = np.linalg.qr(rng.normal(size=(2, 2)))
            assert gap <= np.linalg.norm(own[s] @ rotation - aligned[s + 1]) + 1e-10


def test_pca_paths_of_a_single_snapshot_is_its_own_pca():
    E = drifting_frames(3, S=1)
    paths = pca_paths(E)
    np.testing.assert_allclose(distances(paths["procrustes"][0]), distances(own_pca(unit_centred(E[0]))), atol=1e-10)
    assert np.isfinite(paths["fixed"]).all()


@pytest.mark.parametrize("shape", [(4, 3), (0, 4, 3), (2, 1, 3), (2, 4, 1), (2, 4, 3, 1)])
def test_pca_paths_refuses_bad_shapes(shape):
    with pytest.raises(InputError, match="E must have shape"):
        pca_paths(np.ones(shape))


# --- a run ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small two-member staircase-add run directory."""
    return run_recipe("staircase-add", tmp_path_factory.mktemp("run") / "run", dict(SMALL), seeds=2, progress=False,
                      figure_format=FIGURE_FORMAT)


@pytest.fixture(scope="module")
def run_page(run):
    """The run's page data for member 1 (so that a page of member 0 would not pass)."""
    return run_payload(run, member=1)


def test_run_payload_matrices_equal_brute_force_cosines(run, run_page):
    times = rundir.snapshot_times(run)
    assert run_page["times"] == times and len(times) > 3
    sigs = rundir.read_signatures(run)
    assert run_page["tokens"] == [str(t) for t in sigs.tokens]
    assert run_page["members"] == 2 and run_page["member"] == 1
    assert np.shape(run_page["S_emb"]) == (len(times), sigs.tokens.size, sigs.tokens.size)
    for i, t in enumerate(times):
        rows = rundir.load_snapshot(run, t)["W_E"][1][sigs.tokens]
        np.testing.assert_allclose(run_page["S_emb"][i], brute_cosines(rows), rtol=0, atol=ROUNDING)
    np.testing.assert_allclose(run_page["S_sig0"], brute_cosines(sigs.orders[0]), rtol=0, atol=ROUNDING)

    phi1 = sigs.orders[1]  # (T, K_l, P)
    P = phi1.shape[2]
    assert run_page["sig1"]["ks"] == list(range(P // 2 + 1)) and run_page["sig1"]["default_k"] == P // 2
    for k in (1, P // 2):
        c_k = np.array([np.cos(2 * np.pi * k * j / P) for j in range(P)])
        np.testing.assert_allclose(run_page["sig1"]["S"][str(k)], brute_cosines(phi1 @ c_k), rtol=0, atol=ROUNDING)


def test_run_payload_pca_shows_the_members_unit_rows(run, run_page):
    sigs = rundir.read_signatures(run)
    times = rundir.snapshot_times(run)
    for name in ("fixed", "procrustes"):
        assert np.shape(run_page["pca"][name]) == (len(times), sigs.tokens.size, 2)
    last = unit_centred(rundir.load_snapshot(run, times[-1])["W_E"][1][sigs.tokens])
    np.testing.assert_allclose(distances(run_page["pca"]["procrustes"][-1]), distances(own_pca(last)), atol=2e-4)


def test_run_payload_curves_and_loss_equal_the_files(run, run_page):
    rows = [r for r in read_csv(run / "alignment.csv") if r["member"] == "1"]

    def column(signature, key="pearson"):
        chosen = sorted((int(r["epoch"]), float(r[key])) for r in rows if r["signature"] == signature)
        return [e for e, _ in chosen], [v for _, v in chosen]

    curves = {curve["name"].split(":")[0].split(" (")[0]: curve for curve in run_page["curves"]}
    assert list(curves) == ["order 0", "order-1 probe", "order-1 probe, v ⟂ 1"]
    for name, signature in [("order 0", "order0"), ("order-1 probe", "order1_probe"),
                            ("order-1 probe, v ⟂ 1", "order1_probe_zero_mean")]:
        epochs, values = column(signature)
        assert curves[name]["x"] == epochs and len(epochs) == len(rundir.snapshot_times(run))
        np.testing.assert_allclose(curves[name]["y"], values, rtol=0, atol=1e-5)
    assert sorted(run_page["fourier"], key=int) == [str(k) for k in run_page["sig1"]["ks"]]
    for k, curve in run_page["fourier"].items():
        epochs, values = column(f"fourier_k{k}")
        assert curve["x"] == epochs
        np.testing.assert_allclose(curve["y"], values, rtol=0, atol=1e-5)

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    mine = [m for m in metrics if m["member"] == 1]
    assert run_page["loss"]["x"] == [m["epoch"] for m in mine] and len(mine) >= 150
    np.testing.assert_allclose(run_page["loss"]["loss"], [m["loss"] for m in mine], rtol=0, atol=1e-6)
    np.testing.assert_allclose(run_page["loss"]["acc"], [m["acc"] for m in mine], rtol=0, atol=1e-5)
    assert [m["loss"] for m in mine] != [m["loss"] for m in metrics if m["member"] == 0]


def test_run_payload_is_strict_json_and_refuses_a_missing_member(run, run_page):
    json.dumps(run_page, allow_nan=False)
    for member in (2, -1, True, 0.5):
        with pytest.raises(InputError, match="member must be in 0..1"):
            run_payload(run, member=member)


def test_a_page_is_a_pure_function_of_the_files_and_fetches_nothing(run, tmp_path):
    first, = write_explorer(run, tmp_path / "a.html", member=1)
    second, = write_explorer(run, tmp_path / "b.html", member=1)
    again, = write_explorer(run, tmp_path / "a.html", member=1)
    assert first.read_bytes() == second.read_bytes() == again.read_bytes()
    html = first.read_text(encoding="utf-8")
    assert plotly_js() in html and str(tmp_path) not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?://""", html.replace(plotly_js(), ""), re.IGNORECASE)
    assert write_explorer(run, tmp_path / "m0.html", member=0)[0].read_bytes() != first.read_bytes()


# --- a language-model run ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny lm-staircase run directory with its analysis."""
    return run_recipe("lm-staircase", tmp_path_factory.mktemp("lm") / "lm", dict(TINY_LM), progress=False,
                      figure_format=FIGURE_FORMAT)


@pytest.mark.parametrize("which", ["run", "lm_run"])
def test_a_page_does_not_depend_on_the_directory_name(which, request, tmp_path):
    """A run is built under a temporary name and renamed; the same files must give the same page."""
    source = request.getfixturevalue(which)
    pages = [write_explorer(shutil.copytree(source, tmp_path / name))[0].read_bytes() for name in ("one", "two")]
    assert pages[0] == pages[1]


def test_lm_payload_shows_the_group_words_single_tokens(lm_run):
    page = lm_payload(lm_run)
    tokenizer = TextTokenizer.load(lm_run / "tokenizer.json")

    def token(word):
        found = tokenizer.word_token_id(word)
        return tokenizer.word_token_id(word.capitalize()) if found is None else found

    words = page["words"]
    ids = [token(word) for word in words]
    assert None not in ids and len(set(ids)) == len(ids) and len(words) >= 4
    covered = []
    for group in page["groups"]:
        assert 0 <= group["start"] < group["end"] <= len(words)
        covered += range(group["start"], group["end"])
        expected = [w for w in SYNTHETIC_GROUPS[group["name"]].words if token(w) is not None]
        assert words[group["start"]:group["end"]] == expected  # every whole word of the group, in order
    assert covered == list(range(len(words)))  # the groups cut the words without overlap or gap

    times = rundir.snapshot_times(lm_run)
    assert page["times"] == times
    embedding = Run(lm_run).config.model.embedding_key()
    for i, t in enumerate(times):
        rows = rundir.load_snapshot(lm_run, t)[embedding][ids]
        np.testing.assert_allclose(page["S_emb"][i], brute_cosines(rows), rtol=0, atol=ROUNDING)

    rho = page["panels"][0]
    assert rho["id"] == "rho-next"
    chosen = sorted((int(r["step"]), float(r["value"])) for r in read_csv(lm_run / "lm_analysis.csv")
                    if r["measure"] == "rho_next")
    assert rho["traces"][0]["x"] == [e for e, _ in chosen] == times
    np.testing.assert_allclose(rho["traces"][0]["y"], [v for _, v in chosen], rtol=0, atol=1e-5)
    losses = page["panels"][-1]
    steps = [r["step"] for r in rundir.read_metric_rows(lm_run) if "loss" in r]
    assert losses["id"] == "losses" and losses["traces"][0]["x"] == steps
    json.dumps(page, allow_nan=False)


# --- a sweep ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2 × 2 sweep (γ, d) of two-member staircase-add cells."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    fixed = {k: v for k, v in SMALL.items() if k != "model.d"}
    return run_sweep("staircase-add", out, {"model.init.gamma": [0.5, 1.5], "model.d": [16, 32]}, fixed, seeds=2,
                     workers=2, figure_format=FIGURE_FORMAT)


def test_sweep_payload_panels_are_the_cell_medians_of_sweep_csv(sweep):
    page = sweep_payload(sweep)
    spec = json.loads((sweep / "sweep.json").read_text())
    rows = read_csv(sweep / "sweep.csv")
    assert [c["name"] for c in page["cells"]] == [c["name"] for c in spec["cells"]]
    assert page["keys"] == ["model.init.gamma", "model.d"]
    specs = [panel for _, _, panels in phase_specs(True, False) for panel in panels]
    assert [p["label"] for p in page["panels"]] == [label for _, label, _ in specs] and len(specs) == 6
    for panel, (column, _, log_scale) in zip(page["panels"], specs):
        medians, counts = {}, {}
        for cell in spec["cells"]:
            j = spec["grid"]["model.init.gamma"].index(cell["overrides"]["model.init.gamma"])
            i = spec["grid"]["model.d"].index(cell["overrides"]["model.d"])
            assert panel["cells"][i][j] == cell["name"]
            members = [r for r in rows if r["cell"] == cell["name"]]
            found = [float(r[column]) for r in members if r[column] != ""]
            assert len(members) == 2
            medians[i, j] = float(np.median(found)) if found else None
            counts[i, j] = (len(found), len(members))
        defined = [m for m in medians.values() if m is not None]
        assert panel["log"] == (log_scale and bool(defined) and all(m > 0 for m in defined)), column
        for (i, j), median in medians.items():
            text = panel["text"][i][j]
            if median is None:
                assert panel["z"][i][j] is None and text == "none"
                continue
            expected = np.log10(median) if panel["log"] else median
            assert panel["z"][i][j] == pytest.approx(expected, rel=1e-12, abs=1e-12), (column, i, j)
            shown = float(text.split(" ")[0])  # 3 significant digits, or the integer part from 10 on
            assert abs(shown - median) <= (0.5 if abs(median) >= 10 else 5.1e-3 * abs(median)), (column, text)
            found, total = counts[i, j]
            assert text.endswith(f" ({found}/{total})") == (found < total), (column, text)
    json.dumps(page, allow_nan=False)


def test_sweep_explorer_links_to_pages_it_writes(sweep):
    pages = write_explorer(sweep)
    assert pages[0] == sweep / EXPLORER and len(pages) == 5
    page = sweep_payload(sweep)
    assert set(page["links"]) == {c["name"] for c in page["cells"]}
    for cell in page["cells"]:
        assert cell["explorers"] and page["links"][cell["name"]] == cell["explorers"][0][1]
        for _, href in cell["explorers"]:
            assert (sweep / href).is_file() and (sweep / href).resolve().parent.parent == (sweep / "cells").resolve()
            assert (sweep / href).parent.name == cell["name"]
    html = (sweep / EXPLORER).read_text(encoding="utf-8")
    assert all(href in html for href in page["links"].values())


# --- the CLI ---------------------------------------------------------------------------------------------------


def explore_exit(argv: list[str]) -> int:
    """`ctxstair explore ...`'s exit code, also when argparse exits itself."""
    try:
        return main(["explore", *argv])
    except SystemExit as exit_:
        return exit_.code


def test_cli_explore_writes_the_page_next_to_the_run(run, tmp_path, capsys):
    copy = shutil.copytree(run, tmp_path / "run")
    assert not (copy / EXPLORER).exists()
    assert explore_exit([str(copy)]) == 0
    assert (copy / EXPLORER).is_file() and str(copy / EXPLORER) in capsys.readouterr().out
    assert (copy / EXPLORER).read_bytes() == write_explorer(copy, copy / "direct.html")[0].read_bytes()
    elsewhere = write_explorer(copy, tmp_path / "pages" / "run.html")[0].read_text()
    assert '"report":"../run/report.html"' in elsewhere  # links are relative to where the page is


def test_cli_explore_bad_input_exits_2_with_one_line_and_no_page(run, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text("recipe: staircase-add\n")
    recipe = tmp_path / "recipe"  # a recipe output of two parts, each a run
    recipe.mkdir()
    (recipe / "recipe.json").write_text(json.dumps({"recipe": "staircase-add", "parts": ["a", "b"]}))
    for part in ("a", "b"):
        shutil.copytree(run, recipe / part)
    single = shutil.copytree(run, tmp_path / "single")
    cases = [([str(tmp_path / "missing")], "is not a directory"),
             ([str(empty)], "no snapshots"),
             ([str(recipe), "--out", str(tmp_path / "one.html")], "holds 2 runs"),
             ([str(single), "--member", "7"], "member must be in 0..1"),
             ([str(single), "--member", "x"], "invalid int value")]
    for argv, message in cases:
        assert explore_exit(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.startswith("ctxstair: error:") and captured.err.count("\n") == 1, captured.err
        assert message in captured.err and "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.rglob("*.html") if p.name != "report.html") == []
