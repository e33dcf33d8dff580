"""Figures of the LM staircase (SPEC §6.4, §7, §8 F7), one module for every output that holds its
numbers: an LM run, an ``analyze-model`` folder and a Trainer output measured live by the monitor,
all read into a :class:`~ctxstair.report.lm_series.StaircaseSeries` (:func:`~ctxstair.report.lm_series.read_series`).

Each panel function draws one measure on an Axes; the figures compose them:

* :func:`rho_next_figure`, :func:`probe_figure`, :func:`attention_path_figure`,
  :func:`path_shares_figure` — one measure over training each (an LM run's report);
* :func:`staircase_figure` — every measure on one page (a Trainer run's report);
* :func:`analysis_figure` — an ``analyze-model`` folder: the pair scatter of ``S^emb`` against
  ``S^next`` of the last checkpoint beside the curves over its checkpoints, or, for one model, its
  attention paths per layer and path shares;
* :func:`loss_figure` — the losses of an LM run trained without analysis.

Every function takes the output's directory or a series already read.

    from ctxstair.report.lm_figures import rho_next_figure
    rho_next_figure("runs/lm-staircase").savefig("rho.png")
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ctxstair import rundir
from ctxstair.alignment.similarity import upper_triangle
from ctxstair.measure.schema import (
    ATTENTION_CORR,
    ATTENTION_NULL,
    PATH_SHARE,
    PROBE,
    RHO_NEXT,
    RHO_NEXT_SPEARMAN,
    SHUFFLED,
)
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, check_figure_format, house_style, save_figure
from ctxstair.report.lm_series import ANALYSIS_FILE, StaircaseSeries, read_series, run_losses
from ctxstair.report.run_figures import PALETTE

_STEP_LABEL = "training step (symlog axis)"
#: Colour of the direct, attention and MLP paths in the path-share panels.
_PATH_COLOURS = {"embed": "tab:green", "attn": "tab:blue", "mlp": "tab:orange"}
SIMILARITY_FILE = "similarity.npz"
#: Where a legend of many or long entries goes: under its panel, which the curves fill.
_BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.3)}
#: Axis labels, typeset with matplotlib's mathtext (no LaTeX needed).
RHO_NEXT_LABEL = "\n".join((r"$\rho_{\mathrm{next}} = \mathrm{corr}(S^{\mathrm{emb}}, S^{\mathrm{next}})$",
                            r"over token pairs of $T$"))
ATTENTION_LABEL = r"$\mathrm{corr}(S(\varphi^{\mathrm{attn},\ell}), S(W_O W_V w))$"

Source = str | os.PathLike | StaircaseSeries


def _series(source: Source) -> StaircaseSeries:
    return source if isinstance(source, StaircaseSeries) else read_series(source)


def step_axis(ax: plt.Axes) -> None:
    """Training steps on a symlog x axis (linear below 10, so step 0 shows), labelled, with a grid; the
    limits leave room around step 0 and the last step, so that no marker is cut by the frame."""
    ax.set_xscale("symlog", linthresh=10)
    last = ax.dataLim.x1 if np.isfinite(ax.dataLim.x1) else 10.0
    ax.set_xlim(-1, last * 1.3 if last > 10 else last + 1)
    ax.set_xlabel(_STEP_LABEL)
    ax.grid(True, alpha=0.3)


def _state_axis(ax: plt.Axes, series: StaircaseSeries) -> None:
    """The x axis of a series: training steps, or the states' names when some have no step."""
    if series.steps is not None:
        step_axis(ax)
    else:
        ax.set_xticks(range(len(series.names)), series.names, rotation=60)
        ax.set_xlabel("checkpoint")
        ax.grid(True, alpha=0.3)


def _path_name(part: str) -> str:
    """``attn.3`` -> ``attention, layer 3``; ``mlp.0`` -> ``MLP, layer 0``; ``unembed`` (a tied unembedding)
    -> ``unembedding (tied)``; other names as they are."""
    kind, _, layer = part.partition(".")
    if not layer:
        return "unembedding (tied)" if part == "unembed" else part
    return f"{dict(attn='attention', mlp='MLP').get(kind, kind)}, layer {layer}"


