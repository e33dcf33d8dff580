"""The self-contained HTML report of a run directory (``report.html``, ``docs/run-directory.md``).

One file a reader can open anywhere or mail around: every figure is inline as a base64 PNG, the
key numbers are a table of measured vs. expected values (SPEC §8 "what must be seen"), and the
resolved configuration and the ensemble members are shown as stored in the run directory.

The report is a pure function of its inputs and the run directory's files: it carries no
generation time, no absolute paths and not even the directory's name (a run is assembled under a
temporary name and renamed), so rebuilding it from the same run directory gives identical bytes.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
from html import escape
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.monitor import SETTINGS_FILE
from ctxstair.numerics import describe
from ctxstair.report.typeset import typeset

__all__ = ["write_report"]

_MET = {True: ("✓", "met-yes", "met"), False: ("✗", "met-no", "not met"), None: ("—", "met-none", "not judged")}

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1a1a1a;
       max-width: 1100px; margin: 2em auto; padding: 0 1.5em; line-height: 1.5; }
h1 { font-size: 1.6em; margin-bottom: 0.3em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.summary { font-size: 1.05em; }
p.provenance { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.95em; }
th, td { border: 1px solid #d0d0d0; padding: 0.35em 0.8em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.met { text-align: center; font-weight: bold; }
td.met-yes { color: #0072B2; }
td.met-no { color: #D55E00; }
td.met-none { color: #777; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.92em; color: #333; margin-top: 0.4em; }
pre { background: #f7f7f7; border: 1px solid #e2e2e2; padding: 0.8em; overflow-x: auto; font-size: 0.88em; }
"""


def write_report(
    run_dir: str | os.PathLike,
    *,
    title: str,
    summary_paragraph: str,
    key_numbers: list[dict],
    figures: list[tuple[str, str | os.PathLike]],
) -> Path:
    """Write ``run_dir/report.html`` atomically and return its path (run-directory contract; SPEC §8).

    Args:
        run_dir: the run directory; ``config.yaml`` is shown verbatim in a ``<pre>`` block and
            ``members.csv``, if present, as a table.
        title: page title and heading (plain text; escaped, and its heading typeset:
            :func:`ctxstair.report.typeset.typeset`, ``ρ_next`` → ρ<sub>next</sub>).
        summary_paragraph: what the run shows, one paragraph of plain text (escaped and typeset; so are
            the key numbers' names and expectations and the figure captions).
        key_numbers: rows ``{"name": str, "measured": str, "expected": str, "met": True | False | None}``,
            rendered as a table quantity / measured / expected / met with ✓ / ✗ / —.
        figures: ``(caption, png_path)`` pairs in display order; a relative path is taken relative to
            ``run_dir`` (e.g. ``figures/staircase.png``). Each PNG is embedded as base64; a vector copy
            beside it (``figures/staircase.svg`` or ``.pdf``, :func:`~ctxstair.report.figures.save_figure`)
            is linked from its caption.

    Returns:
        Path of ``report.html``.

    Raises:
        InputError: a malformed key-number row, or a figure file that is missing or not a PNG.
    """
    run_dir = Path(run_dir)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(str(title))}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{typeset(str(title))}</h1>",
        f'<p class="summary">{typeset(str(summary_paragraph))}</p>',
        *_explorer_links(run_dir),
        "<h2>Key numbers</h2>",
        _key_number_table(key_numbers),
        *_provenance(run_dir),
        "<h2>Figures</h2>",
        *(_figure(run_dir, i, caption, path) for i, (caption, path) in enumerate(figures, 1)),
        "<h2>Configuration</h2>",
        _config(run_dir),
    ]
    members = _members_table(run_dir)
    if members:
        parts += ["<h2>Ensemble members</h2>", members]
    parts += ["</body>", "</html>", ""]
    path = run_dir / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


def _explorer_links(run_dir: Path) -> list[str]:
    """A line linking the interactive explorer page(s) of the directory: one per run with snapshots
    (the directory itself or each part), or the sweep's page (:mod:`ctxstair.report.explorer`)."""
    from ctxstair.report.explorer import EXPLORER, explorer_targets

    if rundir.directory_kind(run_dir) == rundir.SWEEP:
        pages = [EXPLORER]
    else:
        pages = [(target / EXPLORER).relative_to(run_dir).as_posix() for target in explorer_targets(run_dir)]
    if not pages:
        return []
    links = ", ".join(f'<a href="{escape(page)}">{escape(page)}</a>' for page in pages)
    return [f'<p class="explore">Interactive explorer, to scrub through the snapshots: {links} (written by '
            "<code>ctxstair run</code>, <code>ctxstair lm train</code> and <code>ctxstair explore DIR</code>).</p>"]


