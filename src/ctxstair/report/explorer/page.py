"""One self-contained HTML file per explorer: plotly.js, the page's own script and its data inline.

The page opens from disk without a network: plotly.js is the copy bundled in the ``plotly``
package (about 4.8 MB, most of the file), ``explorer.js`` draws the three kinds of page from the
JSON payload, and nothing is fetched. Like ``report.html``, the page carries no time stamp and no
absolute path, so rebuilding it from the same files gives the same bytes.
"""

from __future__ import annotations

import json
from html import escape
from importlib.resources import files
from pathlib import Path

from ctxstair.io import atomic_write_text


def plotly_js() -> str:
    """The minified plotly.js that the installed ``plotly`` package bundles."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def write_page(out: str | Path, payload: dict) -> Path:
    """Write the explorer page for ``payload`` (``kind`` "run", "lm" or "sweep", ``title``; see the
    ``*_data`` modules) to ``out`` atomically; return its path."""
    assets = files("ctxstair.report.explorer")
    # "</" cannot appear inside a <script> element; "<\/" is the same JSON string.
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    html = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(payload['title'])}</title>\n"
            f"<style>\n{assets.joinpath('explorer.css').read_text(encoding='utf-8')}</style>\n"
            f"<script>{plotly_js()}</script>\n</head>\n<body>\n<main id=\"app\"></main>\n"
            f'<script type="application/json" id="explorer-data">{data}</script>\n'
            f"<script>\n{assets.joinpath('explorer.js').read_text(encoding='utf-8')}</script>\n</body>\n</html>\n")
    out = Path(out)
    atomic_write_text(out, html)
    return out
