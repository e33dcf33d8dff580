"""Record each recipe's example (its ``summary.json`` and resolved configuration, run at the
defaults) and regenerate the verdict table of docs/recipes.md from the examples.

The verdict table (:mod:`ctxstair.recipes.verdicts`) is built from these examples, and
tests/recipes/test_verdicts.py checks that each still holds its recipe's current defaults and that the table
in docs/recipes.md is the one they give. For every recipe asked for (all by default) this runs
``ctxstair run NAME`` into a scratch directory and keeps ``summary.json`` with the configuration:
``config.yaml`` of a single run, ``recipe.json`` and each ``<part>/config.yaml`` of a recipe with
parts, ``recipe.json`` of a computation. Snapshots, figures and reports are left behind. Then it
writes the table between the markers of docs/recipes.md::

    python scripts/record_examples.py                                  # every recipe: their CPU times add up
    python scripts/record_examples.py --only label-law --only minmax   # some (a new recipe: its name)
    python scripts/record_examples.py --only higher-orders --from runs/higher-orders   # a run made already

A recipe's example directory is replaced only once its new contents are complete.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ctxstair.io import fresh_output_dir
from ctxstair.recipes import all_recipes
from ctxstair.recipes.verdicts import write_table

ROOT = Path(__file__).resolve().parents[1]


def kept_files(run: Path) -> list[Path]:
    """The files of a recipe output directory ``run`` that its example keeps, relative to ``run``."""
    if not (run / "recipe.json").is_file():
        return [Path("summary.json"), Path("config.yaml")]
    parts = json.loads((run / "recipe.json").read_text())["parts"]
    return [Path("summary.json"), Path("recipe.json"), *(Path(part, "config.yaml") for part in parts)]


def copy_example(name: str, run: Path, out_root: Path) -> None:
    """Write the example of recipe ``name`` to ``out_root/name`` from its output directory ``run``."""
    kept = kept_files(run)
    with fresh_output_dir(out_root / name, force=True) as staging:
        for rel in kept:
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run / rel, staging / rel)
    print(f"[{name}] {len(kept)} files in {out_root / name}", flush=True)


def record(name: str, out_root: Path) -> None:
    """Run recipe ``name`` at its defaults and write its example to ``out_root/name``."""
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / name
        command = [sys.executable, "-m", "ctxstair", "run", name, "--out", str(run)]
        print(f"[{name}] ctxstair run {name}", flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        copy_example(name, run, out_root)


def main() -> int:
    """Record the examples asked for, then regenerate the verdict table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="record this recipe (repeatable; default: every registered recipe)")
    parser.add_argument("--out-root", type=Path, default=ROOT / "docs" / "examples" / "recipes",
                        help="where the examples go (default: docs/examples/recipes)")
    parser.add_argument("--from", dest="source", type=Path, metavar="DIR",
                        help="copy from this output directory of the one --only recipe (run at its defaults) "
                             "instead of running it")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "recipes.md",
                        help="the page whose verdict table is regenerated (default: docs/recipes.md)")
    args = parser.parse_args()
    registered = [recipe.name for recipe in all_recipes()]
    unknown = sorted(set(args.only) - set(registered))
    if unknown:
        sys.exit(f"unknown recipe(s) {', '.join(unknown)}; recipes: {', '.join(registered)}")
    if args.source is not None:
        if len(args.only) != 1:
            sys.exit("--from needs exactly one --only NAME")
        copy_example(args.only[0], args.source, args.out_root)
    else:
        for name in args.only or registered:
            record(name, args.out_root)
    write_table(args.page, args.out_root)
    print(f"verdict table in {args.page}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
