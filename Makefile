# domainbert: every target makes its own virtual environment (.venv) if it is missing.
# torch is installed first from the CPU wheel, so pip never pulls a multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev,demo]'
	touch $(STAMP)

setup: $(STAMP)

## The demo: the whole recipe on the bundled Debian data with all-MiniLM-L6-v2 (6-10 minutes on 2 idle cores).
demo: $(STAMP)
	$(BIN)/domainbert pipeline --config configs/pipeline/minilm_debian.yaml

## The tests: the default suite (under 10 minutes on 2 cores), then the multi-process ones
## (DDP on gloo, multi-worker sweeps on PostgreSQL; they skip with a reason when no server can be started).
test: $(STAMP)
	$(BIN)/python -m pytest -q
	$(BIN)/python -m pytest -q -m slow

## The unit tier alone (tests/unit: no Trainer.fit, no subprocess): the check to run after every edit.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check domainbert tests examples
	$(BIN)/ruff format --check domainbert tests examples

bench: $(STAMP)
	$(BIN)/python examples/benchmarks/mlm_throughput.py

clean:
	rm -rf $(VENV) runs .pytest_cache
