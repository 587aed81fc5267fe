# tpx — every target bootstraps .venv on first use; no manual step.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPEC   ?= spec/TpxTransport.tla
CFG    ?= spec/TpxTransport.cfg

.PHONY: all setup graphviz haproxy load-cluster tlc explore test conformance conformance-http conformance-deep bench lint clean e2e load bench-gateway fuzz mutate redteam

all: test

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,lint]'
	touch $(STAMP)

setup: $(STAMP)

## graphviz `dot` renders coverage pictures (`tpx graph`); installed when absent and root (or
## password-less sudo) is available; otherwise one line says how, and the rendering tests fail
## with the same advice (never a silent skip).
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	  else echo "graphviz (dot) is missing and cannot be installed without root: run 'sudo apt-get install graphviz' (or your package manager's graphviz); the rendering tests fail until then"; exit 0; fi; \
	  echo "installing graphviz (dot)"; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq graphviz >/dev/null; }

## HAProxy (Debian's package) for `make load-cluster`; installed like graphviz above.
haproxy:
	@command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	  else echo "haproxy is missing and cannot be installed without root: run 'sudo apt-get install haproxy'"; exit 0; fi; \
	  echo "installing haproxy"; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq haproxy >/dev/null; }

## Model-check the seed spec with TLC (the main job), then the gateway spec on its deep cfgs
## (two tool ids, three turns, two conversations; docs/specs.md): GatewayRetry = TRUE with key
## rotation, and the refinement check (GatewayRetry = FALSE: each conversation is a behaviour
## of the seed); then its failover cfg (upstream attempts, two upstreams, the preflight), and
## TpxGatewayOverlap.tla's deep cfg (a second exchange of a conversation while one is in flight).
## The shipped small cfgs are checked by the tests.
GATEWAY_SPEC ?= spec/TpxGateway.tla
tlc: $(STAMP)
	$(VENV)/bin/tpx tlc $(SPEC) --config $(CFG) --workers 1
	$(VENV)/bin/tpx tlc $(GATEWAY_SPEC) --config spec/TpxGatewayDeep.cfg --workers 1
	$(VENV)/bin/tpx tlc $(GATEWAY_SPEC) --config spec/TpxGatewayRefinementDeep.cfg --workers 1
	$(VENV)/bin/tpx tlc $(GATEWAY_SPEC) --config spec/TpxGatewayFailover.cfg --workers 1
	$(VENV)/bin/tpx tlc spec/TpxGatewayOverlap.tla --config spec/TpxGatewayOverlapDeep.cfg --workers 1

## Explore the same spec with the Python mirror.
explore: $(STAMP)
	$(VENV)/bin/tpx explore $(SPEC) --config $(CFG)

## The test suite (fast; deep runs and benchmarks have their own targets). A plain `pytest`
## selects the same tests (pyproject.toml); the targets below that run a whole folder say
## `-m ""` to take its slow tests too.
test: $(STAMP) graphviz
	$(PY) -m pytest -n 2 -m "not slow and not e2e" -q

conformance: $(STAMP) graphviz
	$(PY) -m pytest conformance -m "" -n 2 -q

## Only the gateway's HTTP replay (tpx/audit; part of `make conformance`):
## every behaviour of the small cfgs, edge covers of the shipped and a larger cfg, the bugs;
## and `tpx audit` on every seeded bug (tests/audit).
conformance-http: $(STAMP)
	$(PY) -m pytest -m "" conformance/test_gateway_http_replay.py conformance/test_gateway_http_bugs.py \
	  conformance/test_gateway_http_abstraction.py conformance/test_failover_http_replay.py \
	  conformance/test_failover_http_bugs.py conformance/test_failover_http_cooldown.py \
	  tests/audit -n 2 -q

conformance-deep: $(STAMP) graphviz
	TPX_HYPOTHESIS_PROFILE=deep $(PY) -m pytest conformance -m "" -n 2 -q

## Hostile-input fuzzing of both transports and of the gateway's tail cache (tests/fuzz): 9 x FUZZ_EXAMPLES
## examples (>= 100,000 cases by default), niced; prints the cases run and cases/s. Takes a while.
FUZZ_EXAMPLES ?= 12500
fuzz: $(STAMP)
	TPX_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) nice -n 10 $(PY) -m pytest tests/fuzz -m "" -n 2 -p no:logging -q
## Mutation testing, the conformance replay alone as the judge (files: conformance/mutate/targets.txt;
## equivalent mutants: conformance/mutate/equivalent.txt). MUTATE_ARGS="--per-file 0" judges all.
MUTATE_ARGS ?=
mutate: $(STAMP)
	nice -n 10 $(PY) -m conformance.mutate $(MUTATE_ARGS)

bench: $(STAMP)
	$(PY) -m pytest benchmarks -m "" -p no:xdist --benchmark-only -q
	$(PY) -m benchmarks.routing_cost
	$(PY) -m benchmarks.context_counts
	$(MAKE) bench-gateway

