"""``make run``'s configuration and ``make run-reset`` (issue 38): the built-in reservation is
replaced by RUN_RESERVED, never added to by RUN_FLAGS; the state can be reset, not while a
daemon serves on it."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from numamem.api.precheck import CHECKPOINTS
from numamem.api.statedir import LOCK_FILE
from numamem.checkpoint.filestore import move_aside
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import REPO, STATIC_ARGS

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """``make -C cwd ARGS`` (the checkout by default)."""
    return subprocess.run(
        [shutil.which("make") or "make", "--no-print-directory", "-C", str(cwd), *args],
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


LOCKERS = ["no lock file", "flock", "python"]
"""The three ways run-reset removes: no lock file to take, util-linux flock, Python's fcntl
(no flock on PATH)."""


def locker_env(locker: str, where: Path) -> dict[str, str] | None:
    """make's environment for ``locker``; for the fallback, a PATH (``where``) with the
    programs run-reset runs but flock. Skips the case this machine cannot run."""
    if locker == "flock" and shutil.which("flock") is None:
        pytest.skip("no flock on PATH: the recipe would take the Python fallback instead")
    if locker != "python":
        return None
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("the fallback runs the venv's python; PATH has no python")
    where.mkdir(exist_ok=True)
    for program in ("sh", "rm", "rmdir"):
        (where / program).symlink_to(shutil.which(program) or f"/bin/{program}")
    return {**os.environ, "PATH": str(where)}


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
    env = locker_env(locker, tmp_path / "bin")
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


def numamem_state(state: Path, locker: str) -> list[Path]:
    """``state`` with every file numamem writes there: each checkpoint (precheck's
    CHECKPOINTS), a ``.corrupt-*`` copy moved aside as restore does, a temporary file of an
    interrupted write (filestore's ``.<name>.tmp-<pid><run>-<n>``), and the lock unless
    ``locker`` is "no lock file"."""
    state.mkdir(parents=True)
    for name in CHECKPOINTS:
        (state / name).write_text("{}")
        move_aside(state / name, "corrupt")  # keeps the file, links the copy aside
        (state / f".{name}.tmp-1f2e3d4a5b6c-0").write_text("{")
    if locker != "no lock file":
        (state / LOCK_FILE).write_text("")  # not held
        move_aside(state / LOCK_FILE, "corrupt")
    return sorted(state.iterdir())


def a_socket_file(path: Path) -> None:
    """What a killed daemon leaves: a unix socket's file, no listener."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


@pytest.mark.parametrize("locker", LOCKERS)
def test_run_reset_removes_only_what_make_run_made(short_root: Path, locker: str) -> None:
    """Review 38b: run-reset ended in ``rm -rf $(RUN_DIR)``, so ``make run RUN_DIR=/tmp`` (or
    ``$HOME``, the checkout) then ``make run-reset RUN_DIR=...`` removed all of it. Now: the
    socket and numamem's files in state/ only, state/ and RUN_DIR when that left them empty."""
    env = locker_env(locker, short_root / "bin")
    run_dir = short_root / "home"
    written = numamem_state(run_dir / "state", locker)
    a_socket_file(run_dir / "numamem.sock")
    mine = run_dir / "thesis.tex"
    mine.write_text("three years of work\n")
    done = make("run-reset", f"RUN_DIR={run_dir}", env=env)
    assert done.returncode == 0, done.stderr
    [said] = [line for line in done.stdout.splitlines() if line.startswith("rm -f ")]
    removed, rmdir = said.removeprefix("rm -f ").split("; ")
    assert sorted(removed.split()) == sorted([*map(str, written), f"{run_dir}/numamem.sock"])
    assert rmdir == f"rmdir {run_dir}/state, then {run_dir}, if empty"
    assert mine.read_text() == "three years of work\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["thesis.tex"]
    mine.unlink()
    numamem_state(run_dir / "state", locker)
    again = make("run-reset", f"RUN_DIR={run_dir}", env=env)
    assert again.returncode == 0, again.stderr
    assert not run_dir.exists()  # nothing else in it: RUN_DIR goes too


@pytest.mark.parametrize("locker", LOCKERS)
@pytest.mark.parametrize(
    ("foreign", "numamem_too"),
    [
        ("state/notes.txt", False),  # review 40: RUN_DIR=$HOME and a state/ of its own
        ("state/notes.txt", True),
        ("state/.numamem.lock.swp", True),
        ("state/memory_manager_state/", True),  # numamem's name, but a directory
        ("numamem.sock/", True),  # not a socket
    ],
)
def test_run_reset_refuses_naming_what_numamem_did_not_write_and_removes_nothing(
    short_root: Path, locker: str, foreign: str, numamem_too: bool
) -> None:
    """Review 40: ``rm -rf $(RUN_DIR)/state`` removed a state/ make run never made (no
    numamem file in it, or some and others). Removing numamem's names and keeping the rest
    would delete files of a directory that is not make run's and leave a half-reset state:
    it is refused, naming what is not numamem's, with nothing removed."""
    env = locker_env(locker, short_root / "bin")
    run_dir = short_root / "home"
    path = run_dir / foreign.rstrip("/")
    if numamem_too:
        numamem_state(run_dir / "state", locker)
        if path.is_file():
            path.unlink()
    else:
        (run_dir / "state").mkdir(parents=True)
    if foreign.endswith("/"):
        path.mkdir()
        (path / "data").write_text("not numamem's\n")
    else:
        path.write_text("not numamem's\n")
    before = sorted(str(p) for p in run_dir.rglob("*"))
    refused = make("run-reset", f"RUN_DIR={run_dir}", env=env)
    assert refused.returncode != 0
    assert (
        f"make run-reset: not written by numamem: {path}; nothing removed: "
        f"is RUN_DIR={run_dir} the directory make run used?"
    ) in refused.stderr
    assert sorted(str(p) for p in run_dir.rglob("*")) == before


def test_run_reset_names_at_most_three_foreign_files(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    for name in ("a", "b", "c", "d", "e"):
        (state / name).touch()
    refused = make("run-reset", f"RUN_DIR={tmp_path}")
    assert f"not written by numamem: {state}/a {state}/b {state}/c and 2 more;" in (refused.stderr)
    assert len(list(state.iterdir())) == 5


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
