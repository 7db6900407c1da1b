"""``numamem serve --check`` in-process (api/precheck.py): for each way a start is refused, the
check refuses with the very text of the daemon's own start, and touches nothing (names, modes,
bytes and mtimes of every file under the test's root stay as they were)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from numamem.api.app import build_components
from numamem.api.metacache import MetaCacheComponent
from numamem.api.precheck import (
    READ_ONLY,
    CheckReport,
    ReadOnlyFileSystem,
    check_start,
    flock_holder,
)
from numamem.api.server import Daemon
from numamem.config.model import Config
from numamem.config.syntax import parse_reserved_memory
from numamem.errors import CheckpointError, NumamemError, StartupError
from numamem.metacache.journal import JOURNAL_FILE
from numamem.metacache.journal_load import READ_ATTEMPTS
from numamem.metacache.persistence import STATE_FILE
from numamem.metacache.types import ContainerInfo
from numamem.testing.server import daemon_component, default_config, serve_in_process
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import tree


@pytest.fixture
def config(short_root: Path) -> Config:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(2))
    return replace(
        default_config(short_root, sysfs),
        socket=str(short_root / "run" / "n.sock"),
        state_dir=str(short_root / "state"),
    )


def check(cfg: Config) -> CheckReport:
    return check_start(cfg, lambda c: build_components(c, READ_ONLY))


def refusals(cfg: Config, root: Path) -> tuple[str, str]:
    """(the check's refusal, the start's), the check changing nothing under ``root``."""
    before = tree(root)
    with pytest.raises(NumamemError) as checked:
        check(cfg)
    assert tree(root) == before
    daemon = Daemon(cfg, build_components, set_umask=False)
    try:
        with pytest.raises(NumamemError) as started:
            daemon.start()
    finally:
        daemon.shutdown()
    return str(checked.value), str(started.value)


def corrupt(name: str, data: str) -> Callable[[Config, Path], Config]:
    def prepare(cfg: Config, root: Path) -> Config:
        state = Path(cfg.state_dir)
        state.mkdir(mode=0o700, exist_ok=True)
        (state / name).write_text(data)
        return cfg

    return prepare


def changed(**fields: object) -> Callable[[Config, Path], Config]:
    return lambda cfg, root: replace(cfg, **fields)


def a_file_at(
    where: Callable[[Config], str], *, live: bool = False
) -> Callable[[Config, Path], Config]:
    def prepare(cfg: Config, root: Path) -> Config:
        path = Path(where(cfg))
        path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        if live:
            keep = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            keep.bind(str(path))
            keep.listen(4)
            LISTENERS.append(keep)
        else:
            path.write_text("precious")
        return cfg

    return prepare


LISTENERS: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_listeners() -> Iterator[None]:
    yield
    while LISTENERS:
        LISTENERS.pop().close()


def broken_sysfs(cfg: Config, root: Path) -> Config:
    (Path(cfg.sysfs_root) / "devices/system/node/node1/distance").write_text("10 x\n")
    return cfg


def shared_state_dir(cfg: Config, root: Path) -> Config:
    Path(cfg.state_dir).mkdir(mode=0o700)
    os.chmod(cfg.state_dir, 0o777)
    return cfg


def socket_dir_is_a_file(cfg: Config, root: Path) -> Config:
    Path(cfg.socket).parent.write_text("not a directory")
    return cfg


def state_dir_under_a_file(cfg: Config, root: Path) -> Config:
    (root / "plain").write_text("a file")
    return replace(cfg, state_dir=str(root / "plain" / "state"))


CASES = {
    "reservation sum": (
        changed(reserved_memory=parse_reserved_memory("0:memory=2Gi", "--reserved-memory")),
        "determined by Node Allocatable feature",
    ),
    "topology option": (
        changed(topology_manager_policy_options=(("bogus", "1"),)),
        "unknown Topology Manager Policy option",
    ),
    "memory manager option": (
        changed(memory_manager_policy_options=(("nope", "1"),)),
        "unknown Memory Manager Policy option",
    ),
    "corrupt state": (
        corrupt("memory_manager_state", '{"policyName":"None","checksum":1}'),
        "could not restore state from checkpoint",
    ),
    "other policy's state": (
        changed(memory_manager_policy="None"),
        None,  # prepared by a real run below
    ),
    "corrupt metacache": (
        corrupt("sys_advisor_state", "not json"),
        "could not restore the metacache",
    ),
    "sysfs": (broken_sysfs, "cannot convert x to int"),
    "shared state dir": (shared_state_dir, "another user could replace numamem's files"),
    "socket dir is a file": (socket_dir_is_a_file, "exists and is not a directory"),
    "state dir under a file": (state_dir_under_a_file, "Not a directory"),
    "file at the socket": (a_file_at(lambda c: c.socket), "exists and is not a socket"),
    "live socket": (a_file_at(lambda c: c.socket, live=True), "is served by another live process"),
    "file at the metrics socket": (
        lambda cfg, root: a_file_at(lambda c: str(root / "m" / "metrics.sock"))(
            replace(cfg, metrics_socket=str(root / "m" / "metrics.sock")), root
        ),
        "--metrics-socket",
    ),
    "file at the podresources socket": (
        lambda cfg, root: a_file_at(lambda c: str(root / "pr" / "pr.sock"))(
            replace(cfg, podresources_socket=str(root / "pr" / "pr.sock")), root
        ),
        "--podresources-socket",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_check_refuses_with_the_starts_own_words_and_changes_nothing(
    config: Config, short_root: Path, case: str
) -> None:
    prepare, fragment = CASES[case]
    if fragment is None:  # a state written under Static, checked under None
        with serve_in_process(root=short_root, state_dir=config.state_dir, socket=config.socket):
            pass
        fragment = 'differs from state checkpoint policy "Static"'
    cfg = prepare(config, short_root)
    checked, started = refusals(cfg, short_root)
    assert checked == started
    assert fragment in checked


def test_a_good_state_passes_and_is_left_as_it_was(config: Config, short_root: Path) -> None:
    with serve_in_process(
        root=short_root, state_dir=config.state_dir, socket=config.socket
    ) as server:
        res = {"cpu": "1", "memory": "1Gi"}
        pod = mm.Pod(uid="p1", containers=[mm.Container(name="a", requests=res, limits=res)])
        assert server.client.admit(pod).admitted
        server.client.add_container(pod, "a", "containerd://abc")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(config.socket)
    stale.close()  # what a crash leaves
    before = tree(short_root)
    report = check(config)
    assert tree(short_root) == before
    assert report.checkpoints[:2] == ["memory_manager_state", "numamem_containers"]
    assert "sys_advisor_state" in report.checkpoints
    assert report.notes == [f"--socket '{config.socket}' is a stale socket that a start removes"]


def test_a_corrupt_metacache_that_a_start_would_set_aside_is_a_note(
    config: Config, short_root: Path
) -> None:
    corrupt("sys_advisor_state", "not json")(config, short_root)
    before = tree(short_root)
    report = check(replace(config, metacache_discard_corrupt_state=True))
    assert tree(short_root) == before
    [note] = report.notes
    assert note.startswith(
        "the metacache checkpoint is unusable and would be set aside "
        "(--metacache-discard-corrupt-state): could not restore the metacache"
    )


def test_a_running_daemon_is_a_note_and_its_sockets_are_not_probed(config: Config) -> None:
    daemon = Daemon(config, build_components, set_umask=False)
    daemon.start()
    try:
        report = check(config)
    finally:
        daemon.shutdown()
    [note] = report.notes
    assert note.startswith(f"numamem (pid {os.getpid()}) is running on this state dir")


class CompactingBetweenReads(ReadOnlyFileSystem):
    """Runs the live daemon's compactor just before each read of the journal (after the
    snapshot's), for the first ``times`` reads."""

    def __init__(self, meta: MetaCacheComponent, times: int) -> None:
        self.meta, self.left, self.compactions = meta, times, 0

    def read(self, path: Path) -> bytes | None:
        if path.name == JOURNAL_FILE and self.left and self.meta.persister is not None:
            self.left -= 1
            self.meta.cache.set_container_info(  # a change, so each compaction is new bytes
                f"pod-c{self.left}",
                "c",
                ContainerInfo(pod_uid=f"pod-c{self.left}", container_name="c"),
            )
            self.meta.persister.compact()
            self.compactions += 1
        return super().read(path)


