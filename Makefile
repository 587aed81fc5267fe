# tpx — every target bootstraps .venv on first use; no manual step.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPEC   ?= spec/TpxTransport.tla
CFG    ?= spec/TpxTransport.cfg

.PHONY: all setup tlc explore test conformance conformance-deep bench lint clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

setup: $(STAMP)

## Model-check the seed spec with TLC (the main job).
tlc: $(STAMP)
	$(VENV)/bin/tpx tlc $(SPEC) --config $(CFG) --workers 1

## Explore the same spec with the Python mirror.
explore: $(STAMP)
	$(VENV)/bin/tpx explore $(SPEC) --config $(CFG)

## The test suite (fast; deep runs and benchmarks have their own targets).
test: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow" -q

conformance: $(STAMP)
	$(PY) -m pytest conformance -n 2 -q

conformance-deep: $(STAMP)
	$(PY) -m pytest conformance -n 2 -q -m slow

bench: $(STAMP)
	$(PY) -m pytest benchmarks -p no:xdist --benchmark-only -q

lint: $(STAMP)
	$(VENV)/bin/ruff check tpx tests conformance benchmarks
	$(VENV)/bin/ruff format --check tpx tests conformance benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks
