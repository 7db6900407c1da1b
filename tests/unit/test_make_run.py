"""``make run``'s configuration and ``make run-reset`` (issue 38): the built-in reservation is
replaced by RUN_RESERVED, never added to by RUN_FLAGS; the state can be reset, not while a
daemon serves on it."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import REPO, STATIC_ARGS

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("make") or "make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


def serve_flags(*variables: str) -> list[str]:
    """The flags of the ``numamem serve`` line ``make -n run`` prints."""
    out = make("-n", "run", *variables)
    assert out.returncode == 0, out.stderr
    joined = out.stdout.replace("\\\n", " ")
    [line] = [x for x in joined.splitlines() if "numamem serve" in x]
    return shlex.split(line)[2:]


def values(flags: list[str], name: str) -> list[str]:
    return [flags[i + 1] for i, f in enumerate(flags) if f == name]


def test_the_built_in_configuration() -> None:
    flags = serve_flags()
    assert values(flags, "--reserved-memory") == ["0:memory=1Gi"]
    assert values(flags, "--memory-manager-policy") == ["Static"]
    assert values(flags, "--system-reserved") == ["memory=924Mi"]
    assert values(flags, "--eviction-hard") == ["memory.available<100Mi"]


def test_run_reserved_replaces_the_reservation() -> None:
    flags = serve_flags(
        "RUN_RESERVED=0:memory=1Gi;1:memory=1Gi", "RUN_SYSTEM_RESERVED=memory=1948Mi"
    )
    assert values(flags, "--reserved-memory") == ["0:memory=1Gi;1:memory=1Gi"]
    assert values(flags, "--system-reserved") == ["memory=1948Mi"]
    none = serve_flags("RUN_POLICY=None", "RUN_RESERVED=")
    assert values(none, "--memory-manager-policy") == ["None"]
    assert "--reserved-memory" not in none


def test_a_reservation_in_run_flags_is_refused_naming_run_reserved() -> None:
    """Before: RUN_FLAGS="--reserved-memory 0:memory=2Gi" added a second entry for node 0
    to the built-in one (the flag is repeatable)."""
    out = make("-n", "run", "RUN_FLAGS=--reserved-memory 0:memory=2Gi")
    assert out.returncode != 0
    assert "RUN_FLAGS: --reserved-memory adds to make run's 0:memory=1Gi" in out.stderr
    assert "RUN_RESERVED=" in out.stderr
    assert values(serve_flags("RUN_FLAGS=--metrics-port=9441"), "--reserved-memory") == [
        "0:memory=1Gi"
    ]


def test_run_reset_removes_the_state_but_not_under_a_serving_daemon(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(1))
    daemon = DaemonProcess(short_root, ["--sysfs-root", str(sysfs), *STATIC_ARGS])
    daemon_factory.append(daemon)
    daemon.start()
    run_dir = Path(daemon.socket).parent  # make run's layout: RUN_DIR/numamem.sock
    refused = make("run-reset", f"RUN_DIR={run_dir}")
    assert refused.returncode != 0
    assert f"a daemon is serving on {run_dir}/numamem.sock: stop make run" in refused.stderr
    assert run_dir.exists()
    assert daemon.stop() == 0
    (run_dir / "state").mkdir()
    (run_dir / "state" / "memory_manager_state").write_text("{}")
    done = make("run-reset", f"RUN_DIR={run_dir}")
    assert done.returncode == 0, done.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("locker", ["flock", "python"])
def test_run_reset_refuses_while_a_stalled_daemon_holds_the_lock(
    short_root: Path, daemon_factory: list[DaemonProcess], tmp_path: Path, locker: str
) -> None:
    """Review of issue 38: run-reset asked only ``numamem health`` (2 s), so a live daemon that
    did not answer SERVING in time (stalled, restoring, NOT_SERVING) had its state deleted.
    The state dir's lock says whether a daemon holds it; ``python``: no flock on PATH (the
    recipe falls back to Python's fcntl)."""
    if locker == "python" and not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("the fallback runs the venv's python; PATH is emptied")
    env = None if locker == "flock" else {**os.environ, "PATH": str(tmp_path)}
    sysfs = write_sysfs(short_root / "sys", standard_nodes(1))
    daemon = DaemonProcess(short_root, ["--sysfs-root", str(sysfs), *STATIC_ARGS])
    daemon_factory.append(daemon)
    daemon.start()
    assert daemon.proc is not None
    run_dir = short_root  # RUN_DIR/state is the daemon's state dir, as for make run
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # alive, holding its lock, answering nothing
    try:
        refused = make("run-reset", f"RUN_DIR={run_dir}", env=env)
        alive = daemon.proc.poll() is None
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert alive and refused.returncode != 0
    assert (
        f"make run-reset: a numamem process holds {run_dir}/state/numamem.lock (serving, "
        "stalled or starting): stop make run (Ctrl-C) first"
    ) in refused.stderr
    assert (run_dir / "state" / "memory_manager_state").exists()
    assert daemon.stop() == 0
    done = make("run-reset", f"RUN_DIR={run_dir}", env=env)  # the lock is free now
    assert done.returncode == 0, done.stderr
    assert not (run_dir / "state").exists()
    assert (run_dir / "sys").is_dir()  # not make run's: kept, and RUN_DIR with it


