"""The house, checked: the import contracts of pyproject.toml (`lint-imports`), a command line that
starts without torch, functions that fit in a head, and `ruff check`."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

BIN = Path(sys.executable).parent
#: The longest function allowed without a stated reason (a ``# long: <why>`` comment above its ``def``).
MAX_FUNCTION_LINES = 80


def test_import_contracts_hold():
    done = subprocess.run([str(BIN / "lint-imports")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_command_line_and_the_corpus_workers_start_without_torch_or_scipy_stats():
    """`ctxstair --help`, `ctxstair recipes`, `ctxstair tasks`, `import ctxstair` and what a worker of
    `ctxstair corpus count` imports when it starts (``ctxstair.corpus.units``) import no torch (it takes
    seconds to load) and no ``scipy.stats`` (0.6 s: once a third of a 100 M-token count's first pass)."""
    for args in (["-m", "ctxstair", "--help"], ["-m", "ctxstair", "recipes"], ["-m", "ctxstair", "tasks"],
                 ["-c", "import ctxstair"], ["-c", "import ctxstair.corpus.units"]):
        done = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        imported = re.findall(r"\|\s*(\S+)\s*$", done.stderr, flags=re.M)
        assert "ctxstair" in imported and not {"torch", "scipy.stats"} & set(imported), args


def _long_functions(folder: Path, root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                reason = first >= 2 and lines[first - 2].strip().startswith("# long:")
                if length > MAX_FUNCTION_LINES and not reason:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_a_screen_without_a_reason():
    assert [f for folder in ("src", "scripts", "benchmarks") for f in _long_functions(ROOT / folder)] == []


def test_the_long_function_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    assert _long_functions(tmp_path, tmp_path) == ["m.py:1 f (81 lines)"]
    (tmp_path / "m.py").write_text(f"# long: one table, read top to bottom\ndef f():\n{body}\n")
    assert _long_functions(tmp_path, tmp_path) == []


def test_ruff_is_clean():
    done = subprocess.run([str(BIN / "ruff"), "check", "src", "tests", "scripts", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:]


def test_the_recipe_listing_read_from_source_equals_the_registry():
    from ctxstair.cli.catalogue import FIELDS, recipe_catalogue
    from ctxstair.recipes import all_recipes

    assert recipe_catalogue() == [{field: getattr(r, field) for field in FIELDS} for r in all_recipes()]
