"""The names of a recipe's numbers, checked before anything trains.

A recipe's ``measure`` gives its numbers as dicts, which ``judge``, ``describe``, ``draw``,
``summary`` and ``member_rows`` read by name (``med["corr_weighted_peak"]``); a misspelt name would
fail only after training, or, read with ``in`` or ``.get``, silently drop a key number. So every name
a recipe module reads from a dict must be one that it writes — a ``dict(...)`` or ``.update(...)``
keyword, a key of a ``{...}`` literal, an assigned ``numbers["..."]`` — in itself, in a module it
imports from (``analysis.measures``, ``recipes.anchor_lineage``, ...) or in a recipe module that
imports it; or one of :data:`FROM_FILES`. Names are therefore written out, never built with an
f-string (docs/design.md, "Where a new piece goes").
"""

import ast
from pathlib import Path

from repo_paths import SRC

import ctxstair.recipes as recipes_package

RECIPES = SRC / "ctxstair" / "recipes"
#: Names that recipes read from the files and functions they measure rather than from their own
#: numbers: snapshot arrays, task metadata (``Dataset.meta``, parameters), table columns, the
#: results of ``ctxstair.alignment``'s comparisons, and the part name of a single-run recipe.
FROM_FILES = frozenset({
    "", "W_E", "W_U", "X", "y",
    "eval", "groups", "anchors", "heldout_pair", "heldout_reasoning", "key_position", "y_inferential", "y_symmetric",
    "is_reasoning", "memory_anchors", "reasoning_anchors", "label_law", "n_context",
    "mean_square", "order", "signature", "relative_residual", "measure", "part", "settings", "null_permutations",
    "pearson", "kl", "jsd",
})


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def written(tree: ast.AST) -> set[str]:
    """The names a module writes into dicts."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load) and _is_name(node.slice):
            names.add(node.slice.value)
        elif isinstance(node, ast.Dict):
            names |= {key.value for key in node.keys if key is not None and _is_name(key)}
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "dict"
                                             or getattr(node.func, "attr", None) == "update"):
            names |= {keyword.arg for keyword in node.keywords if keyword.arg}
    return names


def read(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, line) of every name a module reads from a dict: ``x["name"]``, ``"name" in x``, ``x.get("name")``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_name(node.slice):
            names.append((node.slice.value, node.lineno))
        elif (isinstance(node, ast.Compare) and _is_name(node.left)
              and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)):
            names.append((node.left.value, node.lineno))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args
              and _is_name(node.args[0])):
            names.append((node.args[0].value, node.lineno))
    return names


def _source(module: str) -> Path | None:
    """The file of a first-party module (or package), None for any other."""
    if not module.startswith("ctxstair"):
        return None
    path = SRC / module.replace(".", "/")
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"


def imports(tree: ast.AST) -> set[Path]:
    """The files of the first-party modules a module imports from (``from ctxstair.x import y``: ``x``, or
    ``x/y.py`` when ``y`` is a module)."""
    files = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _source(node.module):
            for alias in node.names:
                inner = _source(f"{node.module}.{alias.name}")
                files.add(inner if inner.is_file() else _source(node.module))
    return files


def unknown_names(modules: dict[Path, ast.AST]) -> list[str]:
    """'file:line name' of every name a module of ``modules`` (path -> syntax tree) reads that none of
    the modules it takes numbers from writes (:func:`written`) and that is not in :data:`FROM_FILES`."""
    found = []
    for path, tree in modules.items():
        sources = {path} | imports(tree) | {other for other, t in modules.items() if path in imports(t)}
        known = FROM_FILES.union(*(written(modules.get(s) or ast.parse(s.read_text())) for s in sources))
        found += [f"{path.name}:{line} {name!r}" for name, line in read(tree) if name not in known]
    return found


def test_every_name_a_recipe_reads_is_one_it_writes():
    skip = {"base", "verdicts"}
    modules = {path: ast.parse(path.read_text()) for path in sorted(RECIPES.glob("*.py"))
               if path.stem not in skip and path.stem != "__init__"}
    assert set(skip) <= set(recipes_package.SHARED)
    assert unknown_names(modules) == []


def test_the_name_check_can_fail(tmp_path):
    good = tmp_path / "good.py"
    source = ('def measure():\n    return dict(corr_peak=1.0, per={"probe_end": 0.5})\n\n\n'
              'def judge(n):\n    return n["corr_peak"], n["per"]["probe_end"], "per" in n\n')
    assert unknown_names({good: ast.parse(source)}) == []
    typo = source.replace('n["corr_peak"]', 'n["corr_paek"]').replace('"per" in n', '"pre" in n')
    assert unknown_names({good: ast.parse(typo)}) == ["good.py:6 'corr_paek'", "good.py:6 'pre'"]
    built = source.replace("dict(corr_peak=1.0,", 'dict(**{f"corr_{w}": 1.0 for w in ("peak",)},')
    assert unknown_names({good: ast.parse(built)}) == ["good.py:6 'corr_peak'"]
