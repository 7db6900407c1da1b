"""Where a test run puts its files, and when it removes them (used by tests/conftest.py).

A run takes a directory of its own, ``/dev/shm/nmt-*``, when /dev/shm is a writable tmpfs
with :data:`MIN_FREE` bytes free; else ``/tmp``. A state write fsyncs its file and its
directory: on a tmpfs that costs nothing, on this machine's disk 1-2 ms and far more while
other jobs write (tests/unit/test_power_loss.py: 29-43 s in /tmp, 13-14 s in /dev/shm, the
same CPU time). No test observes the disk: crashes and power cuts are simulated. But a
container's /dev/shm is 64 MiB unless told ``--shm-size`` (docker, podman, GitLab's docker
executor, GitHub's container jobs), and the artifact tests alone install three venvs
there (the project's own .venv: 197 MiB): a small /dev/shm fails the run with ENOSPC.

The directory goes when the run ends unless tests failed (or pytest failed): a usage
error, an interrupted run, a run that passed or collected nothing leave nothing in RAM.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
RUN_PREFIX = "nmt-"
"""A run's directory in /dev/shm: ``nmt-<random>`` (made by :func:`make_run_dir`)."""

MIN_FREE = 1 << 30
"""Free bytes /dev/shm needs for a run to go there: the artifacts' three venvs (about
200 MiB each) with both xdist workers' daemons beside them, and a margin."""

KEEP_STATUSES = frozenset({pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERNAL_ERROR})
"""The exit statuses after which a run's directory is kept, for its files to be looked at."""


def is_tmpfs(path: Path, mounts: Path = Path("/proc/self/mounts")) -> bool:
    """Whether ``path`` is the mount point of a tmpfs (per ``mounts``)."""
    try:
        with mounts.open() as lines:
            return any(line.split()[1:3] == [str(path), "tmpfs"] for line in lines)
    except OSError:
        return False


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def shm_problem(
    shm: Path = SHM, need: int = MIN_FREE, mounts: Path = Path("/proc/self/mounts")
) -> str | None:
    """Why a run's files cannot go to ``shm`` (None: they can)."""
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return f"{shm} is not a writable directory"
    if not is_tmpfs(shm, mounts):
        return f"{shm} is not a tmpfs"
    free = free_bytes(shm)
    if free < need:
        return (
            f"{shm} has {free / 2**20:.1f} MiB free, "
            f"under the {need / 2**20:.0f} MiB a run may write"
        )
    return None


def make_run_dir(shm: Path = SHM) -> Path:
    return Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=shm))


def run_dirs(shm: Path = SHM) -> list[Path]:
    """The run directories in ``shm``: of running runs, and kept ones of failed or killed runs."""
    try:
        return sorted(p for p in shm.glob(f"{RUN_PREFIX}*") if p.is_dir())
    except OSError:
        return []


def kept(exitstatus: int | None) -> bool:
    """Whether a run that ended with ``exitstatus`` keeps its directory (None: it ended before
    its session, e.g. on a usage error in its arguments)."""
    return exitstatus in KEEP_STATUSES
