# The README's contract: `make demo` and `make test`, each from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-extended reference stress bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# The main job: the Context Staircase on `add` (N = 40), about 30 s on a 2-core CPU.
demo: $(STAMP)
	$(BIN)/ctxstair run staircase-add --out runs/staircase-add --force

# The default suite, with its 20 slowest tests listed at the end.
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=20

# The tests left out of `make test` to keep it short (the slowest ones: multi-process jobs, browsers,
# whole runs at their defaults); CI runs them after `make test`.
test-extended: $(STAMP)
	$(BIN)/python -m pytest -q -m extended --durations=20

# The API reference from the docstrings (mkdocs.yml), warnings as errors, into a temporary folder.
reference: $(STAMP)
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --quiet --site-dir $$site && echo "API reference: $$site/index.html"

# Thirty kills each of `ctxstair run staircase-add` and `ctxstair lm train`, twelve of attention-arith,
# all under load and each resumed: byte-identical (≈ 12 min); fifty monitored two-process FSDP2 jobs
# that all exit 0 (≈ 4 min).
stress: $(STAMP)
	$(BIN)/python -m pytest -q -m stress tests/reliability

bench: $(STAMP)
	$(BIN)/ctxstair bench

clean:
	rm -rf $(VENV) runs build src/*.egg-info