def _legend(ax: plt.Axes, **options) -> None:
    """A legend of what the panel drew, when it drew anything labelled."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)


def _legend_on_top(ax: plt.Axes) -> None:
    """A legend at the top of the panel, over room made for it above the data (linear y axis), so that it
    never covers a curve, wherever the curves run."""
    entries = len(ax.get_legend_handles_labels()[0])
    if not entries:
        return
    low, high = ax.get_ylim()
    share = 0.1 * entries + 0.04  # of the axes' height: the legend's rows at this figure size
    ax.set_ylim(low, high + (high - low) * share / (1 - share))
    ax.legend(loc="upper left", ncol=1)


def _not_measured(ax: plt.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not measured", ha="center", va="center", transform=ax.transAxes, color="grey")


# ---------------------------------------------------------------------------------------------- panels

def flagged_markers(ax: plt.Axes, series: StaircaseSeries, measures: list[tuple[str, str]]) -> None:
    """Hollow markers at the flagged states (:attr:`StaircaseSeries.flagged`) of each (measure, colour),
    with one legend entry saying whether they are in the curve."""
    # Short, so that the legend fits a panel a column wide; the figure's title says why each is flagged.
    label = "flagged: in the curve" if series.keep_flagged else "flagged: left out of the curve"
    for measure, colour in measures:
        at, values = series.flagged_points(measure)
        if at.size:
            ax.scatter(at, values, s=36, facecolors="none", edgecolors=colour, linewidths=1.2, zorder=3, label=label)
            label = None


def rho_next_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """ρ_next (Pearson and Spearman) over the states (SPEC §7); flagged states as hollow markers."""
    drawn = []
    for colour, (measure, label) in zip(PALETTE, ((RHO_NEXT, "Pearson"), (RHO_NEXT_SPEARMAN, "Spearman"))):
        if series.has(measure):
            ax.plot(*series.measured(measure), color=colour, marker="o",
                    label=rf"$\rho_{{\mathrm{{next}}}}$ ({label})")
            drawn.append((measure, colour))
    flagged_markers(ax, series, drawn)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_ylabel(RHO_NEXT_LABEL)
    _state_axis(ax, series)
    _legend_on_top(ax)


def loss_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """The training loss (per logged step) and the held-out loss (at the snapshots), in nats."""
    if series.loss is not None:
        ax.plot(*series.loss, color="black", linewidth=0.8, alpha=0.6, label="training loss")
    if series.val_loss is not None:
        ax.plot(*series.val_loss, color=PALETTE[1], marker="o", label="held-out loss")
    if series.loss is None and series.val_loss is None:
        _not_measured(ax, "the loss")
    ax.set_ylabel("next-token loss (nats)")
    step_axis(ax)
    _legend(ax)


def probe_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """The prefix probe's held-out MSE against the same probe on shuffled signatures (SPEC §7); flagged
    states as hollow markers."""
    if not series.has(PROBE):
        _not_measured(ax, "the prefix probe")
    drawn = []
    for colour, (measure, label) in zip(PALETTE, ((PROBE, "prefix probe, held-out tokens"),
                                                  (SHUFFLED, "control: signatures shuffled"))):
        if series.has(measure):
            ax.plot(*series.measured(measure), color=colour, marker="o", label=label)
            drawn.append((measure, colour))
    flagged_markers(ax, series, drawn)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("MSE of cosine similarities\n(pairs of held-out tokens)")
    _state_axis(ax, series)
    _legend_on_top(ax)


def attention_lines_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """The attention-path correlation of each layer over the states (solid) with its permutation null
    (dashed) (SPEC §7)."""
    layers = series.layers()
    if not layers:
        _not_measured(ax, "attention paths")
    for layer, colour in zip(layers, plt.get_cmap("tab10").colors):
        ax.plot(*series.measured(ATTENTION_CORR, layer), color=colour, marker="o", label=f"layer {layer}")
        ax.plot(*series.measured(ATTENTION_NULL, layer), color=colour, linestyle="--", linewidth=0.9)
    if layers:  # one entry for every null, so that the legend grows by one line per layer, not two
        ax.plot([], [], color="grey", linestyle="--", linewidth=0.9, label="null: largest |r| of the permutations")
    ax.set_ylabel(ATTENTION_LABEL)
    _state_axis(ax, series)
    _legend(ax, ncol=2 if len(layers) > 4 else 1)


def path_shares_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """Each residual path's share of the embeddings' update over the states (SPEC §6.4)."""
    paths = series.paths()
    if not paths:
        _not_measured(ax, "path shares")
    for i, part in enumerate(paths):
        ax.plot(*series.measured(PATH_SHARE, part), color=plt.get_cmap("tab10")(i), marker="o",
                markersize=2, linestyle="-" if part == "embed" else ("--" if part.startswith("attn") else ":"),
                label="direct (embedding)" if part == "embed" else _path_name(part))
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("share of the summed path norms")
    _state_axis(ax, series)
    _legend(ax, ncol=2, **_BELOW)


def attention_heatmap_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """Heatmap over (layer, state) of the attention-path correlation, a star where |r| is above its
    permutation null (SPEC §7); columns are the states in order, labelled by step or name, flagged
    states' columns hatched (the heatmap keeps every state, flagged or not)."""
    layers = series.layers()
    grid = np.stack([series.values[f"{ATTENTION_CORR}/{layer}"] for layer in layers])  # (layers, states)
    null = np.stack([series.values[f"{ATTENTION_NULL}/{layer}"] for layer in layers])
    image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest", origin="lower")
    labels = [str(s) for s in series.steps] if series.steps is not None else series.names
    ticks = np.unique(np.linspace(0, len(labels) - 1, min(len(labels), 12)).round().astype(int))
    ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=60 if series.steps is None else 0)
    ax.set_yticks(range(len(layers)), layers)
    layer, state = np.nonzero(np.abs(grid) > null)
    ax.scatter(state, layer, marker="*", s=14, color="black", label="|r| above the permutation null")
    label = "flagged (hatched)"
    for column in np.flatnonzero([name in series.flagged for name in series.names]):  # every column is drawn
        ax.add_patch(Rectangle((column - 0.5, -0.5), 1, len(layers), fill=False, hatch="///", edgecolor="0.35",
                               linewidth=0.8, label=label))
        label = None
    ax.set_xlabel("training step (snapshots in order)" if series.steps is not None else "checkpoint")
    ax.set_ylabel(r"layer $\ell$")
    # Below the heatmap, so that a heatmap wider than one column takes no width from the panels above it.
    ax.figure.colorbar(image, ax=ax, label=ATTENTION_LABEL, location="bottom", aspect=40, shrink=0.8)
    if layer.size or series.flagged:
        ax.legend(loc="upper right")


