"""Helpers shared by the recipe tests: run each recipe once per module at reduced settings, and
read what it wrote (summary.json, key numbers, report.html)."""

import base64
import html as html_text
import json
import re
from pathlib import Path

from ctxstair.io import RECORD
from ctxstair.recipes import all_recipes, run_recipe

#: Every registered recipe, by name (a new recipe module's recipes join by registering themselves).
RECIPE_NAMES = [recipe.name for recipe in all_recipes()]


def recipe_runner(root: Path, small: dict, seeds: int | None = None):
    """``get_run(name)``: run recipe ``name`` once into ``root/name`` with ``small[name]`` — an
    overrides dict, or ``(overrides, seeds)`` — and return its output directory on every call."""
    cache = {}

    def get_run(name: str) -> Path:
        if name not in cache:
            overrides, member_seeds = small[name] if isinstance(small[name], tuple) else (small[name], seeds)
            cache[name] = run_recipe(name, root / name, dict(overrides), seeds=member_seeds, progress=False)
        return cache[name]
    return get_run


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def key(out: Path, prefix: str) -> dict:
    """The one key number whose name starts with ``prefix``."""
    rows = [k for k in summary(out)["key_numbers"] if k["name"].startswith(prefix)]
    assert len(rows) == 1, prefix
    return rows[0]


def check_report(out: Path, numbers: list[str] | None = None, n_figures: int | None = None) -> str:
    """report.html embeds exactly the PNGs of figures/ (``n_figures`` of them when given) and states
    the given numbers — by default every key number's measured value from summary.json."""
    html = (out / "report.html").read_text()
    figures = sorted((out / "figures").glob("*.png"))
    assert len(figures) == n_figures if n_figures is not None else figures
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert sorted(base64.b64decode(e) for e in embedded) == sorted(f.read_bytes() for f in figures)
    assert "<img src=\"figures/" not in html and "file://" not in html
    for number in [k["measured"] for k in summary(out)["key_numbers"]] if numbers is None else numbers:
        assert number in html or html_text.escape(number) in html, number
    return html


def run_contents(run: Path) -> dict[str, bytes]:
    """Every file of a run directory by relative path, except ``resources.json`` (peak memory and
    seconds: the one machine-dependent file); a record of files (``ctxstair.sha256``) without its
    line of ``resources.json``."""
    return {p.relative_to(run).as_posix(): _without_resources(p) for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "resources.json"}


def _without_resources(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name != RECORD:
        return data
    return b"".join(line for line in data.splitlines(keepends=True) if not line.endswith(b"  resources.json\n"))
