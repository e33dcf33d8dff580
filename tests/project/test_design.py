"""docs/design.md's "Where a new piece goes", checked: every file it names exists, every analysis is
in the table of ctxstair.analysis, and a recipe needs nothing beyond what the table says — each
registered recipe has its recorded example and its section in docs/recipes.md, and no list of recipe
names is kept by hand in the code, the tests or the scripts."""

import ast
import re
from pathlib import Path

from repo_paths import ROOT

import ctxstair.analysis as analysis_package
from ctxstair.recipes import all_recipes

PACKAGE = ROOT / "src" / "ctxstair"
#: Folders of the repository that its paths name from the top; any other path is inside the package.
TOP_LEVEL = ("docs", "tests", "scripts", "benchmarks")
#: A literal that names at least this fraction of the registered recipes is a hand-kept list of
#: them; fewer is a choice of some for a purpose (the recipes one slow test runs at full size).
LIST_FRACTION = 0.5


def where_pieces_go() -> dict[str, list[str]]:
    """Row ("to add") -> the backticked names in its "files" column, from docs/design.md."""
    section = (ROOT / "docs" / "design.md").read_text().split("### Where a new piece goes", 1)[1]
    section = section.split("\n#", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and " | " in line]
    return {row[0].strip("| "): re.findall(r"`([^`]+)`", row[1]) for row in rows[1:]}


def _path(name: str) -> Path:
    """The glob of a named file: ``<...>`` placeholders match anything; package paths are under src/ctxstair."""
    pattern = re.sub(r"<[^>]+>", "*", name)
    return (ROOT if pattern.split("/")[0] in TOP_LEVEL else PACKAGE) / pattern


def test_the_table_has_its_six_pieces():
    assert list(where_pieces_go()) == ["a task", "a model kind for the ensemble engine", "an analysis",
                                       "a model family (path measures)", "an LM measure", "a recipe"]


def test_every_file_the_table_names_exists():
    for piece, names in where_pieces_go().items():
        files = [name for name in names if re.fullmatch(r"[\w<>./-]+\.(py|md)", name)]
        assert files, piece
        for name in files:
            assert list(_path(name).parent.glob(_path(name).name)), f"{piece}: {name} matches no file"
        concrete = [_path(name) for name in files if "<" not in name]
        for name in names:
            if re.fullmatch(r"[A-Z_]+", name):  # a constant: it stands in one of the row's files
                assert any(name in path.read_text() for path in concrete), f"{piece}: {name} is in none of {files}"
            if name.startswith("python "):  # a command: its script exists
                assert (ROOT / name.split()[1]).is_file(), f"{piece}: {name}"


def test_every_analysis_is_in_the_table_of_the_analysis_package():
    table = analysis_package.__doc__
    modules = sorted(p.stem for p in (PACKAGE / "analysis").glob("*.py") if p.stem != "__init__")
    assert [m for m in modules if f"``{m}``" not in table] == []


def test_every_recipe_has_its_example_and_its_section():
    page = (ROOT / "docs" / "recipes.md").read_text()
    headings = re.findall(r"^#{2,3} (\S+)", page, flags=re.M)
    names = [recipe.name for recipe in all_recipes()]
    assert [n for n in names if not (ROOT / "docs" / "examples" / "recipes" / n / "summary.json").is_file()] == []
    assert [n for n in names if n not in {h.rstrip(":") for h in headings}] == [], \
        "give each recipe its section `## NAME ...` in docs/recipes.md"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module and its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def hand_kept_lists(source: str, names: set[str]) -> list[int]:
    """Lines of ``source`` where a list, tuple or set literal, or a string that is not a docstring,
    names at least :data:`LIST_FRACTION` of the recipes ``names`` (and more than one)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    named = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w-])")
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            count = sum(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            count = len(set(named.findall(node.value)))
        else:
            continue
        if count > 1 and count >= LIST_FRACTION * len(names):
            lines.append(node.lineno)
    return lines


def test_no_list_of_recipe_names_is_kept_by_hand():
    """Lists of the recipes come from the registry (``all_recipes()``). A dict keyed by some recipes'
    names holds settings for them (the tests' small settings, ``scripts/compare_outputs.py``'s
    shortenings), which a new recipe does without, so it is not such a list."""
    names = {recipe.name for recipe in all_recipes()}
    found = [f"{path.relative_to(ROOT)}:{line}" for folder in ("src", "tests", "scripts", "benchmarks")
             for path in sorted((ROOT / folder).rglob("*.py")) for line in hand_kept_lists(path.read_text(), names)]
    assert found == []


def test_the_hand_kept_list_check_can_fail():
    names = {"alpha", "beta", "gamma-n50", "gamma", "delta", "epsilon"}
    assert hand_kept_lists('NAMES = ["alpha", "beta", "gamma"]\n', names) == [1]
    assert hand_kept_lists('ERROR = "available: alpha, beta, gamma-n50"\n', names) == [1]
    assert hand_kept_lists('SLOW = ["alpha", "beta"]\n', names) == []
    assert hand_kept_lists('"""alpha, beta and gamma in a docstring."""\nSMALL = {"alpha": 1, "beta": 2, "gamma": 3}\n',
                           names) == []
