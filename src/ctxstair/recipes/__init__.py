"""Named experiments of SPEC §8: ``run_recipe(name, out)``; ``all_recipes()`` lists them.

Every module of this package but ``base`` (the three kinds of recipe and the registry) and
``verdicts`` (the table of all recipes' verdicts, ``python -m ctxstair.recipes.verdicts``) defines
its recipes and registers them when imported; importing them all here fills the registry, so a new
recipe is one new module (docs/design.md, "Where a new piece goes").
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

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "verdicts"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ComputedRecipe", "KeyNumber", "Outcome", "Paper", "Recipe", "TrainedRecipe", "TrainerRecipe", "all_recipes",
           "get", "run_recipe", "write_recipe_report"]
