"""``numamem serve --check`` (issue 38): every validation of a start, with serve's own messages
and exit codes, and nothing created, locked, bound or written; and exit 2 for a bad flag value."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from numamem.client import NumamemClient
from numamem.metacache.journal_store import JournalPersister
from numamem.testing.daemon import DaemonProcess, fake_machine_args
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import REPO, STATIC_ARGS, can_mount_tmpfs, no_dac_override, tree

pytestmark = pytest.mark.e2e


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """The fake machine (sysfs, cgroups, procfs), outside the tree a check must not touch
    (``short_root``); it holds no socket, so pytest's longer tmp_path serves."""
    return tmp_path


def serve(
    root: Path, machine: Path, *args: str, check: bool = False, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    argv = [
        "serve",
        *(["--check"] if check else []),
        "--socket",
        str(root / "run" / "n.sock"),
        "--state-dir",
        str(root / "state"),
        *args,
    ]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "numamem", *fake_machine_args(machine, argv)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        check=False,
    )


def assert_same_refusal(
    root: Path, machine: Path, args: list[str], code: int = 1, prefix: Sequence[str] = ()
) -> str:
    """--check refuses as serve does (exit code and stderr, byte for byte), leaving ``root``
    as it was, with no socket, lock or directory made. ``prefix`` runs both under another
    command (fewer privileges, another mount namespace)."""
    fake_machine_args(machine, [])  # the fake machine exists before the snapshot
    before = tree(root)
    checked = serve(root, machine, *args, check=True, prefix=prefix)
    assert tree(root) == before
    served = serve(root, machine, *args, prefix=prefix)
    assert (checked.returncode, served.returncode) == (code, code), checked.stderr
    assert checked.stderr == served.stderr
    assert checked.stdout == ""
    return checked.stderr


def write_state(root: Path, name: str, data: str) -> None:
    state = root / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    (state / name).write_text(data)


@pytest.mark.parametrize(
    ("args", "prepare", "fragment"),
    [
        (
            ["--memory-manager-policy", "Static", "--reserved-memory", "0:memory=1Gi"],
            None,
            "determined by Node Allocatable feature",
        ),
        (
            ["--feature-gates", "PodLevelResourceManagers=true"],
            None,
            "PodLevelResourceManagers=true needs PodLevelResources=true",
        ),
        (
            [],
            ("memory_manager_state", '{"policyName":"None","checksum":1}'),
            "could not restore state from checkpoint",
        ),
    ],
)
def test_a_bad_configuration_is_refused_as_serve_refuses_it(
    short_root: Path,
    machine: Path,
    args: list[str],
    prepare: tuple[str, str] | None,
    fragment: str,
) -> None:
    if prepare is not None:
        write_state(short_root, *prepare)
    stderr = assert_same_refusal(short_root, machine, args)
    assert stderr.startswith("numamem: ") and fragment in stderr.splitlines()[0]
    assert not (short_root / "run").exists()
    assert not (short_root / "state" / "numamem.lock").exists()


