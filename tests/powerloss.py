"""A power-loss simulation: record every file operation, rebuild what a power cut keeps.

A process crash (the crash harness's SIGKILL) keeps the page cache: every write that
returned is there. A power cut keeps only what was made durable, the approach of ALICE
and LazyFS (which found such bugs in etcd, PostgreSQL and Redis):

* a file's data is durable up to its last ``fsync``; what was written after it is lost, or
  kept in part: a prefix of the later writes, the last of them torn;
* a directory entry (a create, a rename, a link, an unlink) is durable once its directory
  was fsynced; the entries changed after that are lost, or a prefix of them is kept (the
  order a journaling file system commits them in);
* what existed when recording started is durable.

:class:`RecordingFileSystem` is a :class:`numamem.checkpoint.fs.FileSystem` that performs
each operation and appends it to :attr:`RecordingFileSystem.log`; :func:`cut` replays the
first operations of a log onto a :class:`Disk` and :meth:`Disk.variant` says what one power
cut there could leave. Pure, apart from the recorder's own real operations.
"""

from __future__ import annotations

import os
import random
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from numamem.checkpoint.fs import FileSystem


@dataclass(frozen=True)
class Op:
    kind: str
    """create, write, truncate, fsync, dirsync, rename, link or unlink."""
    inode: int = -1
    name: str = ""
    other: str = ""
    offset: int = 0
    data: bytes = b""


@dataclass
class _Open:
    inode: int  # -1: the directory
    append: bool
    position: int = 0


