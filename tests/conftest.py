"""Shared fixtures: a temp root with a short path and a real daemon on it.

``make test`` runs the suite on every core (pytest-xdist, ``-n``): each worker is a process
of its own, so a fixture shares nothing with the other worker but what it puts on disk or
the network, and every fixture here puts its files in a private temporary directory and
its sockets there. The hooks below order the tests so that the slow ones start first, keep
the tests of an expensive module-scoped fixture on one worker, and bring the lines tests
add with :func:`report` from the workers to the end of the run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from numamem import logging as nlog
from numamem.testing.daemon import TMPDIR_VARIABLE, DaemonProcess, short_tmpdir
from tests import tmproot
from tests.properties import DEFAULT_EXAMPLES, PROPERTY_EXAMPLES

# The fixtures numamem ships for its clients' tests are used by numamem's own tests too;
# the containerd harness's (tests/containerd) run the real containerd.
pytest_plugins = ["numamem.testing.fixtures", "tests.containerd.fixtures"]

# In-process code logs warnings and errors only, to stderr (pytest shows them on failure).
nlog.configure("warning", "console", cache=False)


# --- where the tests' files go (tests/tmproot.py) ---------------------------------------


def _test_tmpdir() -> tuple[str | None, bool, str]:
    """(the directory for the tests' files, whether this process made it for this run, why
    not /dev/shm when it did not).

    ``$NUMAMEM_TEST_TMPDIR`` when set (by the user, or by the pytest process that started
    this xdist worker); else a new directory in /dev/shm when that is a writable tmpfs with
    room (:func:`tests.tmproot.shm_problem`); else None (``/tmp``).
    ``NUMAMEM_TEST_TMPDIR=/tmp`` keeps the tests on the disk."""
    chosen = os.environ.get(TMPDIR_VARIABLE)
    if chosen:
        return chosen, False, ""
    problem = tmproot.shm_problem()
    if problem is None:
        return str(tmproot.make_run_dir()), True, ""
    return None, False, problem


# Set before any test makes a directory: pytest's tmp_path and tempfile's default follow
# tempfile.tempdir; short_tmpdir() (the daemons' roots, their unix sockets included)
# follows NUMAMEM_TEST_TMPDIR, which xdist workers inherit; the subprocesses tests start
# (pip, the daemon) follow TMPDIR. A directory made here is removed when the process
# exits (atexit: after a usage error in the arguments too) unless tests failed.
TEST_TMPDIR, OWN_TMPDIR, NOT_SHM = _test_tmpdir()
if TEST_TMPDIR is not None:
    os.environ[TMPDIR_VARIABLE] = os.environ["TMPDIR"] = tempfile.tempdir = TEST_TMPDIR
EXIT_STATUS: list[int] = []
"""The run's exit status, once its session finished."""


def _remove_unless_kept() -> None:
    if OWN_TMPDIR and TEST_TMPDIR and not tmproot.kept(EXIT_STATUS[-1] if EXIT_STATUS else None):
        shutil.rmtree(TEST_TMPDIR, ignore_errors=True)


atexit.register(_remove_unless_kept)


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads the option
def pytest_configure(config: pytest.Config) -> None:
    """In a directory made here, pytest's tmp_path root is ``<dir>/t`` (xdist workers get
    ``<dir>/t/popen-gwN``): shorter than ``/tmp/pytest-of-<user>/pytest-<N>``, since tests
    put unix sockets in tmp_path (at most 107 bytes)."""
    if OWN_TMPDIR and TEST_TMPDIR and config.option.basetemp is None:
        config.option.basetemp = os.path.join(TEST_TMPDIR, "t")


def pytest_sessionfinish(exitstatus: int) -> None:
    EXIT_STATUS.append(int(exitstatus))


# Property tests without a count of their own run hypothesis's 100 examples, or
# NUMAMEM_PROPERTY_EXAMPLES in make soak (tests/properties.py). No deadline: a test asserts
# no time (two workers and the daemons they start share the cores).
settings.register_profile(
    "numamem", max_examples=PROPERTY_EXAMPLES or DEFAULT_EXAMPLES, deadline=None
)
settings.load_profile("numamem")


