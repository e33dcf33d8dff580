"""The report of a run that stopped on a numerical fault: what was written up to
the failure, with the failure stated first.

``failure.json`` (written by the trainer) says why; ``metrics.jsonl`` holds the losses up to the
failing epoch or step, ensemble rows (``member``, ``epoch``, ``loss``) or language-model rows
(``step``, ``loss``). The report shows the loss curve up to the failure and the message.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ctxstair import rundir
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, house_style, save_figure
from ctxstair.report.html import write_report


def write_failure_report(run_dir: str | Path, title: str, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """Write ``figures/loss_until_failure.png`` (with its ``figure_format`` copy) and ``report.html`` of
    a failed run; return the report path."""
    run_dir = Path(run_dir)
    failure = rundir.read_json(run_dir, "failure.json")
    unit = "epoch" if "epoch" in failure else "step"
    save_figure(_loss_figure(run_dir, unit, failure[unit]), run_dir / "figures" / "loss_until_failure.png",
                figure_format)
    return write_report(
        run_dir, title=f"{title} — FAILED: training {failure['reason']} at {unit} {failure[unit]}",
        summary_paragraph=f"This run did not finish. {failure['message']}",
        key_numbers=[{"name": "training", "measured": f"stopped at {unit} {failure[unit]}: non-finite loss",
                      "expected": "a finite loss up to the last " + unit, "met": False}],
        figures=[(f"Training loss up to the failure ({unit} {failure[unit]}, dashed line); non-finite values "
                  "are not drawn.", Path("figures") / "loss_until_failure.png")])


@house_style
def _loss_figure(run_dir: Path, unit: str, failed_at: int) -> plt.Figure:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        if "loss" in row and unit in row:
            series.setdefault(f"member {row['member']}" if "member" in row else "training loss", []).append(
                (row[unit], row["loss"]))
    fig, ax = plt.subplots(figsize=(3.6, 2.6), layout="constrained")
    for label, points in series.items():
        x, y = np.array(points, dtype=float).T
        ax.plot(x, np.where(np.isfinite(y), y, np.nan), lw=1.2, label=label)
    ax.axvline(failed_at, color="#b22222", ls="--", lw=1.0, label=f"failure ({unit} {failed_at})")
    finite = [v for points in series.values() for _, v in points if np.isfinite(v)]
    if finite and min(finite) > 0:
        ax.set_yscale("log")
    ax.set_xlabel(unit)
    ax.set_ylabel("training loss (cross-entropy, nats" + (", log scale)" if ax.get_yscale() == "log" else ")"))
    ax.set_title("Training loss until the run diverged")
    if len(series) <= 10:
        ax.legend()
    return fig
