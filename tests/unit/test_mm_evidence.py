"""Evidence of damage is kept, whatever writes first: a durable copy of an unusable container
map (from its file or from the journal's last record) and of a damaged pod names file is
made before any write may replace them, and the damaged files stay in place until then, so
a start refused at any step leaves what a restart reads.

On 488fcb0 a journal-mode start that settled before ``restored()`` replaced an unusable map
(only the log named what had been there). The first fix (7719401) moved the files aside
instead; its hostile review showed that a refused start then lost the pod names a restart
reads, that a map from the journal moved the healthy file away (and a killed start then
left every later start refused), and that a failed directory sync was reported as a failed
move. Each of those is a test below."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from numamem.checkpoint import filestore
from numamem.checkpoint.filestore import keep_aside
from numamem.checkpoint.fs import FileSystem, StrPath
from numamem.checkpoint.mmjournal import HEADER, JOURNAL_FILE, read_journal, record
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
from numamem.checkpoint.namesfile import NAMES_FILE, encode_names
from numamem.cli.state_check import check_files
from numamem.errors import PersistenceError
from numamem.topology import HugePagePool, Machine, NUMANode
from tests.unit.test_fault_matrix import Cell, injector
from tests.unit.test_memorymanager import two_nodes
from tests.unit.test_namesfile import manager, named, unstarted

GI = 1 << 30
CORRUPT = b'{"containers":{"cid":["u1","a"]},"checksum":1}'
KEPT_NAMES = {"u1": ("shop", "web-u1")}
"""What a restart reads of :func:`damage_names`'s file: u1's name, before the damage."""


def grown() -> Machine:
    """The test's two nodes with 1 GiB more on each: a drift the restart settles by a write."""
    return Machine(tuple(NUMANode(i, 9 * GI, (HugePagePool(1048576, 4, 4),)) for i in range(2)))


def seeded(directory: Path, **store: object) -> None:
    """Pods u1-u3 named, u1's container with the id "cid"; stopped gracefully."""
    m = manager(directory, **store)
    for uid in ("u1", "u2", "u3"):
        assert m.admit(named(uid)).result.admitted
    m.add_container(named("u1"), "a", "cid")
    m.store.close()


def damage_names(directory: Path) -> bytes:
    """u2's record fails its check: u1's name is read, u3's (after the damage) is lost."""
    data = bytearray((directory / NAMES_FILE).read_bytes())
    data[data.index(b'"u2"') + 1] = ord("X")
    (directory / NAMES_FILE).write_bytes(bytes(data))
    return bytes(data)


def damaged(directory: Path) -> bytes:
    """Seeded (replace mode: a first journal-mode start has no journal, so it settles), an
    unusable map and a damaged names file; the names file's bytes."""
    seeded(directory)
    (directory / CONTAINERS_FILE).write_bytes(CORRUPT)
    return damage_names(directory)


def copies(directory: Path, name: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.glob(f"{name}.corrupt-*"))]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
@pytest.mark.parametrize("drift", [False, True], ids=["restored", "settle-first"])
def test_copies_of_the_damaged_files_are_kept_once_and_what_was_readable_stays(
    tmp_path: Path, journal: bool, drift: bool
) -> None:
    """settle-first: the start writes the drift before restored() (the journal mode's first
    save writes both files); restored: nothing to write, restored() keeps the copies."""
    names = damaged(tmp_path)
    m = manager(tmp_path, grown() if drift else None, journal=journal)
    assert (m.store.writes > 0) is drift  # restored() alone writes no state
    if not drift:  # restored() replaced the damaged names file and removed the unusable map
        assert (tmp_path / NAMES_FILE).read_bytes() == encode_names(KEPT_NAMES)
        assert not (tmp_path / CONTAINERS_FILE).exists()
    assert m.get_memory("u1", "a") and m.container_map() == {}
    assert m.pod_names() == KEPT_NAMES
    assert copies(tmp_path, CONTAINERS_FILE) == [CORRUPT], "the unusable map, byte for byte"
    assert copies(tmp_path, NAMES_FILE) == [names]
    m.store.close()
    again = manager(tmp_path, grown() if drift else None, journal=journal)
    assert again.pod_names() == KEPT_NAMES and again.get_memory("u1", "a")
    assert len(copies(tmp_path, CONTAINERS_FILE)) == len(copies(tmp_path, NAMES_FILE)) == 1, (
        "kept once: the damaged files were replaced, not read again"
    )


