"""Where the repository's parts are, for tests that read its files or start its scripts: one place to
change if the tests move again."""

from pathlib import Path

#: tests/, the folder of the test tree (this file is tests/helpers/repo_paths.py).
TESTS = Path(__file__).resolve().parents[1]
#: The repository's root: README.md, docs/, scripts/, benchmarks/, examples/.
ROOT = TESTS.parent
#: The package's source folder, for PYTHONPATH of child processes.
SRC = ROOT / "src"
#: The shared helper modules and worker scripts (on sys.path in the tests through pytest's `pythonpath`).
HELPERS = TESTS / "helpers"