@pytest.mark.parametrize("compactions", [1, 3, 1000])
def test_a_compaction_between_the_checks_two_reads_is_no_corruption(
    config: Config, compactions: int
) -> None:
    """Review 38b: the check beside a running daemon read the snapshot, the daemon compacted,
    the check read the new journal: "the journal starts after record 5 but the snapshot
    holds only 0 ... move both files away": a healthy state called corrupt. A pair that
    changed while being read is read again, :data:`READ_ATTEMPTS` times at most (each
    attempt reads the journal twice: the pair, and again to see whether it changed)."""
    daemon = Daemon(config, build_components, set_umask=False)
    daemon.start()
    try:
        meta = daemon_component(daemon, MetaCacheComponent)
        for i in range(5):
            meta.cache.set_container_info(
                f"pod{i}", "c", ContainerInfo(pod_uid=f"pod{i}", container_name="c")
            )
        fs = CompactingBetweenReads(meta, compactions)
        if compactions < 2 * READ_ATTEMPTS:
            report = check_start(config, lambda c: build_components(c, fs))
            assert "is running on this state dir" in report.notes[0]
            assert fs.compactions == compactions
        else:  # changing at every read: judged after the last attempt
            with pytest.raises(CheckpointError, match="do not belong together"):
                check_start(config, lambda c: build_components(c, fs))
            assert fs.compactions == 2 * READ_ATTEMPTS
        assert (Path(config.state_dir) / STATE_FILE).exists()
    finally:
        daemon.shutdown()


def test_flock_holder_reads_proc_locks(tmp_path: Path) -> None:
    lock = tmp_path / "numamem.lock"
    lock.write_text("")
    st = os.stat(lock)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: POSIX  ADVISORY  WRITE 7 {dev} 0 EOF\n"
        f"2: -> FLOCK  ADVISORY  WRITE 8 {dev} 0 EOF\n"
        f"3: FLOCK  ADVISORY  WRITE 1234 {dev} 0 EOF\n"
    )
    assert flock_holder(st, locks) == 1234
    locks.write_text("3: FLOCK  ADVISORY  WRITE 1234 00:00:1 0 EOF\n")
    assert flock_holder(st, locks) is None
    assert flock_holder(st, tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("open for writing", lambda p: READ_ONLY.open(p, os.O_WRONLY | os.O_CREAT)),
        ("rename", lambda p: READ_ONLY.rename(p, p)),
        ("replace", lambda p: READ_ONLY.replace(p, p)),
        ("remove", READ_ONLY.unlink),
        ("link", lambda p: READ_ONLY.link(p, p)),
    ],
)
def test_the_checks_file_system_refuses_every_write(
    tmp_path: Path, operation: str, call: Callable[[Path], object]
) -> None:
    target = tmp_path / "f"
    target.write_text("kept")
    with pytest.raises(StartupError, match=f"would {operation} "):
        call(target)
    assert target.read_text() == "kept" and os.listdir(tmp_path) == ["f"]
    assert READ_ONLY.read(target) == b"kept"