class Failing(FileSystem):
    """Fails ``op`` of the copy of ``which`` (a file name) with ``error``: "open", "write",
    "fsync" or "close" of its temp file (the first temp of ``which``: the copy is made
    before any write), "place": its link to the copy's name and the rename tried where
    links fail, or "dirsync" after it."""

    def __init__(self, op: str, error: BaseException, which: str) -> None:
        self.op, self.error, self.which = op, error, which
        self.copy_fd: int | None = None
        self.dir_fd: int | None = None
        self.temps = 0
        self.linked = False

    def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
        name = Path(path).name
        is_copy = name.startswith(f".{self.which}.tmp-") and self.temps == 0
        if is_copy:
            self.temps += 1
            if self.op == "open":
                raise self.error
        fd = super().open(path, flags, mode)
        if is_copy:
            self.copy_fd = fd
        elif flags & os.O_DIRECTORY and self.linked:
            self.dir_fd, self.linked = fd, False  # the sync that follows the copy's link
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if (self.op, fd) == ("write", self.copy_fd):
            raise self.error
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if (self.op, fd) in (("fsync", self.copy_fd), ("dirsync", self.dir_fd)):
            raise self.error
        super().fsync(fd)

    def close(self, fd: int) -> None:
        super().close(fd)
        if fd == self.copy_fd:
            self.copy_fd = None
            if self.op == "close":
                raise self.error
        if fd == self.dir_fd:
            self.dir_fd = None

    def link(self, src: StrPath, dst: StrPath) -> None:
        self._place(dst)
        super().link(src, dst)

    def rename(self, src: StrPath, dst: StrPath) -> None:  # where hard links fail
        self._place(dst)
        super().rename(src, dst)

    def _place(self, dst: StrPath) -> None:
        if Path(dst).name.startswith(f"{self.which}.corrupt-"):
            if self.op == "place":
                raise self.error
            self.linked = True


ERRORS = [
    *(OSError(code, os.strerror(code)) for code in (errno.EIO, errno.ENOSPC, errno.EDQUOT,
                                                     errno.EROFS, errno.EACCES, errno.EMFILE)),
    RuntimeError("not an OSError"),
]  # fmt: skip


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
@pytest.mark.parametrize("which", [CONTAINERS_FILE, NAMES_FILE])
@pytest.mark.parametrize("op", ["open", "write", "fsync", "close", "place", "dirsync"])
@pytest.mark.parametrize(
    "error",
    ERRORS,
    ids=lambda e: errno.errorcode[e.errno] if isinstance(e, OSError) else "non-OSError",
)
def test_a_copy_that_cannot_be_kept_refuses_the_start_and_a_restart_reads_the_same(
    tmp_path: Path, journal: bool, which: str, op: str, error: BaseException
) -> None:
    """Every step of keeping either copy, each kind of error, at a start that settles first:
    a PersistenceError naming the file and the error; the state files are as they were (a
    copy may be left only when its directory sync failed: it is whole), and the start after
    the disk is mended reads the same pods and names and keeps both copies."""
    names = damaged(tmp_path)
    before = files(tmp_path)
    with pytest.raises(PersistenceError) as info:
        manager(tmp_path, grown(), journal=journal, fs=Failing(op, error, which))
    text = str(info.value)
    what = "container map" if which == CONTAINERS_FILE else "pod names file"
    assert f"cannot keep a copy of the damaged {what} '{tmp_path / which}'" in text
    assert "the change was not applied" in text
    assert (
        errno.errorcode[error.errno] if isinstance(error, OSError) else "not an OSError"
    ) in text
    after = {k: v for k, v in files(tmp_path).items() if ".corrupt-" not in k}
    assert after == before, "a refused start changed what a restart reads"
    left = copies(tmp_path, which)
    assert left == ([CORRUPT if which == CONTAINERS_FILE else names] if op == "dirsync" else [])
    m = manager(tmp_path, grown(), journal=journal)
    assert m.pod_names() == KEPT_NAMES and m.get_memory("u1", "a")
    assert copies(tmp_path, CONTAINERS_FILE)[-1:] == [CORRUPT]
    assert copies(tmp_path, NAMES_FILE)[-1:] == [names]