def test_a_bad_config_file_is_refused_as_serve_refuses_it(short_root: Path, machine: Path) -> None:
    config = short_root / "numamem.yaml"
    config.write_text("memoryManagerPolicy: Static\nresource: {}\n")
    stderr = assert_same_refusal(short_root, machine, ["--config", str(config)])
    assert "unknown field" in stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--memory-manager-policy", "static"], 'unknown policy: "static"'),
        (["--workers", "0"], "allowed: an integer from 1 to 1024"),
        # Review of issue 38: a policy option's value that does not parse exited 1, unnamed.
        (
            ["--memory-manager-policy-options", "memory-drift-tolerance=bogus"],
            'bad value for option "memory-drift-tolerance": ',
        ),
        (
            ["--topology-manager-policy-options", "prefer-closest-numa-nodes=maybe"],
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (
            ["--topology-manager-policy-options", "max-allowable-numa-nodes=x"],
            'strconv.Atoi: parsing "x": invalid syntax',
        ),
        (
            ["--topology-manager-policy-options", "bogus=1"],
            'unknown Topology Manager Policy option: "bogus"',
        ),
    ],
)
def test_a_bad_flag_value_is_a_usage_error_for_serve_and_check(
    short_root: Path, machine: Path, args: list[str], fragment: str
) -> None:
    stderr = assert_same_refusal(short_root, machine, args, code=2)
    assert stderr.startswith("usage: numamem serve ")
    last = stderr.splitlines()[-1]
    assert last.startswith(f"numamem serve: error: {args[0]}: ") and fragment in last


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("memoryManagerPolicyOptions", "{memory-drift-tolerance: bogus}", "bad value for option"),
        ("topologyManagerPolicyOptions", "{prefer-closest-numa-nodes: maybe}", "ParseBool"),
        ("topologyManagerPolicyOptions", "{max-allowable-numa-nodes: x}", "strconv.Atoi"),
    ],
)
def test_a_bad_policy_option_in_the_file_is_refused_naming_the_field(
    short_root: Path, machine: Path, field: str, value: str, fragment: str
) -> None:
    config = short_root / "numamem.yaml"
    config.write_text(f"{field}: {value}\n")
    stderr = assert_same_refusal(short_root, machine, ["--config", str(config)])
    [line] = stderr.splitlines()
    assert line.startswith(f"numamem: {field} (in {config}, line 1): ") and fragment in line


def test_a_good_configuration_passes_and_changes_nothing(short_root: Path, machine: Path) -> None:
    """After a real daemon ran (checkpoints with a pod; the socket left by a crash)."""
    daemon = DaemonProcess(short_root, STATIC_ARGS)
    daemon.start()
    try:
        with NumamemClient(daemon.socket, timeout=10) as client:
            res = {"cpu": "1", "memory": "1Gi"}
            pod = mm.Pod(uid="p1", containers=[mm.Container(name="a", requests=res, limits=res)])
            assert client.admit(pod).admitted
    finally:
        daemon.kill()  # SIGKILL: the socket file stays, as after a crash
    assert os.path.exists(daemon.socket)
    before = tree(short_root)
    out = daemon.run_to_exit("--check", *STATIC_ARGS)
    assert tree(short_root) == before  # the stale socket too: serve removes it, --check never
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.splitlines()
    assert line.startswith("numamem: check passed: Static memory manager policy, topology from ")
    assert f"checkpoints in {daemon.state_dir} read and valid: memory_manager_state, " in line
    assert "sys_advisor_state" in line
    assert f"--socket '{daemon.socket}' is a stale socket that a start removes" in line
    assert line.endswith("nothing was bound, locked, created or written (ports were not tried)")
    assert out.stderr == ""


def test_a_check_beside_the_running_daemon_says_so(short_root: Path) -> None:
    daemon = DaemonProcess(short_root, STATIC_ARGS)
    daemon.start()
    try:
        out = daemon.run_to_exit("--check", *STATIC_ARGS)
        assert out.returncode == 0, out.stderr
        assert f"numamem (pid {daemon.proc.pid}) is running on this state dir" in out.stdout  # type: ignore[union-attr]
        daemon.wait_serving(5)  # untouched
    finally:
        assert daemon.stop() == 0


def test_a_first_start_passes_without_any_directory(short_root: Path, machine: Path) -> None:
    out = serve(short_root / "new", machine, *STATIC_ARGS, check=True)
    assert out.returncode == 0, out.stderr
    assert "read and valid: none yet" in out.stdout
    assert not (short_root / "new").exists()


# --- what the process may not do: serve's refusals that --check used to pass (review of
# issue 38). Permissions apply to root too once it has no CAP_DAC_OVERRIDE (as the shipped
# unit's user has none); as another user they apply anyway.


def read_only(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o555)


def with_lock_file(mode: int) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        (root / "state").mkdir(mode=0o700)
        (root / "state" / "numamem.lock").write_text("")
        (root / "state" / "numamem.lock").chmod(mode)

    return prepare


