"""Named experiments of SPEC §8: ``run_recipe(name, out)``; ``all_recipes()`` lists them."""

from ctxstair.recipes import activation_order, attention, geometry, lm, staircase, theory  # noqa: F401  (registers the recipes)
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, all_recipes, get, run_recipe, write_recipe_report

__all__ = ["KeyNumber", "Outcome", "Recipe", "all_recipes", "get", "run_recipe", "write_recipe_report"]
