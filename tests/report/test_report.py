"""The report stage: run-directory figures (report.run_figures) and report.html (report.html)."""

import base64
import csv
import html as html_text
import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from ctxstair import rundir, signatures, tasks
from ctxstair.alignment import compare, cosine_matrix, fourier_alignment, signature_cosine
from ctxstair.errors import InputError
from ctxstair.io import atomic_save_npz, atomic_write_text
from ctxstair.report import run_figures
from ctxstair.report.figures import save_figure
from ctxstair.report.html import write_report
from ctxstair.report.typeset import typeset

SNAPSHOTS = [0, 1, 3, 10, 30, 100, 200, 300]
MEMBERS = 2


def make_run(root, order0_defined=True):
    """A synthetic run directory of `add` (N=10): embeddings drift from the order-0 geometry (early)
    to the order-1 c_{P/2} geometry (late), with the alignment of each snapshot computed from them."""
    sigs = signatures.signature_hierarchy(tasks.make("add", N=10), 1)
    atomic_save_npz(root / "signatures.npz", sigs.as_arrays())
    V, d, tokens = sigs.occurrence.size, 16, sigs.tokens
    rng = np.random.default_rng(0)
    early = sigs.orders[0] @ rng.normal(size=(sigs.labels.size, d))
    c5 = np.cos(np.pi * np.arange(10))  # c_{P/2}: the odd/even direction of add
    late = np.einsum("tlp,p->tl", sigs.orders[1], c5) @ rng.normal(size=(sigs.labels.size, d))
    early, late = early / np.linalg.norm(early), late / np.linalg.norm(late)
    rows, metrics = [], []
    for epoch in SNAPSHOTS:
        w = np.clip(np.log1p(epoch) / np.log1p(SNAPSHOTS[-1]), 0, 1) ** 2
        W_E = 1e-3 * rng.normal(size=(MEMBERS, V, d))
        W_E[:, tokens] += (1 - w) * early + w * late + 0.02 * rng.normal(size=(MEMBERS, tokens.size, d))
        rundir.save_snapshot(root, epoch, {"W_E": W_E.astype(np.float32), "W_U": W_E.astype(np.float32)})
        for m in range(MEMBERS):
            emb = W_E[m, tokens]
            r0 = compare(cosine_matrix(emb), signature_cosine(sigs.orders[0]))
            rows.append(dict(member=m, epoch=epoch, signature="order0",
                             pearson=r0["pearson"] if order0_defined else np.nan,
                             spearman=r0["spearman"] if order0_defined else np.nan,
                             one_minus_mse=r0["one_minus_mse"], defined=order0_defined))
            fourier = fourier_alignment(sigs.orders[1], emb)
            best = np.nanmax(fourier["pearson"])
            for name, value in [("order1_probe", best), ("order1_probe_zero_mean", best * w)]:
                rows.append(dict(member=m, epoch=epoch, signature=name, pearson=value, spearman=np.nan,
                                 one_minus_mse=np.nan, defined=True))
            for k, value, ok in zip(fourier["ks"], fourier["pearson"][0], fourier["defined"][0]):
                rows.append(dict(member=m, epoch=epoch, signature=f"fourier_k{k}", pearson=value,
                                 spearman=fourier["spearman"][0, k], one_minus_mse=fourier["one_minus_mse"][0, k],
                                 defined=bool(ok)))
    for m in range(MEMBERS):
        for epoch in range(SNAPSHOTS[-1] + 1):
            t = np.log1p(epoch) / np.log1p(SNAPSHOTS[-1])
            metrics.append({"member": m, "epoch": epoch, "loss": float(np.log(19) * (1 - t) + 0.01 + 0.05 * m),
                            "acc": float(min(1.0, t ** 3 + 0.02 * m))})
    rundir.write_alignment(root, rows)
    rundir.write_metrics(root, metrics)
    atomic_write_text(root / "config.yaml", "recipe: staircase-add\ntask:\n  name: add\n  N: 10\nnote: a < b & c\n")
    with open(root / "members.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["member", "seed", "d", "gamma_embedding", "gamma_unembedding", "init_std_W_E", "init_std_W_U"])
        for m in range(MEMBERS):
            writer.writerow([m, m, d, 0.5, 0.5, 0.01, 0.01])
    return root


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def all_figures(run_dir):
    return {
        "staircase": run_figures.staircase_figure(run_dir),
        "staircase_member1": run_figures.staircase_figure(run_dir, member=1),
        "fourier": run_figures.fourier_heatmap(run_dir),
        "geometry": run_figures.geometry_figure(run_dir, [3, 300]),
        "pca": run_figures.pca_figure(run_dir, [3, 300], member=1),
        "curves": run_figures.curves_figure(run_dir),
    }


def is_colorbar(ax):
    return hasattr(ax, "_colorbar")


def test_every_figure_is_labelled_and_titled(run):
    for name, fig in all_figures(run).items():
        assert isinstance(fig, plt.Figure), name
        assert fig.get_suptitle() or all(ax.get_title() for ax in fig.axes if not is_colorbar(ax)), name
        for ax in fig.axes:
            assert ax.get_ylabel(), (name, ax)
            if is_colorbar(ax):
                continue
            shared = ax.get_shared_x_axes().get_siblings(ax) + [ax]
            assert any(a.get_xlabel() for a in shared), (name, ax)
            assert ax.get_title() or ax.get_legend() or ax.get_ylabel().startswith("training accuracy"), (name, ax)


def test_staircase_uses_log_epochs_and_all_series(run):
    fig = run_figures.staircase_figure(run)
    top, bottom = fig.axes[0], fig.axes[1]
    assert top.get_xscale() == "log" and bottom.get_xscale() == "log"
    labels = [line.get_label() for line in top.get_lines() if not line.get_label().startswith("_")]
    assert len(labels) == 4
    assert any("Pearson" in label and "order 0" in label for label in labels)
    assert any("k=5" in label for label in labels)  # largest Fourier frequency, P/2 = 5
    assert len(top.collections) == 4  # two members: mean with a min–max band per series
    assert "min–max" in fig.get_suptitle()
    assert all(line.get_xdata().min() >= 1 for line in top.get_lines() if not line.get_label().startswith("_"))
    single = run_figures.staircase_figure(run, member=0)
    assert not single.axes[0].collections and "member 0" in single.get_suptitle()
    with pytest.raises(InputError, match="member"):
        run_figures.staircase_figure(run, member=7)


def test_undefined_order0_plots_one_minus_mse(tmp_path):
    run_dir = make_run(tmp_path, order0_defined=False)
    fig = run_figures.staircase_figure(run_dir, member=0)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "order 0: 1 − MSE (correlation undefined:\nall order-0 signatures equal)" in labels
    titles = [ax.get_title() for ax in run_figures.geometry_figure(run_dir, [10]).axes]
    assert any("1 − MSE" in t for t in titles)


def test_fourier_heatmap_shows_undefined_as_blank(tmp_path):
    run_dir = make_run(tmp_path)
    table = rundir.read_alignment(run_dir)
    table["pearson"][table["signature"] == "fourier_k0"] = np.nan
    rows = [{k: table[k][i] for k in rundir.ALIGNMENT_COLUMNS} for i in range(len(table["epoch"]))]
    rundir.write_alignment(run_dir, rows)
    fig = run_figures.fourier_heatmap(run_dir, member=0)
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (6, len(SNAPSHOTS))
    assert image.mask[0].all() and not image.mask[1:].any()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [str(e) for e in SNAPSHOTS]


def test_geometry_titles_give_epoch_and_order0_pearson(run):
    table = rundir.read_alignment(run)
    _, values = rundir.alignment_series(table, "order0", 0)
    fig = run_figures.geometry_figure(run, [3, 300])
    titles = [ax.get_title() for ax in fig.axes if not is_colorbar(ax)]
    assert len(titles) == 4
    assert "epoch 3" in titles[0] and f"{values[SNAPSHOTS.index(3)]:.3f}" in titles[0]
    assert "epoch 300" in titles[1] and f"{values[SNAPSHOTS.index(300)]:.3f}" in titles[1]
    assert "S^{\\mathrm{sig},(0)}" in titles[2] and "c_{5}" in titles[3]
    with pytest.raises(InputError, match="snapshot"):
        run_figures.geometry_figure(run, [4])


def test_missing_files_raise_input_error(tmp_path):
    with pytest.raises(InputError, match="alignment.csv"):
        run_figures.staircase_figure(tmp_path)
    with pytest.raises(InputError, match="signatures.npz"):
        run_figures.geometry_figure(tmp_path, [0])
    with pytest.raises(InputError, match="metrics.jsonl"):
        run_figures.curves_figure(tmp_path)


def test_report_html_is_self_contained_escaped_and_reproducible(run):
    figures = []
    for name, fig in all_figures(run).items():
        save_figure(fig, run / "figures" / f"{name}.png")
        figures.append((f"The {name} figure <i>raw</i>", f"figures/{name}.png"))
    key_numbers = [
        {"name": "ρ_(0) at epoch 100", "measured": "0.97", "expected": "≥ 0.9", "met": True},
        {"name": "late k*", "measured": "3", "expected": "5", "met": False},
        {"name": "onset epoch", "measured": "120", "expected": "n/a", "met": None},
    ]
    kwargs = dict(title="Staircase <b>add</b>", summary_paragraph="Order 0 first & order 1 later.",
                  key_numbers=key_numbers, figures=figures)
    path = write_report(run, **kwargs)
    assert path == run / "report.html"
    text = path.read_text(encoding="utf-8")
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == len(figures)
    assert base64.b64decode(images[0]) == (run / "figures" / "staircase.png").read_bytes()
    assert "Staircase &lt;b&gt;add&lt;/b&gt;" in text and "<b>add" not in text
    assert "&lt;i&gt;raw&lt;/i&gt;" in text and "first &amp; order 1" in text
    for row in key_numbers:
        assert typeset(row["name"]) in text and row["measured"] in text
    assert "<td>ρ<sub>(0)</sub> at epoch 100</td>" in text  # names typeset (ctxstair.report.typeset)
    assert all(mark in text for mark in ("✓", "✗", "—"))
    assert "<pre>recipe: staircase-add" in text and "a &lt; b &amp; c" in text  # config.yaml, escaped
    assert "<th>gamma_embedding</th>" in text  # members.csv as a table
    first = path.read_bytes()
    assert write_report(run, **kwargs).read_bytes() == first
    with pytest.raises(InputError, match="met"):
        write_report(run, **{**kwargs, "key_numbers": [{**key_numbers[0], "met": "yes"}]})
    with pytest.raises(InputError, match="not found"):
        write_report(run, **{**kwargs, "figures": [("x", "figures/none.png")]})


def test_a_staircase_series_prints_as_one_line_with_its_headline():
    from ctxstair.report.lm_series import StaircaseSeries

    series = StaircaseSeries("runs/lm", ["step 0", "step 10", "step 20"], np.array([0, 10, 20]),
                             {"rho_next": np.array([np.nan, 0.012, 0.5]), "probe_heldout_mse": np.ones(3)})
    assert repr(series) == "StaircaseSeries('runs/lm': 3 states (step 0 … step 20), 2 measures; ρ_next 0.012 → 0.500)"


@pytest.mark.parametrize("plain, html", [
    ("ρ_next at the end", "ρ<sub>next</sub> at the end"),
    ("S^emb(t) and S^sig,(0)", "S<sup>emb</sup>(t) and S<sup>sig,(0)</sup>"),
    ("corr(S(φ^{attn,ℓ}), S(W_O W_V w_α))",
     "corr(S(φ<sup>attn,ℓ</sup>), S(W<sub>O</sub> W<sub>V</sub> w<sub>α</sub>))"),
    ("Pearson ρ_(0) via c_k", "Pearson ρ<sub>(0)</sub> via c<sub>k</sub>"),
    ("val_loss_end, model.init.gamma, a<b & c", "val_loss_end, model.init.gamma, a&lt;b &amp; c"),
])
def test_typeset_writes_scripts_as_html_and_escapes_the_rest(plain, html):
    assert typeset(plain) == html


def test_save_figure_writes_the_png_and_its_vector_copy_byte_identically(run, tmp_path):
    import matplotlib

    from ctxstair.cli.options import DEFAULT_FIGURE_FORMAT as CLI_DEFAULT
    from ctxstair.cli.options import FIGURE_FORMATS as CLI_FORMATS
    from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, FIGURE_FORMATS

    assert (CLI_FORMATS, CLI_DEFAULT) == (FIGURE_FORMATS, DEFAULT_FIGURE_FORMAT)  # the help loads no matplotlib
    settings = dict(matplotlib.rcParams)
    path = tmp_path / "figures" / "staircase.png"
    drawn = {}
    for kind, magic in (("svg", b"<?xml"), ("pdf", b"%PDF")):
        for _ in range(2):
            written = save_figure(run_figures.staircase_figure(run), path, kind)
            assert written == [path, path.with_suffix(f".{kind}")]
            files = {p.name: p.read_bytes() for p in written}
            assert drawn.setdefault(kind, files) == files  # no date, fixed ids: the same bytes each time
        assert files[f"staircase.{kind}"].startswith(magic) and files["staircase.png"].startswith(b"\x89PNG")
        assert sorted(p.name for p in path.parent.iterdir()) == sorted(["staircase.png", f"staircase.{kind}"])
    assert drawn["svg"]["staircase.png"] == drawn["pdf"]["staircase.png"]
    assert b"<dc:date>" not in drawn["svg"]["staircase.svg"] and b"/CreationDate" not in drawn["pdf"]["staircase.pdf"]
    assert save_figure(run_figures.curves_figure(run), path, "png") == [path]
    assert sorted(p.name for p in path.parent.iterdir()) == ["staircase.png"]
    with pytest.raises(InputError, match="unknown figure format 'eps': use one of png, svg, pdf"):
        save_figure(run_figures.curves_figure(run), path, "eps")
    assert dict(matplotlib.rcParams) == settings  # the figures drew in the house style, and it was put back


def test_report_links_the_vector_copy_of_each_figure(run, tmp_path):
    for name in ("staircase", "curves"):
        save_figure(getattr(run_figures, f"{name}_figure")(run), run / "figures" / f"{name}.png",
                    "pdf" if name == "curves" else "png")
    write_report(run, title="t", summary_paragraph="p", key_numbers=[],
                 figures=[("a", "figures/staircase.png"), ("b", "figures/curves.png")])
    text = (run / "report.html").read_text()
    assert '<b>Figure 2.</b> b (vector: <a href="figures/curves.pdf">PDF</a>)' in text
    assert "<b>Figure 1.</b> a</figcaption>" in text


def test_a_json_settings_file_is_shown_with_its_lists_on_wrapped_lines(tmp_path):
    from ctxstair.monitor import SETTINGS_FILE

    settings = {"tokens": list(range(200)), "settings": {"k": 200, "names": ["a", "b"]}}
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    write_report(tmp_path, title="t", summary_paragraph="p", key_numbers=[], figures=[])
    shown = html_text.unescape(re.search(r'<pre style="white-space: pre-wrap">(.*?)</pre>',
                                         (tmp_path / "report.html").read_text(), re.S).group(1))
    assert json.loads(shown) == settings  # the same settings, written compactly
    assert '"tokens": [0, 1, 2,' in shown and len(shown.splitlines()) == 7
