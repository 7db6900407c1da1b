"""A start that writes before it is accepted (the drift settle of ``finish_start``) keeps the
evidence: an unusable container map is set aside before any write may replace it, in both
commit modes. The journal mode's first save writes both files (its settle), so on 488fcb0
it replaced the unusable map and only the log named what had been there (the journal case
below failed there; the replace case shows the two modes alike)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from numamem.checkpoint.fs import FileSystem, StrPath
from numamem.checkpoint.mmstore import CONTAINERS_FILE
from numamem.errors import PersistenceError
from numamem.topology import HugePagePool, Machine, NUMANode
from tests.unit.test_namesfile import manager, named

GI = 1 << 30
CORRUPT = b'{"containers":{"cid":["u1","a"]},"checksum":1}'


def grown() -> Machine:
    """The test's two nodes with 1 GiB more on each: a drift the restart settles by a write."""
    return Machine(tuple(NUMANode(i, 9 * GI, (HugePagePool(1048576, 4, 4),)) for i in range(2)))


def seeded(directory: Path) -> None:
    """A replace-mode daemon's files (a first journal-mode start has no journal: it settles)."""
    m = manager(directory)
    assert m.admit(named("u1")).result.admitted
    m.add_container(named("u1"), "a", "cid")
    m.store.close()
    (directory / CONTAINERS_FILE).write_bytes(CORRUPT)


def aside(directory: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.iterdir()) if ".corrupt-" in p.name]


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
def test_a_settling_start_sets_an_unusable_map_aside_before_writing(
    tmp_path: Path, journal: bool
) -> None:
    seeded(tmp_path)
    m = manager(tmp_path, grown(), journal=journal)
    assert m.store.writes >= 1  # the drift was written before restored()
    assert m.get_memory("u1", "a"), "the pod's memory is kept"
    assert m.container_map() == {}
    assert aside(tmp_path) == [CORRUPT], "the unusable map is the evidence: kept, byte for byte"
    m.store.close()
    again = manager(tmp_path, grown(), journal=journal)
    assert again.get_memory("u1", "a") == m.get_memory("u1", "a")
    assert aside(tmp_path) == [CORRUPT], "set aside once, not again at the next start"


class NoMoves(FileSystem):
    """Links and renames of the container map fail with ``error`` (setting it aside)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def link(self, src: StrPath, dst: StrPath) -> None:
        self._check(src)
        super().link(src, dst)

    def rename(self, src: StrPath, dst: StrPath) -> None:
        self._check(src)
        super().rename(src, dst)

    def _check(self, src: StrPath) -> None:
        if Path(src).name == CONTAINERS_FILE:
            raise self.error


@pytest.mark.parametrize("journal", [False, True], ids=["replace", "journal"])
@pytest.mark.parametrize(
    "error",
    [
        *(
            OSError(code, os.strerror(code))
            for code in (errno.EIO, errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM)
        ),
        RuntimeError("not an OSError"),
    ],
    ids=lambda e: errno.errorcode[e.errno] if isinstance(e, OSError) else "non-OSError",
)
def test_a_map_that_cannot_be_set_aside_fails_the_settling_start_and_writes_nothing(
    tmp_path: Path, journal: bool, error: BaseException
) -> None:
    """The start's save is refused (the daemon does not start): an OSError as a
    PersistenceError naming the map and the errno, anything else as itself. The files are
    as they were, so a start once the disk is mended reads them and sets the map aside."""
    seeded(tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(type(error) if not isinstance(error, OSError) else PersistenceError) as info:
        manager(tmp_path, grown(), journal=journal, fs=NoMoves(error))
    if isinstance(error, OSError):
        text = str(info.value)
        assert f"cannot set the damaged container map '{tmp_path / CONTAINERS_FILE}' aside" in text
        assert errno.errorcode[error.errno] in text and "the change was not applied" in text
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    m = manager(tmp_path, grown(), journal=journal)
    assert m.get_memory("u1", "a")
    assert aside(tmp_path) == [CORRUPT]
