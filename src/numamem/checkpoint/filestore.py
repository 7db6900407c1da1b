"""Atomic, durable file replacement: temp file, fsync, rename, fsync of the directory.

A crash at any point leaves either the old file or the new one, never a mix:
the new bytes go to ``.<name>.tmp-<random>`` in the same directory (mode 0600),
are fsynced, renamed over the target, and the directory is fsynced so the
rename itself is durable. Temp files left by a crash start with a dot (the
kubelet ignores such files too) and are removed by :func:`remove_stale_temps`.

A failed write raises :class:`~numamem.errors.PersistenceError` naming the
file and the OS error; the target is untouched. When only the final directory
fsync fails, the new file is already in place (a restart reads it) but its
durability is unknown: :class:`~numamem.errors.DurabilityUnknownError`, and
callers keep the new state in memory. ``faults`` lets tests inject failures or
simulated crashes at each stage ("open", "write", "fsync", "rename",
"dirsync").

:func:`move_aside` sets an unusable file aside under a new name that never
replaces an earlier one, durably.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from numamem.errors import PATH_QUOTE_BYTES, DurabilityUnknownError, PersistenceError, quote

FaultHook = Callable[[str, Path], None]
"""Called with (stage, target) before each stage; raise to simulate a failure."""


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")


def _fail(path: Path, err: OSError, doing: str) -> PersistenceError:
    name = errno.errorcode.get(err.errno or 0, "EIO")
    return PersistenceError(
        f"cannot {doing} checkpoint {quote(path, limit=PATH_QUOTE_BYTES)}: {err.strerror or err} ({name}); the change was not applied"
    )


def atomic_write(path: Path, data: bytes, *, faults: FaultHook | None = None) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see the module docstring)."""
    hook = faults or (lambda stage, target: None)
    tmp = _temp_name(path)
    try:
        hook("open", path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise _fail(path, err, "write") from err
    try:
        hook("write", path)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        hook("fsync", path)
        os.fsync(fd)
    except OSError as err:
        os.close(fd)
        _unlink_quietly(tmp)
        raise _fail(path, err, "write") from err
    os.close(fd)
    try:
        hook("rename", path)
        os.replace(tmp, path)
    except OSError as err:
        _unlink_quietly(tmp)
        raise _fail(path, err, "replace") from err
    try:
        hook("dirsync", path)
        fsync_dir(path.parent)
    except OSError as err:
        name = errno.errorcode.get(err.errno or 0, "EIO")
        raise DurabilityUnknownError(
            f"cannot sync the directory of checkpoint {quote(path, limit=PATH_QUOTE_BYTES)}: {err.strerror or err} ({name}); "
            "the file holds the change, but whether it survives a power loss is unknown: the "
            "outcome is unknown, and numamem reports NOT_SERVING until a later write succeeds"
        ) from err


WriteObserver = Callable[[float, bool], None]
"""Called after a write with (seconds, succeeded)."""


@contextlib.contextmanager
def observed(observers: Sequence[WriteObserver]) -> Iterator[None]:
    """Time the write in the block and tell ``observers``: succeeded unless it raised
    PersistenceError (DurabilityUnknownError counts as written: the file is in place)."""
    started, written = time.perf_counter(), False
    try:
        yield
        written = True
    except DurabilityUnknownError:
        written = True
        raise
    finally:
        for observer in observers:
            observer(time.perf_counter() - started, written)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist. Other OS errors propagate."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def move_aside(path: Path, reason: str) -> Path:
    """Rename ``path`` to ``<name>.<reason>-<UTC time to the microsecond>[-<n>]`` and sync the
    directory; never replaces an existing file (each move keeps its own evidence)."""
    stamp = (
        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 10**6:06d}Z"
    )
    for attempt in range(1000):
        suffix = "" if attempt == 0 else f"-{attempt}"
        target = path.with_name(f"{path.name}.{reason}-{stamp}{suffix}")
        try:
            os.link(path, target)  # fails if target exists: nothing is ever overwritten
        except FileExistsError:
            continue
        except OSError:
            # No hard links on this file system: rename, having checked the name is free
            # (the single-instance lock keeps other numamem processes out of the directory).
            if target.exists():
                continue
            os.rename(path, target)
            fsync_dir(path.parent)
            return target
        os.unlink(path)
        fsync_dir(path.parent)
        return target
    raise FileExistsError(f"{path}: no free name to move it aside")


def remove_stale_temps(directory: Path, name: str) -> list[Path]:
    """Remove ``.<name>.tmp-*`` files left by a crash; returns what was removed."""
    removed = []
    for child in directory.glob(f".{name}.tmp-*"):
        _unlink_quietly(child)
        removed.append(child)
    return removed


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