class NoStateTemp(FileSystem):
    """The state file's temp file cannot be created (ENOSPC): the save after the copies
    fails."""

    def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
        if Path(path).name.startswith(f".{STATE_FILE}.tmp-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().open(path, flags, mode)


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
def test_a_save_failing_after_the_copies_loses_no_name(tmp_path: Path, journal: bool) -> None:
    """(On 7719401 the names file was moved away first, and the kept names were lost.)"""
    names = damaged(tmp_path)
    with pytest.raises(PersistenceError, match=f"{STATE_FILE}.*No space left on device"):
        manager(tmp_path, grown(), journal=journal, fs=NoStateTemp())
    assert copies(tmp_path, CONTAINERS_FILE) == [CORRUPT]
    assert copies(tmp_path, NAMES_FILE) == [names]
    assert manager(tmp_path, grown(), journal=journal).pod_names() == KEPT_NAMES


def journal_with_bad_map(directory: Path) -> bytes:
    """A journal whose last record (its own check passes) holds an unusable map; the map file
    beside it is healthy and older. Returns that file's bytes."""
    seeded(directory, journal=True)
    m = manager(directory, journal=True)  # records stay: no graceful fold
    assert m.admit(named("u4")).result.admitted
    found = read_journal((directory / JOURNAL_FILE).read_bytes(), directory / JOURNAL_FILE)
    assert found.state is not None
    (directory / JOURNAL_FILE).write_bytes(HEADER + record(found.state, CORRUPT))
    return (directory / CONTAINERS_FILE).read_bytes()


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
@pytest.mark.parametrize("drift", [False, True], ids=["restored", "settle-first"])
def test_a_map_from_the_journal_is_the_one_kept_and_the_healthy_file_is_not_touched(
    tmp_path: Path, journal: bool, drift: bool
) -> None:
    healthy = journal_with_bad_map(tmp_path)
    m = manager(tmp_path, grown() if drift else None, journal=journal)
    assert m.get_memory("u4", "a") and m.container_map() == {}
    assert copies(tmp_path, CONTAINERS_FILE) == [CORRUPT], "the journal's map, not the file"
    if journal and not drift:
        assert (tmp_path / CONTAINERS_FILE).read_bytes() == healthy
    m.store.close()


@pytest.mark.parametrize("second", [False, True], ids=["then-replace", "then-journal"])
def test_a_start_killed_after_keeping_the_journals_map_leaves_the_next_start_working(
    tmp_path: Path, second: bool
) -> None:
    """(On 7719401 the healthy file was moved away, and every later start failed on it.)"""
    journal_with_bad_map(tmp_path)
    manager(tmp_path, journal=True)  # killed: no close()
    m = manager(tmp_path, grown(), journal=second)
    assert m.get_memory("u4", "a")
    assert CORRUPT in copies(tmp_path, CONTAINERS_FILE)


# --- the second review (of 93dc8ee) ---------------------------------------------------------


def refused_then_stopped(directory: Path, machine: Machine | None = None, **store: object) -> None:
    """A start refused with PersistenceError, then the stop the daemon makes after it
    (Server.shutdown -> the component's stop -> the store's close, which may fold)."""
    m = unstarted(directory, machine or grown(), **store)
    try:
        with pytest.raises(PersistenceError):
            m.start()
    finally:
        m.store.faults = None
        m.store.close()


@pytest.mark.parametrize("source", ["journal-record", "map-file"])
def test_a_start_refused_in_restored_then_stopped_changes_nothing(
    tmp_path: Path, source: str
) -> None:
    """No drift: the copy is made in restored(), and fails. (On 93dc8ee restored() had marked
    the state accepted first, so the stop folded the journal: the damaged map was replaced
    with no copy kept.)"""
    if source == "journal-record":
        journal_with_bad_map(tmp_path)
    else:
        seeded(tmp_path)
        (tmp_path / CONTAINERS_FILE).write_bytes(CORRUPT)
    before = files(tmp_path)
    fs = Failing("write", OSError(errno.EIO, os.strerror(errno.EIO)), CONTAINERS_FILE)
    refused_then_stopped(tmp_path, two_nodes(), journal=True, fs=fs)
    assert files(tmp_path) == before


def test_a_save_at_start_that_fails_then_the_stop_changes_nothing(tmp_path: Path) -> None:
    """(On 93dc8ee save() marked the state accepted before it failed; the stop then folded.)"""
    journal_with_bad_map(tmp_path)
    before = files(tmp_path)

    fails = injector(Cell(JOURNAL_FILE, "start", "open"), "EIO")
    refused_then_stopped(tmp_path, journal=True, faults=fails)
    after = {k: v for k, v in files(tmp_path).items() if ".corrupt-" not in k}
    assert after == before


SURROGATE = b'{"containers":{"cid":["u1","\\ud800"]},"checksum":1}'


def test_a_map_that_cannot_be_encoded_is_unusable_not_a_crash(tmp_path: Path) -> None:
    """A lone surrogate escape decodes but cannot be encoded for the checksum. (It raised
    UnicodeEncodeError out of read_container_file: the start and `state verify` crashed.)"""
    seeded(tmp_path)
    (tmp_path / CONTAINERS_FILE).write_bytes(SURROGATE)
    report = check_files(tmp_path)
    assert any("cannot decode container map" in p for p in report["problems"])
    m = manager(tmp_path)
    assert m.container_map() == {} and m.get_memory("u1", "a")
    assert copies(tmp_path, CONTAINERS_FILE) == [SURROGATE]


def test_copies_do_not_pile_up_over_refused_or_killed_starts(tmp_path: Path) -> None:
    """A copy is kept once per content: starts refused on a failing directory sync, and
    journal-mode starts killed before their first change (which copy the journal's map at
    each start), leave one copy each."""
    seeded(tmp_path)
    (tmp_path / CONTAINERS_FILE).write_bytes(CORRUPT)

    class NoDirSyncs(FileSystem):
        def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
            if flags & os.O_DIRECTORY:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return super().open(path, flags, mode)

    for _ in range(5):
        with pytest.raises(PersistenceError, match="cannot keep a copy of the damaged"):
            manager(tmp_path, fs=NoDirSyncs())
    assert copies(tmp_path, CONTAINERS_FILE) == [CORRUPT]
    journaled = tmp_path / "journaled"
    journaled.mkdir()
    journal_with_bad_map(journaled)
    for _ in range(5):
        manager(journaled, journal=True)  # killed: no close()
    assert copies(journaled, CONTAINERS_FILE) == [CORRUPT]


def test_a_start_killed_in_the_middle_of_a_copy_leaves_no_partial_copy(tmp_path: Path) -> None:
    """The copy is written to a temp file and linked to its name once whole: a process
    killed after 10 bytes leaves a temp, which the next start removes."""
    seeded(tmp_path)
    (tmp_path / CONTAINERS_FILE).write_bytes(CORRUPT)
    killed = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from numamem.checkpoint.fs import FileSystem
        from tests.unit.test_namesfile import manager

        class Killed(FileSystem):
            def write(self, fd, data):
                name = os.readlink(f"/proc/self/fd/{{fd}}").rsplit("/", 1)[1]
                if name.startswith(".{CONTAINERS_FILE}.tmp-"):
                    super().write(fd, bytes(data)[:10])
                    os._exit(9)  # as SIGKILL: nothing else runs
                return super().write(fd, data)

        manager(Path({str(tmp_path)!r}), fs=Killed())
    """)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}"}
    assert (
        subprocess.run([sys.executable, "-c", killed], check=False, env=env, cwd=root).returncode
        == 9
    )
    assert copies(tmp_path, CONTAINERS_FILE) == []
    assert list(tmp_path.glob(f".{CONTAINERS_FILE}.tmp-*")), "the killed copy's temp"
    manager(tmp_path)
    assert copies(tmp_path, CONTAINERS_FILE) == [CORRUPT]
    assert not list(tmp_path.glob(f".{CONTAINERS_FILE}.tmp-*"))


def test_keep_aside_never_replaces_a_file_and_works_without_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two different copies made within the same microsecond (a frozen clock) keep both,
    with hard links and without them (the rename fallback)."""
    frozen = types.SimpleNamespace(
        gmtime=lambda: time.gmtime(0), strftime=time.strftime, time_ns=lambda: 0
    )
    monkeypatch.setattr(filestore, "time", frozen)

    class NoHardLinks(FileSystem):
        def link(self, src: StrPath, dst: StrPath) -> None:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    for fs in (FileSystem(), NoHardLinks()):
        target = tmp_path / type(fs).__name__
        first = keep_aside(target, b"first", "corrupt", fs)
        second = keep_aside(target, b"second", "corrupt", fs)
        assert first.name == f"{target.name}.corrupt-19700101T000000.000000Z"
        assert second.name == first.name + "-1"
        assert (first.read_bytes(), second.read_bytes()) == (b"first", b"second")
        assert keep_aside(target, b"first", "corrupt", fs) == first  # the same bytes: kept once
        assert not target.exists() and not list(tmp_path.glob(".*.tmp-*"))


def test_keep_aside_reuses_only_a_regular_file_with_the_same_bytes_and_syncs_it(
    tmp_path: Path,
) -> None:
    """Whatever else matches a copy's name (a directory, a FIFO, a link, a different or
    truncated file) is neither read into nor reused: a new copy is made, without blocking.
    A reused copy is fsynced itself, not only its directory (it may be an outside copy)."""
    target = tmp_path / "damaged"
    (tmp_path / "damaged.corrupt-a-directory").mkdir()
    os.mkfifo(tmp_path / "damaged.corrupt-a-fifo")  # read, it would block the start forever
    (tmp_path / "elsewhere").write_bytes(b"evidence")
    (tmp_path / "damaged.corrupt-a-link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "damaged.corrupt-shorter").write_bytes(b"evid")
    kept = keep_aside(target, b"evidence", "corrupt")
    assert kept.read_bytes() == b"evidence" and not kept.is_symlink()
    assert kept.name not in {"damaged.corrupt-a-link", "damaged.corrupt-shorter"}

    class Syncs(FileSystem):
        def __init__(self) -> None:
            self.synced: list[str] = []
            self.names: dict[int, str] = {}

        def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
            fd = super().open(path, flags, mode)
            self.names[fd] = Path(path).name
            return fd

        def fsync(self, fd: int) -> None:
            self.synced.append(self.names[fd])
            super().fsync(fd)

    fs = Syncs()
    assert keep_aside(target, b"evidence", "corrupt", fs) == kept
    assert fs.synced == [kept.name, tmp_path.name]
