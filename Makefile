# Tidings — `make run` starts the whole stack, `make test` runs the suite.
# Both create the virtualenv and install the project on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.DEFAULT_GOAL := help
.PHONY: help install run test test-quick test-prefork fuzz lint fmt api worker beat flower migrate bench bench-compare bench-gate drain topics workflows load loadtest soak ramp bench-digest clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install Tidings with its dev tools

run: $(STAMP) ## The whole stack (embedded PostgreSQL and Redis unless DATABASE_URL / REDIS_URL are set)
	$(BIN)/tidings dev

# The suite runs on TEST_WORKERS processes (pytest-xdist), each with databases and a Redis database
# of its own (REDIS_URL's and the ones after it); a module stays whole on one process, so a
# module's stack starts once and its tests run in file order.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
# Tests of one module or one task each, in process: no fault stacks, benchmarks, browsers, fuzzing,
# commands or whole-pipeline claims.
QUICK := tests/content tests/providers tests/access tests/observability tests/services tests/workflows \
	tests/smtp tests/delivery --ignore=tests/delivery/test_fairness.py \
	tests/test_layout.py tests/test_waiting.py tests/test_db.py tests/test_migrations.py tests/test_vault.py

test: $(STAMP) ## Every test, on two processes (uses DATABASE_URL / REDIS_URL when set, embedded servers otherwise)
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

test-quick: $(STAMP) ## The unit-level tests, in under a minute: no stacks of processes, benchmarks or browsers
	$(BIN)/pytest $(XDIST) $(QUICK) $(PYTEST_ARGS)

test-prefork: $(STAMP) ## The fault tests not already run under both pools (network-namespace hosts too), again on prefork (as docker/compose.yaml runs)
	TIDINGS_FAULT_POOL=prefork $(BIN)/pytest $(XDIST) tests/faults -k "not threads and not prefork" $(PYTEST_ARGS)

fuzz: $(STAMP) ## Fuzz every API operation longer than the suite does (FUZZ_EXAMPLES per operation, 500)
	FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),500) $(BIN)/pytest -q --timeout=0 tests/api/test_fuzz.py

lint: $(STAMP) ## ruff check and format check, mypy over app/, tasks/ and providers/
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP) ## Format and fix what ruff can
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

api: $(STAMP) ## Only the API (gunicorn), against DATABASE_URL / REDIS_URL
	$(BIN)/tidings api

worker: $(STAMP) ## Only a Celery worker on every queue
	$(BIN)/tidings worker

beat: $(STAMP) ## Only Celery beat
	$(BIN)/tidings beat

flower: $(STAMP) ## Only Flower (basic auth from FLOWER_BASIC_AUTH)
	$(BIN)/tidings flower

migrate: $(STAMP) ## Apply database migrations to DATABASE_URL
	$(BIN)/tidings db upgrade

bench: $(STAMP) ## Micro-benchmarks: save the run, print it, append it to BENCHMARKS.md (BENCH_ARGS: pytest options)
	$(BIN)/python loadtest/bench.py $(BENCH_ARGS)

bench-compare: $(STAMP) ## Compare the two newest `make bench` runs; fails when one is > 25% slower
	$(BIN)/python loadtest/bench_compare.py $(COMPARE_ARGS)

bench-gate: $(STAMP) ## Micro-benchmarks of HEAD~1 (GATE_ARGS: another base) and HEAD, interleaved; fails when one is > 25% slower
	$(BIN)/python loadtest/bench_gate.py $(GATE_ARGS)

drain: $(STAMP) ## Drain benchmark: 20 × 5,000 via the batch API, at 100 and 1 per provider call, beside COPY and no-op ceilings
	$(BIN)/python loadtest/drain.py $(DRAIN_ARGS)

topics: $(STAMP) ## Topic fan-out: one send to 1,000,000 followers, beside the batch API's enqueue rate; exactly one message each
	$(BIN)/python loadtest/topics.py $(TOPICS_ARGS)

workflows: $(STAMP) ## Workflows: 100,000 runs of send → delay 5 s → branch unless opened → send; runs/s per step, lateness, rows per run
	$(BIN)/python loadtest/workflows.py $(WORKFLOWS_ARGS)

load: $(STAMP) ## Single sends: 400/s end to end for 60 s, then 8 clients for 30 s against the API and a bare endpoint
	$(BIN)/python loadtest/singles.py $(LOAD_ARGS)

# Load tests. RATE and DURATION override the defaults (make soak RATE=200 DURATION=5m);
# more options through LOADTEST_ARGS (e.g. "--workers 3 --split-stages --profile --no-record").
loadtest: $(STAMP) ## Locust headless: RATE tasks/s (100) for DURATION (60s); CSV + HTML in loadtest/results/
	$(BIN)/python loadtest/locust_run.py --rate $(or $(RATE),100) --duration $(or $(DURATION),60s) $(LOADTEST_ARGS)

soak: $(STAMP) ## Soak: RATE sends/s (400) for DURATION (15m); NEIGHBOUR=1: the noisy-neighbour phases (5m); a section in BENCHMARKS.md
	$(BIN)/python loadtest/soak.py $(if $(NEIGHBOUR),--neighbour --duration $(or $(DURATION),5m),--rate $(or $(RATE),400) --duration $(or $(DURATION),15m)) $(LOADTEST_ARGS)

ramp: $(STAMP) ## From 150/s, +50/s a minute until the stack falls behind; then soak DURATION (15m) at the rate that held
	$(BIN)/python loadtest/soak.py --ramp --duration $(or $(DURATION),15m) $(LOADTEST_ARGS)

bench-digest: $(STAMP) ## Time the admin digest over 100k and 10M generated messages (~25 min, ~7 GB in /tmp)
	$(BIN)/python loadtest/digest_bench.py --sizes 100000,10000000

clean: ## Remove the virtualenv and the embedded servers' data
	rm -rf $(VENV) var