def state_dir_with_lock_read_only(root: Path) -> None:
    with_lock_file(0o600)(root)
    (root / "state").chmod(0o555)


def read_only_journal(root: Path) -> None:
    (root / "state").mkdir(mode=0o700)
    persister = JournalPersister(root / "state", background=False)
    persister.load()
    persister.restored()  # a snapshot and a journal, as a daemon leaves them
    persister.close()
    (root / "state" / "sys_advisor_state.journal").chmod(0o444)


def fifo_lock(root: Path) -> None:
    (root / "state").mkdir(mode=0o700)
    os.mkfifo(root / "state" / "numamem.lock", 0o600)


def lock_is_a_directory(root: Path) -> None:
    (root / "state" / "numamem.lock").mkdir(parents=True, mode=0o700)
    (root / "state").chmod(0o700)


REFUSALS: dict[str, tuple[Callable[[Path], None], list[str], bool, str]] = {
    # case: (prepare the root, serve's flags (ROOT: the root), needs NO_DAC, serve's words)
    "lock file is a directory": (
        lock_is_a_directory,
        [],
        False,
        "numamem.lock': cannot open: Is a directory",
    ),
    "lock file is a FIFO": (fifo_lock, [], False, "numamem.lock' is a FIFO, not a regular file"),
    "lock file read-only": (with_lock_file(0o444), [], True, "cannot open: Permission denied"),
    "state dir read-only, no lock file": (
        lambda root: read_only(root / "state"),
        [],
        True,
        "numamem.lock': cannot open: Permission denied",
    ),
    "state dir read-only, with a lock file": (
        state_dir_with_lock_read_only,
        [],
        True,
        "/state': cannot write checkpoints: permission denied: user ",
    ),
    "socket dir read-only": (
        lambda root: read_only(root / "run"),
        [],
        True,
        "cannot bind the unix socket: permission denied: user ",
    ),
    "metrics socket dir read-only": (
        lambda root: read_only(root / "m"),
        ["--metrics-socket", "ROOT/m/metrics.sock"],
        True,
        "metrics.sock': cannot listen: Permission denied",
    ),
    "podresources socket dir read-only": (
        lambda root: read_only(root / "pr"),
        ["--podresources-socket", "ROOT/pr/pr.sock"],
        True,
        "pr.sock': cannot bind the unix socket: permission denied: user ",
    ),
    "metacache journal read-only": (
        read_only_journal,
        [],
        True,
        "cannot open the metacache journal ",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_serve_may_not_do_is_refused_by_the_check_in_serves_words(
    short_root: Path, machine: Path, case: str
) -> None:
    prepare, flags, no_dac, fragment = REFUSALS[case]
    prepare(short_root)
    args = [flag.replace("ROOT", str(short_root)) for flag in flags]
    try:
        stderr = assert_same_refusal(
            short_root, machine, args, prefix=no_dac_override() if no_dac else ()
        )
    finally:
        for path in short_root.rglob("*"):  # let the fixture remove the tree, as any user
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o700)
    [line] = stderr.splitlines()
    assert fragment in line


@pytest.mark.skipif(
    not can_mount_tmpfs(), reason="needs a mount namespace (unshare --mount, tmpfs)"
)
def test_a_state_dir_on_a_read_only_file_system_is_refused_by_the_check(
    short_root: Path, machine: Path
) -> None:
    """Each run in a mount namespace of its own, the state dir a read-only tmpfs there."""
    state = short_root / "state"
    state.mkdir(mode=0o700)
    mount_read_only = 'mount -t tmpfs -o ro,mode=0700 tmpfs "$0" && exec "$@"'
    prefix = ["unshare", "--mount", "--", "sh", "-c", mount_read_only, str(state)]
    stderr = assert_same_refusal(short_root, machine, [], prefix=prefix)
    assert "numamem.lock': cannot open: Read-only file system" in stderr
