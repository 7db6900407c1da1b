# numamem developer entry points. `make test` and `make run` need nothing but
# python3 (3.11+) and network access to PyPI on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two install levels: `make run` needs the runtime dependencies (and grpcurl),
# `make test` adds the development tools.
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed-dev
PROTOS := $(wildcard proto/numamem/v1/*.proto)

RUN_DIR   ?= .numamem
RUN_FLAGS ?=

.PHONY: all install test lint typecheck unit run bench soak docs clean

all: test

# A venv is rebuilt when pyproject.toml or a .proto changes: the editable
# install runs protoc (hatch-protobuf) into src/numamem/v1/.
$(RUN_STAMP): pyproject.toml $(PROTOS)
	@echo "installing numamem and its runtime dependencies into $(VENV) ..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[grpcurl]'
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	@echo "installing the development tools (ruff, mypy, pytest, hypothesis, import-linter) ..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q $(PYTEST_ARGS)

test: lint typecheck unit

# Serves on ./.numamem/numamem.sock with the real /sys and this embedded config
# (Static policy; 924Mi system-reserved + 100Mi eviction = 1Gi reserved on NUMA
# node 0, which every Linux machine has) that fits this kind of machine.
run: $(RUN_STAMP)
	install -d -m 0750 $(RUN_DIR)
	$(BIN)/numamem serve --socket $(RUN_DIR)/numamem.sock --state-dir $(RUN_DIR)/state \
	  --memory-manager-policy Static --reserved-memory '0:memory=1Gi' \
	  --system-reserved memory=924Mi --eviction-hard 'memory.available<100Mi' \
	  --log-format console $(RUN_FLAGS)

bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# Regenerates README.md's configuration reference from src/numamem/config/flags.py.
docs: $(STAMP)
	$(BIN)/python -m tests.readme_docs --write

SOAK_SECONDS ?= 600
soak: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.soak --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .hypothesis .import_linter_cache
	rm -f src/numamem/v1/*_pb2*.py src/numamem/v1/*_pb2*.pyi