@pytest.fixture
def short_root() -> Iterator[Path]:
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon_factory(short_root: Path) -> Iterator[list[DaemonProcess]]:
    """Collects daemons started by a test and kills any left running."""
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        d.kill()


# --- lines for the end of the run ------------------------------------------------------

REPORT_PROPERTY = "numamem-report"
"""The key of a test's ``user_properties`` entry that holds its :func:`report` lines: test
reports carry them from an xdist worker to the controller, which prints them."""

REPORT: list[tuple[str, str]] = []
"""(test id, line) of every test that added lines, gathered from the test reports."""


@pytest.fixture
def report(request: pytest.FixtureRequest) -> list[str]:
    """Append a line to show in pytest's terminal summary (sizes of the fault matrix, the
    power-loss cuts), in and out of xdist."""
    lines: list[str] = []
    request.node.user_properties.append((REPORT_PROPERTY, lines))
    return lines


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":  # the last report of a test carries all its lines
        return
    for name, lines in report.user_properties:
        if name == REPORT_PROPERTY:
            REPORT.extend((report.nodeid, str(line)) for line in lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    for _, line in sorted(REPORT, key=lambda entry: entry[0]):
        terminalreporter.write_line(line)
    if OWN_TMPDIR and tmproot.kept(exitstatus):
        terminalreporter.write_line(f"the tests' files are kept in {TEST_TMPDIR}")
    if NOT_SHM:
        terminalreporter.write_line(f"the tests' files are in /tmp: {NOT_SHM}")


# --- the order and the distribution of the tests ------------------------------------------

SLOWEST_FIRST = (
    "tests/e2e/test_artifacts.py",
    "tests/e2e/test_fuzz.py::test_a_bounded_campaign_finds_nothing",
    "tests/unit/test_power_loss.py::test_a_power_cut_after_faults_never_resurrects_a_failed_change",
    "tests/e2e/test_memorymanager_daemon.py::test_readme_walk_through",
    "tests/e2e/test_hostile_input.py::test_huge_messages_and_million_container_pods",
    "tests/e2e/test_crash_consistency.py",
    "tests/unit/test_platforms.py::test_make_run_resolves_for_manylinux2014_aarch64",
    "tests/e2e/test_docs_examples.py::test_the_documented_commands_run_with_the_documented_exit_codes",
    "tests/e2e/test_resize_daemon.py::test_cli_resize_and_explain_resize",
    "tests/e2e/test_residency_kernel.py::test_residency_and_enforcement_on_a_real_cgroup",
    "tests/e2e/test_access_and_overload.py::test_health_answers_within_its_deadline_under_64_clients",
    "tests/unit/test_power_loss.py",
    "tests/unit/test_checkpoint.py::test_caching_encoder_equals_a_fresh_encode",
    "tests/unit/test_checkpoint.py::test_random_states_round_trip_byte_exact",
    "tests/e2e/test_podresources.py",
    "tests/unit/test_differential.py",
)
"""Tests (test ids, or prefixes of them: a module, a test and its parameters) that take
seconds, about slowest first, as ``make unit PYTEST_ARGS=--durations=30`` measures them
(from 2 s up, on two workers of a 2-core machine).
They run first and the rest in collection order (the daemon tests of tests/e2e, then the
unit tests): xdist hands each test to the first idle worker, so no long test starts last
while the other worker idles. An entry that matches nothing changes only the order."""

ONE_WORKER = frozenset({"tests/e2e/test_artifacts.py"})
"""Modules whose module-scoped fixture is too expensive to set up on each worker (the
artifacts' build and three venv installs): their tests are one unit of work."""


def _rank(nodeid: str) -> int:
    for rank, prefix in enumerate(SLOWEST_FIRST):
        if nodeid == prefix or nodeid.startswith((f"{prefix}::", f"{prefix}[")):
            return rank
    return len(SLOWEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _rank(item.nodeid))  # stable: the rest keeps its order
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: optional without xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n`` without ``--dist`` (``--dist load``): xdist's load scheduling, each test to the
    first idle worker in collection order, but the tests of a :data:`ONE_WORKER` module
    are one unit. (``--dist loadgroup`` would do it with ``xdist_group`` marks, but on
    pytest 9.2 it silently stops grouping: xdist 3.8 sets ``item._nodeid``, which pytest
    no longer reads; pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return Scheduling(config, log)