@pytest.mark.parametrize("locker", ["no lock file", "flock", "python"])
def test_run_reset_removes_only_what_make_run_made(tmp_path: Path, locker: str) -> None:
    """Review 38b: run-reset ended in ``rm -rf $(RUN_DIR)``, so ``make run RUN_DIR=/tmp`` (or
    ``$HOME``, the checkout) then ``make run-reset RUN_DIR=...`` removed all of it. Now: the
    socket and state/ only, and RUN_DIR when that left it empty."""
    if locker == "python" and not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("the fallback runs the venv's python; PATH is emptied")
    env = None if locker != "python" else {**os.environ, "PATH": str(tmp_path / "bin")}
    run_dir = tmp_path / "home"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "state" / "memory_manager_state").write_text("{}")  # make run's
    if locker != "no lock file":
        (run_dir / "state" / "numamem.lock").write_text("")  # not held
    (run_dir / "numamem.sock").write_text("")  # a socket file left by a killed daemon
    mine = run_dir / "thesis.tex"
    mine.write_text("three years of work\n")
    done = make("run-reset", f"RUN_DIR={run_dir}", env=env)
    assert done.returncode == 0, done.stderr
    assert f"rm -rf {run_dir}/state {run_dir}/numamem.sock; rmdir {run_dir} if empty" in done.stdout
    assert mine.read_text() == "three years of work\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["thesis.tex"]
    mine.unlink()
    (run_dir / "state").mkdir()
    if locker != "no lock file":
        (run_dir / "state" / "numamem.lock").write_text("")
    again = make("run-reset", f"RUN_DIR={run_dir}", env=env)
    assert again.returncode == 0, again.stderr
    assert not run_dir.exists()  # nothing else in it: RUN_DIR goes too


def test_run_reset_refuses_while_a_stalled_daemon_listens_on_its_socket(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """The review's case: RUN_DIR holds the socket of a daemon that does not answer (its state
    elsewhere, e.g. RUN_FLAGS=--state-dir): a test connect that is not refused shows it alive
    (a stopped process's listening socket still accepts into its backlog)."""
    sysfs = write_sysfs(short_root / "sys", standard_nodes(1))
    daemon = DaemonProcess(short_root, ["--sysfs-root", str(sysfs), *STATIC_ARGS])
    daemon_factory.append(daemon)
    daemon.start()
    assert daemon.proc is not None
    run_dir = Path(daemon.socket).parent
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        refused = make("run-reset", f"RUN_DIR={run_dir}")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert refused.returncode != 0
    assert (
        f"make run-reset: a process listens on {run_dir}/numamem.sock but does not answer "
        "(stalled or starting): stop make run (Ctrl-C) first"
    ) in refused.stderr
    assert os.path.exists(daemon.socket)
    assert daemon.stop() == 0