# ---------------------------------------------------------------------------------------------- figures

@house_style
def rho_next_figure(source: Source) -> plt.Figure:
    """Top: ρ_next (Pearson and Spearman) over steps; bottom: the losses."""
    series = _series(source)
    fig, (ax, ax_loss) = plt.subplots(2, 1, figsize=(3.6, 4.0), sharex=True, height_ratios=(3, 2), layout="constrained")
    rho_next_panel(ax, series)
    loss_panel(ax_loss, series)
    ax.set_xlabel("")  # the shared axis is labelled once, under the loss
    fig.suptitle(r"Embeddings vs next-token signatures over training: $\rho_{\mathrm{next}}$ and the loss")
    return fig


@house_style
def loss_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Training loss per step and held-out loss at the snapshots (nats) of an LM run directory (one
    trained without analysis too)."""
    loss, val_loss = run_losses(run_dir)
    fig, ax = plt.subplots(figsize=(3.6, 2.4), layout="constrained")
    loss_panel(ax, StaircaseSeries(str(run_dir), [], None, {}, loss, val_loss))
    fig.suptitle("Next-token loss over training")
    return fig


@house_style
def probe_figure(source: Source) -> plt.Figure:
    """Held-out MSE of the first-order prefix probe and of the same probe on shuffled signatures."""
    fig, ax = plt.subplots(figsize=(3.6, 2.8), layout="constrained")
    probe_panel(ax, _series(source))
    fig.suptitle("Prefix signatures predict the embedding geometry\nof held-out tokens")
    return fig


@house_style
def attention_path_figure(source: Source) -> plt.Figure:
    """Heatmap over (layer, snapshot) of the correlation between the attention-path signature and
    ``W_O W_V w_α`` (SPEC §7)."""
    series = _series(source)
    fig, ax = plt.subplots(figsize=(3.6, 1.6 + 0.3 * len(series.layers())), layout="constrained")
    attention_heatmap_panel(ax, series)
    fig.suptitle(r"Attention-path signature vs $W_O W_V w_\alpha$, per layer and snapshot")
    return fig


@house_style
def path_shares_figure(source: Source) -> plt.Figure:
    """Share of each residual path (direct, attention ℓ, MLP ℓ) in the norm of the embeddings'
    update over training (SPEC §6.4)."""
    fig, ax = plt.subplots(figsize=(3.6, 2.8), layout="constrained")
    path_shares_panel(ax, _series(source))
    fig.suptitle("Which path moves the embeddings:\ndirect, attention and MLP paths")
    return fig


@house_style
def staircase_figure(source: Source, title: str = "The Context Staircase measured live (SPEC §6.4, §7)") -> plt.Figure:
    """Up to six panels over training steps (SPEC §6.4, §7): ρ_next; the losses; the prefix probe against
    its control; the attention-path correlation per layer with its null; the path shares; the seconds
    each live measurement took. A measure the output does not hold gets no panel (the monitor's probe is
    off by default), and the grid, two panels a row, holds exactly the panels drawn."""
    series = _series(source)
    panels = [(rho_next_panel, "embeddings vs next-token signatures")]
    for drawn, panel, label in ((series.loss is not None or series.val_loss is not None, loss_panel, "next-token loss"),
                                (series.has(PROBE), probe_panel, "first-order prefix probe vs its control"),
                                (bool(series.layers()), attention_lines_panel, "attention-path signature per layer"),
                                (bool(series.paths()), path_shares_panel, "paths of the embedding update"),
                                (series.seconds is not None, _cost_panel, "cost of each measurement")):
        if drawn:
            panels.append((panel, label))
    rows = -(-len(panels) // 2)
    fig, axes = plt.subplots(rows, 2, figsize=(7.2, 2.5 * rows + 0.4), squeeze=False, layout="constrained")
    for ax, (panel, label), letter in zip(axes.flat, panels, "abcdef"):
        panel(ax, series)
        ax.set_title(f"({letter}) {label}")
    if len(panels) % 2:
        fig.delaxes(axes.flat[-1])  # an odd count: the last row holds one panel
    fig.suptitle(title)
    return fig


def _cost_panel(ax: plt.Axes, series: StaircaseSeries) -> None:
    """The seconds each live measurement took, over the steps."""
    keep = ~np.isnan(series.seconds)
    ax.plot(series.steps[keep], series.seconds[keep], color=PALETTE[0], marker="o", label="one measurement")
    ax.set_ylabel("wall time (s)")
    step_axis(ax)
    _legend(ax)


@house_style
def analysis_figure(folder: str | os.PathLike) -> plt.Figure:
    """The figure of an ``analyze-model`` folder: the pair scatter of the last checkpoint (S^emb against
    S^next, from ``similarity.npz``) next to ρ_next and the probe (when measured) over the checkpoints
    and, with the path measures, the attention-path correlation (a heatmap over layer and checkpoint)
    and the path shares; for a single model, its attention paths per layer and its path shares
    instead. The grid holds exactly the panels drawn."""
    series = read_series(folder)
    several, paths = len(series.names) > 1, bool(series.layers())
    over_checkpoints = ["rho"] + (["probe"] if series.has(PROBE) else [])
    top = ["pairs"] + (over_checkpoints if several else ["layers", "shares"] if paths else [])
    mosaic = [top] + ([["heatmap"] * (len(top) - 1) + ["shares"]] if several and paths else [])
    fig, axes = plt.subplot_mosaic(mosaic, figsize=(2.4 * len(top) if len(top) > 1 else 3.4, 2.7 * len(mosaic) + 0.4),
                                   layout="constrained")
    _pairs_panel(axes["pairs"], folder, series)
    if several:
        rho_next_panel(axes["rho"], series)
        axes["rho"].set_title(r"$\rho_{\mathrm{next}}$ over the checkpoints")
        if "probe" in axes:
            probe_panel(axes["probe"], series)
            axes["probe"].set_title("first-order probe (held-out tokens)")
        if paths:
            attention_heatmap_panel(axes["heatmap"], series)
            path_shares_panel(axes["shares"], series)
            axes["heatmap"].set_title("attention-path correlation by layer and checkpoint")
            axes["shares"].set_title("path shares over the checkpoints")
    elif paths:
        _layer_panels(axes["layers"], axes["shares"], series)
    title = f"{series.source}: input embeddings against the corpus's next-token signatures"
    if series.flagged:
        title += "\nflagged, " + ("kept in" if series.keep_flagged else "left out of") + " the curves: " + "; ".join(
            f"{name} ({'; '.join(why)})" for name, why in series.flagged.items())
    fig.suptitle(title, wrap=True)
    return fig


def _pairs_panel(ax: plt.Axes, folder: str | os.PathLike, series: StaircaseSeries) -> None:
    """The pair scatter of the last checkpoint: S^emb against S^next over the token pairs of T."""
    similarity = rundir.read_npz(folder, SIMILARITY_FILE, keys=("next", "embedding"))
    S_next, S_emb = similarity["next"], similarity["embedding"]
    ax.scatter(upper_triangle(S_next), upper_triangle(S_emb), s=3, alpha=0.3, edgecolors="none")
    ax.set_xlabel(r"$S^{\mathrm{next}}$ (next-token signatures)")
    ax.set_ylabel(r"$S^{\mathrm{emb}}$ (input embeddings)")
    flag = " (flagged)" if series.names[-1] in series.flagged else ""
    ax.set_title(f"{series.names[-1]}{flag}: " + rf"$\rho_{{\mathrm{{next}}}}$ = {series.values[RHO_NEXT][-1]:.3f}"
                 f"\n{S_next.shape[0]} tokens, a point per pair")


def _layer_panels(ax_corr: plt.Axes, ax_shares: plt.Axes, series: StaircaseSeries) -> None:
    """One model's attention-path correlation per layer with its null, and its path shares per layer."""
    layers = series.layers()
    depth = np.arange(len(layers))
    corr = [series.values[f"{ATTENTION_CORR}/{layer}"][-1] for layer in layers]
    null = [series.values[f"{ATTENTION_NULL}/{layer}"][-1] for layer in layers]
    ax_corr.plot(depth, corr, marker="o", label=r"correlation $r$")
    ax_corr.plot(depth, null, ls="--", color="grey", label="null: largest |r| of the token permutations")
    ax_corr.axhline(0, color="black", lw=0.5)
    ax_corr.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_corr.set_xlabel(r"layer $\ell$")
    ax_corr.set_ylabel(ATTENTION_LABEL)
    ax_corr.set_title("attention-path correlation per layer")
    ax_corr.legend(**_BELOW)
    shares = {part: series.values[f"{PATH_SHARE}/{part}"][-1] for part in series.paths()}
    for kind, label in (("attn", r"attention path attn.$\ell$"), ("mlp", r"MLP path mlp.$\ell$")):
        ax_shares.plot(depth, [shares.get(f"{kind}.{layer}", np.nan) for layer in layers], marker="o",
                       label=label, color=_PATH_COLOURS[kind])
    ax_shares.axhline(shares.get("embed", np.nan), ls="--", color=_PATH_COLOURS["embed"],
                      label=f"direct path embed ({shares.get('embed', np.nan):.3f})")
    if "unembed" in shares:  # tied: the same matrix updated from the output side
        ax_shares.axhline(shares["unembed"], ls=":", color="black",
                          label=f"unembedding path, tied ({shares['unembed']:.3f})")
    ax_shares.set_ylim(bottom=0)
    ax_shares.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_shares.set_xlabel(r"layer $\ell$")
    ax_shares.set_ylabel("share of the summed path norms over T")
    ax_shares.set_title("path shares of the embedding update")
    ax_shares.legend(**_BELOW)


def write_analysis_figure(folder: str | os.PathLike, figure_format: str = DEFAULT_FIGURE_FORMAT) -> list[Path]:
    """Draw :func:`analysis_figure` into ``folder/analysis.png`` and its ``figure_format`` copy
    (:func:`~ctxstair.report.figures.save_figure`, atomically) and record the format in
    ``analysis.json`` as ``figure_format``; return the files written."""
    folder = Path(folder)
    check_figure_format(figure_format)
    written = save_figure(analysis_figure(folder), folder / "analysis.png", figure_format)
    result = rundir.read_json(folder, ANALYSIS_FILE)
    rundir.write_json(folder, ANALYSIS_FILE, {**result, "figure_format": figure_format})
    return written

