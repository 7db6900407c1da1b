"""Shared fixtures: a temp root with a short path and a real daemon on it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from numamem import logging as nlog
from numamem.testing.daemon import DaemonProcess, short_tmpdir

# The fixtures numamem ships for its clients' tests are used by numamem's own tests too;
# the containerd harness's (tests/containerd) run the real containerd.
pytest_plugins = ["numamem.testing.fixtures", "tests.containerd.fixtures"]

# In-process code logs warnings and errors only, to stderr (pytest shows them on failure).
nlog.configure("warning", "console", cache=False)


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


REPORT: list[str] = []
"""Lines tests add for the end of the run (sizes of the fault matrix, the power-loss cuts)."""


@pytest.fixture
def report() -> list[str]:
    """Append a line to show in pytest's terminal summary."""
    return REPORT


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in REPORT:
        terminalreporter.write_line(line)