class RecordingFileSystem(FileSystem):
    """Performs every operation in ``directory`` and records it (thread-safe, in order)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.initial: dict[str, bytes] = {
            p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()
        }
        self._names: dict[str, int] = {}
        self._next = 0
        for name in sorted(self.initial):
            self._names[name] = self._new_inode()
        self._sizes: dict[int, int] = {self._names[n]: len(d) for n, d in self.initial.items()}
        self._fds: dict[int, _Open] = {}
        self.log: list[Op] = []
        self._lock = threading.Lock()
        self._short: Callable[[], Exception] | None = None
        self._torn = False

    def short_write(self, fault: Callable[[], Exception] | None) -> None:
        """Arm (or, with None, disarm) a short write: the next write of more than one byte
        writes half of it, and the write after that raises ``fault()`` (a torn prefix)."""
        with self._lock:
            self._short, self._torn = fault, False

    def _new_inode(self) -> int:
        self._next += 1
        return self._next

    def _name(self, path: Path) -> str:
        if Path(path).parent != self.directory:
            raise AssertionError(f"{path}: outside the recorded directory {self.directory}")
        return Path(path).name

    def open(self, path: Path, flags: int, mode: int = 0o600) -> int:
        with self._lock:
            fd = super().open(path, flags, mode)
            if Path(path) == self.directory or flags & os.O_DIRECTORY:
                self._fds[fd] = _Open(-1, False)
                return fd
            name = self._name(path)
            if name not in self._names or flags & os.O_EXCL:
                inode = self._new_inode()
                self._names[name] = inode
                self._sizes[inode] = 0
                self.log.append(Op("create", inode, name))
            inode = self._names[name]
            if flags & os.O_TRUNC:
                self._sizes[inode] = 0
                self.log.append(Op("truncate", inode, offset=0))
            self._fds[fd] = _Open(inode, bool(flags & os.O_APPEND))
            return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        with self._lock:
            if self._short is not None and self._torn:
                fault, self._short = self._short, None
                raise fault()
            if self._short is not None and len(data) > 1:
                self._torn = True
                data = data[: len(data) // 2]
            written = super().write(fd, data)
            opened = self._fds[fd]
            offset = self._sizes[opened.inode] if opened.append else opened.position
            chunk = bytes(data[:written])
            self.log.append(Op("write", opened.inode, offset=offset, data=chunk))
            opened.position = offset + written
            self._sizes[opened.inode] = max(self._sizes[opened.inode], opened.position)
            return written

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            super().ftruncate(fd, length)
            inode = self._fds[fd].inode
            self._sizes[inode] = length
            self.log.append(Op("truncate", inode, offset=length))

    def fsync(self, fd: int) -> None:
        with self._lock:
            super().fsync(fd)
            inode = self._fds[fd].inode
            self.log.append(Op("dirsync") if inode < 0 else Op("fsync", inode))

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            super().close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        with self._lock:
            super().replace(src, dst)
            self._move(src, dst)

    def rename(self, src: Path, dst: Path) -> None:
        with self._lock:
            super().rename(src, dst)
            self._move(src, dst)

    def _move(self, src: Path, dst: Path) -> None:
        old, new = self._name(src), self._name(dst)
        self._names[new] = self._names.pop(old)
        self.log.append(Op("rename", name=old, other=new))

    def link(self, src: Path, dst: Path) -> None:
        with self._lock:
            super().link(src, dst)
            old, new = self._name(src), self._name(dst)
            self._names[new] = self._names[old]
            self.log.append(Op("link", name=old, other=new))

    def unlink(self, path: Path) -> None:
        with self._lock:
            super().unlink(path)
            name = self._name(path)
            del self._names[name]
            self.log.append(Op("unlink", name=name))


@dataclass
class Disk:
    """The file system after some operations: what is current, and what is durable."""

    content: dict[int, bytearray] = field(default_factory=dict)
    synced: dict[int, bytes] = field(default_factory=dict)
    pending: dict[int, list[Op]] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)
    synced_names: dict[str, int] = field(default_factory=dict)
    pending_names: list[Op] = field(default_factory=list)

    @classmethod
    def initial(cls, files: dict[str, bytes]) -> Disk:
        disk = cls()
        for inode, name in enumerate(sorted(files), start=1):
            disk.content[inode] = bytearray(files[name])
            disk.synced[inode] = files[name]
            disk.names[name] = disk.synced_names[name] = inode
        return disk

    def apply(self, op: Op) -> None:
        if op.kind == "create":
            self.content[op.inode] = bytearray()
            self.synced[op.inode] = b""
            self.names[op.name] = op.inode
            self.pending_names.append(op)
        elif op.kind in ("write", "truncate"):
            _change(self.content[op.inode], op)
            self.pending.setdefault(op.inode, []).append(op)
        elif op.kind == "fsync":
            self.synced[op.inode] = bytes(self.content[op.inode])
            self.pending[op.inode] = []
        elif op.kind == "dirsync":
            self.synced_names = dict(self.names)
            self.pending_names = []
        else:
            _rename(self.names, op)
            self.pending_names.append(op)

    def variant(self, kind: str, rng: random.Random | None = None) -> dict[str, bytes]:
        """The files one power cut could leave: ``synced`` (only what was made durable),
        ``crash`` (everything, as a killed process leaves it) or ``random``: a prefix of the
        unsynced directory changes, and per file a prefix of its unsynced writes, each kept
        whole (half the time), torn (a prefix of its bytes) or as zeros (the file grew but
        its data never reached the disk)."""
        if kind == "crash":
            return {name: bytes(self.content[i]) for name, i in self.names.items()}
        names = dict(self.synced_names)
        keep: dict[int, int] = {}
        if kind == "random":
            assert rng is not None
            for op in self.pending_names[: rng.randint(0, len(self.pending_names))]:
                if op.kind == "create":
                    names[op.name] = op.inode
                else:
                    _rename(names, op, strict=False)
            keep = {i: rng.randint(0, len(ops)) for i, ops in self.pending.items()}
        files = {}
        for name, inode in names.items():
            data = bytearray(self.synced.get(inode, b""))
            for op in self.pending.get(inode, [])[: keep.get(inode, 0)]:
                _change(data, _lost_in_part(op, rng))
            files[name] = bytes(data)
        return files


def _lost_in_part(op: Op, rng: random.Random | None) -> Op:
    """An unsynced write as a power cut may leave it: whole, torn or zeroed."""
    if op.kind != "write" or rng is None:
        return op
    draw = rng.random()
    if draw < 0.5:
        return op
    if draw < 0.75:
        return Op("write", op.inode, offset=op.offset, data=op.data[: rng.randint(0, len(op.data))])
    return Op("write", op.inode, offset=op.offset, data=b"\0" * len(op.data))


def _change(data: bytearray, op: Op) -> None:
    if op.kind == "truncate":
        del data[op.offset :]
        return
    end = op.offset + len(op.data)
    if len(data) < op.offset:
        data.extend(b"\0" * (op.offset - len(data)))
    data[op.offset : end] = op.data


def _rename(names: dict[str, int], op: Op, *, strict: bool = True) -> None:
    if op.name not in names:
        assert not strict, op
        return
    if op.kind == "rename":
        names[op.other] = names.pop(op.name)
    elif op.kind == "link":
        names[op.other] = names[op.name]
    elif op.kind == "unlink":
        del names[op.name]


def cut(initial: dict[str, bytes], log: list[Op], at: int) -> Disk:
    """The disk after the first ``at`` operations of ``log``."""
    disk = Disk.initial(initial)
    for op in log[:at]:
        disk.apply(op)
    return disk


def materialize(files: dict[str, bytes], directory: Path) -> Path:
    """Write ``files`` into a new ``directory`` (0700, files 0600), as a state dir."""
    directory.mkdir(mode=0o700)
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return directory
