"""Named experiments of SPEC §8: ``run_recipe(name, out)``; ``all_recipes()`` lists them."""

# Importing a recipe module registers its recipes; one module per line.
from ctxstair.recipes import activation_order  # noqa: F401
from ctxstair.recipes import attention  # noqa: F401
from ctxstair.recipes import geometry  # noqa: F401
from ctxstair.recipes import lm  # noqa: F401
from ctxstair.recipes import staircase  # noqa: F401
from ctxstair.recipes import theory  # noqa: F401
from ctxstair.recipes import signature_learning  # noqa: F401
from ctxstair.recipes import higher_orders  # noqa: F401
from ctxstair.recipes import minmax  # noqa: F401
from ctxstair.recipes import learning  # noqa: F401
from ctxstair.recipes import lineage  # noqa: F401
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, all_recipes, get, run_recipe, write_recipe_report

__all__ = ["KeyNumber", "Outcome", "Recipe", "all_recipes", "get", "run_recipe", "write_recipe_report"]