## The gateway's added latency vs the upstream called directly and vs LiteLLM's proxy, side by side
## (benchmarks/gateway_latency.py; installs LiteLLM into .cache/litellm-venv on first use).
## BASELINE=REV: `tpx serve` at git revision REV runs in the same run too (a worktree under
## .cache/), and the ratio of the two added latencies is printed (the docs table is not written).
## Then (without BASELINE) what `[[upstreams]]` routing adds to the added latency: `tpx serve`
## with one upstream and with docs/upstreams.md's routes side by side (benchmarks/routed_latency.py).
BASELINE ?=
bench-gateway: $(STAMP)
	$(PY) -m benchmarks.gateway_latency $(if $(BASELINE),--baseline $(BASELINE))
	$(if $(BASELINE),,$(PY) -m benchmarks.routed_latency)

## Red team: all of tests/security against real `tpx serve` processes (the heavy attacks
## included: hundreds of MB on loopback; the 10,000-guess oracle attack), their memory read
## from /proc; prints the figures per finding (RSS before/after, latencies). `make test` runs
## the small variants.
.PHONY: redteam
redteam: $(STAMP)
	mkdir -p .cache
	nice -n 5 $(PY) -m pytest tests/security -m "" -p no:xdist -q -s --basetemp=.cache/redteam-tmp

## End to end: the Claude Code CLI (installed into .cache/claude-code, pinned) through `tpx serve`
## to a scripted fake OpenAI upstream (tests/e2e). Loopback only; not part of `make test`.
CLAUDE_CODE_VERSION ?= 2.1.197
CLAUDE_DIR := .cache/claude-code
CLAUDE     := $(CLAUDE_DIR)/node_modules/.bin/claude

$(CLAUDE):
	npm install --prefix $(CLAUDE_DIR) --no-audit --no-fund --loglevel=error \
	  @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	$(CLAUDE) --version

e2e: $(STAMP) $(CLAUDE)
	TPX_CLAUDE=$(CLAUDE) $(PY) -m pytest tests/e2e/test_claude_code.py tests/e2e/test_upstreams.py tests/e2e/test_small_window.py -m e2e -p no:xdist -q \
	  --basetemp=.cache/e2e-tmp

## Load: >= 1,000 concurrent conversations through one `tpx serve` (1 and 2 workers).
load: $(STAMP)
	mkdir -p .cache && $(PY) -m pytest tests/e2e/test_load.py -m e2e -p no:xdist -q -s --basetemp=.cache/load-tmp

## Three `tpx serve` replicas sharing their secrets behind HAProxy, the same 1,000
## conversations, one replica killed mid-run; writes its figures into docs/upstreams.md and
## the README (tests/e2e/cluster_figures.py).
load-cluster: $(STAMP) haproxy
	mkdir -p .cache && $(PY) -m pytest tests/e2e/test_load_cluster.py -m e2e -p no:xdist -q -s --basetemp=.cache/load-cluster-tmp
## `tpx audit` of LiteLLM's proxy (1.108.7, .cache/litellm-venv), claude-code-router (npm, pinned,
## .cache/ccr) and `tpx serve`, each configured to the audit's scripted upstream; writes the
## comparison into docs/audit.md and the reports into .cache/audit-peers/ (conformance/audit_peers.py).
## Each failure's trace is run through `tpx check-trace` and each HTML report read as headless
## Chromium shows it offline (Debian's chromium package; without it, the file as written); exit 1
## when a counterexample or a report is not confirmed. Offline once LiteLLM and CCR are installed.
## Then what one audit of `tpx serve` takes, each mode, 8 lanes and 1 (conformance/audit_timing.py).
CCR_VERSION ?= 2.0.0
CCR        := .cache/ccr/node_modules/.bin/ccr

$(CCR):
	npm install --prefix .cache/ccr --no-audit --no-fund --loglevel=error \
	  @musistudio/claude-code-router@$(CCR_VERSION)

## Debian's Chromium, which shows the audit reports offline (`make audit-peers`); installed
## like graphviz above; without it the reports are checked as the files are written.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	  else echo "chromium is missing and cannot be installed without root: run 'sudo apt-get install chromium'; the reports are checked as written until then"; exit 0; fi; \
	  echo "installing chromium"; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

.PHONY: audit-peers chromium
audit-peers: $(STAMP) $(CCR) chromium
	nice -n 5 $(PY) -m conformance.audit_peers
	nice -n 5 $(PY) -m conformance.audit_timing

lint: $(STAMP)
	$(VENV)/bin/ruff check tpx tests conformance benchmarks
	$(VENV)/bin/ruff format --check tpx tests conformance benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks

## The gateway on 127.0.0.1:8082 (credentials from the environment; see README "The gateway").
.PHONY: serve
serve: $(STAMP)
	$(VENV)/bin/tpx serve