def _provenance(run_dir: Path) -> list[str]:
    """One line per distinct floating-point set-up recorded in the ``resources.json`` of the run
    directory and of its parts (mode, threads, BLAS, CPU code path, CPU; :mod:`ctxstair.numerics`)."""
    lines = []
    for path in [run_dir / "resources.json", *sorted(run_dir.glob("*/resources.json"))]:
        if path.is_file():
            record = json.loads(path.read_text(encoding="utf-8")).get("numerics")
            line = f'<p class="provenance">{escape(describe(record))}</p>' if record else None
            if line and line not in lines:
                lines.append(line)
    return lines


def _key_number_table(rows: list[dict]) -> str:
    lines = ["<table>", "<tr><th>quantity</th><th>measured</th><th>expected</th><th>met</th></tr>"]
    for row in rows:
        if not isinstance(row, dict) or not {"name", "measured", "expected", "met"} <= row.keys():
            raise InputError(f"each key number needs the keys name, measured, expected, met; got {row!r}")
        met = bool(row["met"]) if isinstance(row["met"], np.bool_) else row["met"]
        if not isinstance(met, (bool, type(None))):
            raise InputError(f"key number {row['name']!r}: met must be True, False or None, got {row['met']!r}")
        mark, css, words = _MET[met]
        lines.append(
            f"<tr><td>{typeset(str(row['name']))}</td><td>{escape(str(row['measured']))}</td>"
            f"<td>{typeset(str(row['expected']))}</td>"
            f'<td class="met {css}" title="{words}">{mark}</td></tr>'
        )
    lines.append("</table>")
    return "\n".join(lines)


def _figure(run_dir: Path, number: int, caption: str, path: str | os.PathLike) -> str:
    path = Path(path)
    full = path if path.is_absolute() else run_dir / path
    try:
        data = full.read_bytes()
    except FileNotFoundError:
        raise InputError(f"figure {full} not found") from None
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise InputError(f"figure {full} is not a PNG file")
    encoded = base64.b64encode(data).decode("ascii")
    # The vector copy save_figure wrote beside the PNG (--figure-format), linked for print.
    vectors = [(full.with_suffix(f".{kind}"), path.with_suffix(f".{kind}")) for kind in ("svg", "pdf")]
    links = " ".join(f'<a href="{escape(link.as_posix())}">{link.suffix[1:].upper()}</a>'
                     for copy, link in vectors if copy.is_file())
    return (
        f'<figure id="figure-{number}">\n<img src="data:image/png;base64,{encoded}" alt="{escape(str(caption))}">\n'
        f"<figcaption><b>Figure {number}.</b> {typeset(str(caption))}{f' (vector: {links})' if links else ''}"
        "</figcaption>\n</figure>"
    )


def _config(run_dir: Path) -> str:
    """The run's config.yaml; for a recipe directory, recipe.json and each part's config.yaml; for
    a sweep, sweep.json; for a Trainer run measured by ctxstair.monitor, the monitor's settings."""
    for name in ("config.yaml", "sweep.json", SETTINGS_FILE):
        path = run_dir / name
        if path.is_file():
            return _shown(path)
    recipe = run_dir / "recipe.json"
    if not recipe.is_file():
        return "<p><em>config.yaml is missing from this run directory.</em></p>"
    blocks = [_shown(recipe)]
    for part in json.loads(recipe.read_text(encoding="utf-8")).get("parts", []):
        part_config = run_dir / part / "config.yaml"
        if part_config.is_file():
            blocks.append(f"<h3>{escape(part)}</h3>\n<pre>{escape(part_config.read_text(encoding='utf-8').rstrip())}</pre>")
    return "\n".join(blocks)


def _shown(path: Path) -> str:
    """A settings file as a ``<pre>`` block: verbatim, except that a JSON file's lists of numbers or
    strings (the tracked tokens, the log points) are written on wrapped lines rather than one item a
    line, which would make the page thousands of lines long."""
    text = path.read_text(encoding="utf-8").rstrip()
    if path.suffix != ".json":
        return f"<pre>{escape(text)}</pre>"
    flat = re.sub(r"\[\s*([^\[\]{}]*?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    return f'<pre style="white-space: pre-wrap">{escape(flat)}</pre>'


def _members_table(run_dir: Path) -> str:
    path = run_dir / "members.csv"
    if not path.is_file():
        return ""
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    if not rows:
        return ""
    lines = ["<table>", "<tr>" + "".join(f"<th>{escape(cell)}</th>" for cell in rows[0]) + "</tr>"]
    lines += ["<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows[1:] if row]
    lines.append("</table>")
    return "\n".join(lines)
