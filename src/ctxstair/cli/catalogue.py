"""What ``ctxstair recipes`` prints, read from the recipe modules' source without importing them.

Importing a recipe module loads torch and the whole training stack (seconds); the listing needs only
the four literal fields of each ``register(TrainedRecipe(name=..., figure=..., expectation=...,
cpu_time=...))`` call (or of another kind of :data:`RECIPE_KINDS`), so they are read from the syntax
tree. The recipe modules stay the one place that defines a recipe; a test checks that this
catalogue equals ``ctxstair.recipes.all_recipes()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

#: The fields a listing shows, each a string literal (concatenation allowed) in the recipe's call.
FIELDS = ("name", "figure", "cpu_time", "expectation")
#: The kinds of recipe (:mod:`ctxstair.recipes.base`) whose calls define one.
RECIPE_KINDS = ("TrainedRecipe", "ComputedRecipe", "TrainerRecipe")

RECIPE_DIR = Path(__file__).resolve().parents[1] / "recipes"


def recipe_catalogue() -> list[dict[str, str]]:
    """One dict of :data:`FIELDS` per registered recipe, sorted by name (as ``all_recipes()``)."""
    found = []
    for path in sorted(RECIPE_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in RECIPE_KINDS:
                keywords = {k.arg: k.value for k in node.keywords if k.arg in FIELDS}
                try:
                    found.append({field: ast.literal_eval(keywords[field]) for field in FIELDS})
                except (KeyError, ValueError) as err:
                    raise RuntimeError(f"{path.name}, line {node.lineno}: a {node.func.id}(...) needs "
                                       f"{', '.join(FIELDS)} as string literals for `ctxstair recipes` to list it"
                                       ) from err
    return sorted(found, key=lambda info: info["name"])
