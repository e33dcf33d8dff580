"""The test tree is a map of the package (docs/design.md, "The tests"). The rule:

* ``tests/<package>/test_<what>.py`` tests ``ctxstair.<package>``: every folder of test modules,
  other than the three below, is named like a sub-package of ``ctxstair`` (a deeper folder like a
  sub-package of that one: ``tests/models/view/`` for ``ctxstair.models.view``);
* ``tests/test_<module>.py``, at the top of the tree, tests the top-level module
  ``ctxstair.<module>`` (``ctxstair/<module>.py``) and is named after it;
* ``tests/project/`` tests the repository as a whole: its layering, its docs and README, its
  scripts, benchmarks and notebook, the process the package runs in;
* ``tests/reliability/`` holds the cross-cutting reliability and stress tests, with their own harness
  (``kill_harness.py``, ``monitor_exit_worker.py``);
* every other module — a helper imported by name (``from family_models import ...``) or a worker
  script started by path — lives in ``tests/helpers/``, the one folder on pytest's ``pythonpath``
  besides ``tests/reliability/``; no test module lives there. ``conftest.py`` may sit in any folder.
"""

import re

from repo_paths import HELPERS, ROOT, TESTS

PACKAGE = ROOT / "src" / "ctxstair"
HELPER_FOLDER = HELPERS.name
#: Folders of the test tree that are not named after a package, and what they hold.
NOT_PACKAGES = {"project": "the repository as a whole", "reliability": "cross-cutting reliability tests",
                HELPER_FOLDER: "helpers and worker scripts"}


def python_files():
    return sorted(path.relative_to(TESTS) for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts)


def test_the_extra_folders_are_not_names_of_packages():
    assert [name for name in NOT_PACKAGES if (PACKAGE / name).exists() or (PACKAGE / f"{name}.py").exists()] == []


def test_every_test_module_sits_in_the_folder_of_what_it_tests():
    misplaced = []
    for path in python_files():
        if not path.name.startswith("test_") or path.parts[0] in ("project", "reliability"):
            continue
        if len(path.parts) == 1:  # the top of the tree: a top-level module, by name
            if not (PACKAGE / f"{path.stem.removeprefix('test_')}.py").is_file():
                misplaced.append(f"{path}: no top-level module ctxstair.{path.stem.removeprefix('test_')}")
        elif not (PACKAGE.joinpath(*path.parts[:-1]) / "__init__.py").is_file():
            misplaced.append(f"{path}: no package ctxstair.{'.'.join(path.parts[:-1])}")
    assert misplaced == []


def test_helpers_live_in_the_helper_folder_and_tests_do_not():
    outside = [str(path) for path in python_files()
               if not path.name.startswith("test_") and path.name != "conftest.py"
               and path.parts[0] not in (HELPER_FOLDER, "reliability")]
    tests_among_helpers = [str(path) for path in python_files()
                           if path.parts[0] == HELPER_FOLDER and path.name.startswith("test_")]
    assert outside == [] and tests_among_helpers == []


def test_the_helper_folder_is_on_pytests_path():
    """What ``from family_models import ...`` and the workers' own imports rely on."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'pythonpath = ["tests/{HELPER_FOLDER}", "tests/reliability"]' in pyproject
    assert "--import-mode=importlib" in pyproject


def test_the_reliability_page_lists_every_reliability_test_module():
    """docs/reliability.md opens with a table of the modules in ``tests/reliability/``, one row each:
    a module added without a row, or a row left for a module that is gone, is a stale map."""
    page = (ROOT / "docs" / "reliability.md").read_text()
    listed = re.findall(r"^\| `(test_\w+\.py)` \|", page, flags=re.MULTILINE)
    present = sorted(path.name for path in (TESTS / "reliability").glob("test_*.py"))
    assert sorted(listed) == present
