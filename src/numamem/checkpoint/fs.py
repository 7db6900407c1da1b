"""The file operations persistence goes through: the real ones, or a test's recorder.

Every write path of both components (the memory manager's state file and
container map, the metacache's snapshot and journal) calls a
:class:`FileSystem` instead of :mod:`os` directly, so that a test can see
every operation in order: the power-loss simulation records them and rebuilds
a state directory from the durable ones only (see ``tests/powerloss.py``).

:data:`REAL` is the operating system's. The methods are the system calls they
name, with their errors (``OSError``); none retries, none hides a failure.
Stateless and thread-safe.
"""

from __future__ import annotations

import os
from pathlib import Path

StrPath = str | os.PathLike[str]
"""A path as a string or a :class:`~pathlib.Path` (the hot paths pass strings)."""


class FileSystem:
    """The real file system (``os``). Subclasses observe or replace single operations."""

    def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def rename(self, src: StrPath, dst: StrPath) -> None:
        os.rename(src, dst)

    def link(self, src: StrPath, dst: StrPath) -> None:
        os.link(src, dst)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)

    # --- reads (no effect on what a power loss keeps) -------------------------------

    def read(self, path: Path) -> bytes | None:
        """The file's bytes, or None when it does not exist. Other OS errors propagate."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def read_range(self, path: Path, start: int, end: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def size(self, path: Path) -> int:
        return path.stat().st_size

    def exists(self, path: Path) -> bool:
        return path.exists()

    def glob(self, directory: Path, pattern: str) -> list[Path]:
        return sorted(directory.glob(pattern))


REAL = FileSystem()
"""The operating system's file system."""
