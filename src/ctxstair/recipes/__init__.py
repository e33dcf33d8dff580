"""Named experiments of SPEC §8: ``run_recipe(name, out)``; ``all_recipes()`` lists them.

One recipe, one module, named after it: ``seed-spectra`` is ``seed_spectra.py`` (hyphens become
underscores). Variants of one experiment at another setting stay together in a module named for the
family, whose recipes are ``<family>-<setting>``: ``staircase.py`` (``staircase-add``,
``staircase-mod``), ``attention.py`` (``attention-arith``, ``attention-parity``),
``activation_order.py`` (``activation-order``, ``activation-order-n50``). Code that two recipes share
is in one module named for what it holds, which registers nothing (:data:`SHARED`): ``anchor_lineage``
(``composite`` and ``reason-memory``); a measure that any recipe may read is
:mod:`ctxstair.analysis.measures`. Besides them, ``base`` holds the three kinds of recipe and the
registry, and ``verdicts`` the table of all recipes' verdicts (``python -m ctxstair.recipes.verdicts``).

Every recipe module registers its recipes when imported; importing them all here fills the registry
(listed by name, :func:`all_recipes`), so a new recipe is one new module (docs/design.md, "Where a
new piece goes").
"""

import importlib
import pkgutil

from ctxstair.recipes.base import (
    ComputedRecipe,
    KeyNumber,
    Outcome,
    Paper,
    Recipe,
    TrainedRecipe,
    TrainerRecipe,
    all_recipes,
    get,
    run_recipe,
    write_recipe_report,
)

#: The modules of this package that register no recipe.
SHARED = ("base", "verdicts", "anchor_lineage")

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ComputedRecipe", "KeyNumber", "Outcome", "Paper", "Recipe", "TrainedRecipe", "TrainerRecipe", "all_recipes",
           "get", "run_recipe", "write_recipe_report"]
