# tpx — every target bootstraps .venv on first use; no manual step.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPEC   ?= spec/TpxTransport.tla
CFG    ?= spec/TpxTransport.cfg

.PHONY: all setup graphviz tlc explore test conformance conformance-deep bench lint clean mutate

all: test

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,lint]'
	touch $(STAMP)

setup: $(STAMP)

## graphviz `dot` renders coverage pictures (`tpx graph`); installed when absent.
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "installing graphviz (dot)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq graphviz >/dev/null; }

## Model-check the seed spec with TLC (the main job).
tlc: $(STAMP)
	$(VENV)/bin/tpx tlc $(SPEC) --config $(CFG) --workers 1

## Explore the same spec with the Python mirror.
explore: $(STAMP)
	$(VENV)/bin/tpx explore $(SPEC) --config $(CFG)

## The test suite (fast; deep runs and benchmarks have their own targets).
test: $(STAMP) graphviz
	$(PY) -m pytest -n 2 -m "not slow" -q

conformance: $(STAMP) graphviz
	$(PY) -m pytest conformance -n 2 -q

conformance-deep: $(STAMP) graphviz
	TPX_HYPOTHESIS_PROFILE=deep $(PY) -m pytest conformance -n 2 -q

## Mutation testing, the conformance replay alone as the judge (files: conformance/mutate/targets.txt;
## equivalent mutants: conformance/mutate/equivalent.txt). MUTATE_ARGS="--per-file 0" judges all.
MUTATE_ARGS ?=
mutate: $(STAMP)
	nice -n 10 $(PY) -m conformance.mutate $(MUTATE_ARGS)

bench: $(STAMP)
	$(PY) -m pytest benchmarks -p no:xdist --benchmark-only -q

lint: $(STAMP)
	$(VENV)/bin/ruff check tpx tests conformance benchmarks
	$(VENV)/bin/ruff format --check tpx tests conformance benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks
