# domainbert: every target makes its own virtual environment (.venv) if it is missing.
# torch is installed first from the CPU wheel, so pip never pulls a multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast test-long lint bench docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev,demo]'
	$(BIN)/python -m domainbert.cli.help_cache   # the --help texts, built once (then 0.1 s a call)
	touch $(STAMP)

setup: $(STAMP)

## The demo: the whole recipe on the bundled Debian data with all-MiniLM-L6-v2 (its minutes, by CPU:
## docs/benchmarks/time-to-model.md).
demo: $(STAMP)
	$(BIN)/domainbert pipeline --config configs/pipeline/minilm_debian.yaml

## The tests (docs/benchmarks/test-suite.md has how long they take): the default suite in TEST_JOBS processes
## (pytest-xdist, a test file to a process, each with one PyTorch thread), then the multi-process ones one at a time
## (DDP on gloo, multi-worker sweeps on PostgreSQL, a killed fit; the PostgreSQL ones skip with a reason when no
## server can be started). Each run ends with its 25 slowest tests.
DURATIONS := --durations=25
TEST_JOBS ?= 2
PARALLEL := -n $(TEST_JOBS) --dist loadfile
test: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) $(PARALLEL)
	$(BIN)/python -m pytest -q $(DURATIONS) -m "slow and not long"

## The unit tier alone (tests/unit: no Trainer.fit, no subprocess; tests/helpers/tiers.py fails a test that does
## either): the check to run after every edit.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) $(PARALLEL) tests/unit

## The long tier: trains the shipped demo model for real (all-MiniLM-L6-v2, 3 epochs); in neither half of `make test`.
test-long: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) -m long

lint: $(STAMP)
	$(BIN)/ruff check domainbert tests examples
	$(BIN)/ruff format --check domainbert tests examples

bench: $(STAMP)
	$(BIN)/python examples/benchmarks/mlm_throughput.py

## The documentation site: the docs extra (MkDocs, Material, mkdocstrings) installed into .venv when missing, then
## a strict build into site/ (the command-line reference is generated from the parsers by docs/hooks/cli_reference.py).
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) runs .pytest_cache site
