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
simulated crashes at each stage ("open", "write", "fsync", "close", "rename",
"dirsync"); ``fs`` (:mod:`numamem.checkpoint.fs`) lets them see every operation.

:func:`move_aside` sets an unusable file aside under a new name that never
replaces an earlier one, durably.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from numamem.checkpoint.fs import REAL, FileSystem, StrPath
from numamem.errors import PATH_QUOTE_BYTES, DurabilityUnknownError, PersistenceError, quote
from numamem.logging import get_logger

_log = get_logger("checkpoint")

FaultHook = Callable[[str, Path], None]
"""Called with (stage, target) before each stage; raise to simulate a failure."""


def no_fault(stage: str, target: Path) -> None:
    """The :data:`FaultHook` that injects nothing."""
    return


STREAM_BYTES = 1 << 20
"""A file larger than this (a metacache snapshot of thousands of containers) is written in
pieces of :data:`PIECE_BYTES`, each fsynced before the next: on a journaling file system
(ext4's ordered mode) a small file's fsync waits for the data other files have dirtied, so
without the pieces every commit landing during a snapshot's write waited for the flush of
the whole snapshot (tens of milliseconds); now for one piece at most."""
PIECE_BYTES = 256 << 10

_TEMPS = itertools.count()
_RUN = secrets.token_hex(3)
"""Temp names are unique within a process (a counter) and across processes (the pid and a
random tag drawn once; ``O_EXCL`` guards the rest)."""


_PREFIXES: dict[tuple[str, int], str] = {}
"""(target path, pid) -> the temp names' prefix (a store writes the same few targets)."""


def _temp_name(path: Path) -> str:
    target = os.fspath(path)
    key = (target, os.getpid())
    prefix = _PREFIXES.get(key)
    if prefix is None:
        if len(_PREFIXES) >= 64:
            _PREFIXES.clear()
        head, name = os.path.split(target)
        prefix = _PREFIXES[key] = f"{head}/.{name}.tmp-{key[1]:x}{_RUN}-"
    return f"{prefix}{next(_TEMPS)}"


def error_text(err: BaseException) -> str:
    """An OS error as ``strerror (ENAME)``; any other exception as ``repr``."""
    if isinstance(err, OSError):
        return f"{err.strerror or err} ({errno.errorcode.get(err.errno or 0, 'EIO')})"
    return f"unexpected {quote(repr(err), style='bare')}"


def _fail(path: Path, err: BaseException, doing: str) -> PersistenceError:
    return PersistenceError(
        f"cannot {doing} checkpoint {quote(path, limit=PATH_QUOTE_BYTES)}: {error_text(err)}; "
        "the change was not applied"
    )


def atomic_write(
    path: Path, data: bytes, *, faults: FaultHook | None = None, fs: FileSystem = REAL
) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see the module docstring).

    Any ``Exception`` at any stage (an ``OSError`` of any errno, or another error) is
    reported as above: PersistenceError before the rename (the temp file is closed and
    removed, the target untouched), DurabilityUnknownError at the directory sync. A
    ``BaseException`` that is not an ``Exception`` (a simulated crash, an interrupt) closes
    the temp file and propagates, leaving the temp file as a crash would.
    """
    atomic_write_all([(path, data)], faults=faults, fs=fs)


class PartialWriteError(PersistenceError):
    """:func:`atomic_write_all` replaced some files (``replaced``, in order) and then failed
    to rename the next; the files after it are untouched and their temps removed."""

    def __init__(self, message: str, replaced: Sequence[Path]) -> None:
        super().__init__(message)
        self.replaced = list(replaced)


def atomic_write_all(
    files: Sequence[tuple[Path, bytes]],
    *,
    faults: FaultHook | None = None,
    fs: FileSystem = REAL,
) -> None:
    """Replace several files of one directory, each atomically, with one directory sync.

    Every temp file is written and fsynced first; then they are renamed in the order given,
    and the directory is synced once. A file system commits the renames of one directory in
    the order they were made (a power cut keeps a prefix of them: the power-loss simulation,
    ``tests/powerloss.py``, checks every cut point), so a file is never durable before the
    files ahead of it: that order is what a caller relies on, at the cost of one atomic write.
    (POSIX does not promise the order; ext4, XFS and btrfs keep it. Where it were lost, only
    a call still in flight at the power cut could show part of its change, never an
    acknowledged one: the directory sync before the answer makes every rename durable.)

    Failures as :func:`atomic_write`: PersistenceError before the first rename (nothing
    changed), :class:`PartialWriteError` when a rename fails after others succeeded,
    DurabilityUnknownError at the directory sync (every file in place). The fault hook sees
    each file's stages ("open", "write", "fsync", "close", "rename", "dirsync").
    """
    hook = faults  # None: no fault injection (no call per stage)
    temps: list[str] = []
    try:
        for path, data in files:
            temps.append(_write_temp(path, data, hook, fs))
    except BaseException as err:
        if isinstance(err, Exception):
            for tmp in temps:
                _unlink_quietly(fs, tmp)
        raise
    replaced: list[Path] = []
    for n, ((path, _), tmp) in enumerate(zip(files, temps, strict=True)):
        try:
            if hook is not None:
                hook("rename", path)
            fs.replace(tmp, os.fspath(path))
        except Exception as err:
            for left in temps[n:]:
                _unlink_quietly(fs, left)
            message = str(_fail(path, err, "replace"))
            if replaced:
                raise PartialWriteError(message, replaced) from err
            raise PersistenceError(message) from err
        replaced.append(path)
    try:
        if hook is not None:
            for path, _ in files:
                hook("dirsync", path)
        fsync_dir(os.path.dirname(os.fspath(files[0][0])), fs)
    except Exception as err:
        named = ", ".join(quote(path, limit=PATH_QUOTE_BYTES) for path, _ in files)
        raise DurabilityUnknownError(
            f"cannot sync the directory of checkpoint {named}: {error_text(err)}; "
            "the file holds the change, but whether it survives a power loss is unknown: the "
            "outcome is unknown, and numamem reports NOT_SERVING until a later write succeeds"
        ) from err


def _write_temp(path: Path, data: bytes, hook: FaultHook | None, fs: FileSystem) -> str:
    """``data`` in a new fsynced and closed temp file beside ``path``; PersistenceError (the
    temp removed) on any Exception, the descriptor closed on anything."""
    tmp = _temp_name(path)
    try:
        if hook is not None:
            hook("open", path)
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except Exception as err:
        raise _fail(path, err, "write") from err
    try:
        if hook is not None:
            hook("write", path)
        view = memoryview(data)
        piecewise = len(view) > STREAM_BYTES
        while view:
            written = fs.write(fd, view[:PIECE_BYTES] if piecewise else view)
            view = view[written:]
            if piecewise and view:
                fs.fsync(fd)  # flush as it goes: see STREAM_BYTES
        if hook is not None:
            hook("fsync", path)
        fs.fsync(fd)
        if hook is not None:
            hook("close", path)
    except Exception as err:
        close_quietly(fs, fd)
        _unlink_quietly(fs, tmp)
        raise _fail(path, err, "write") from err
    except BaseException:
        close_quietly(fs, fd)
        raise
    try:
        fs.close(fd)  # Linux releases the descriptor even when close reports an error
    except Exception as err:
        _unlink_quietly(fs, tmp)
        raise _fail(path, err, "write") from err
    return tmp


WriteObserver = Callable[[float, bool], None]
"""Called after a write with (seconds, succeeded)."""


@contextlib.contextmanager
def observed(observers: Sequence[WriteObserver]) -> Iterator[None]:
    """Time the write in the block and tell ``observers``: succeeded unless it raised
    PersistenceError (DurabilityUnknownError counts as written: the file is in place).

    An observer that raises is logged and skipped: metrics never change what a write did.
    """
    started, written = time.perf_counter(), False
    try:
        yield
        written = True
    except DurabilityUnknownError:
        written = True
        raise
    finally:
        for observer in observers:
            try:
                observer(time.perf_counter() - started, written)
            except Exception:  # noqa: BLE001 - an observer never fails the write
                _log.exception("a checkpoint write observer failed")


def fsync_dir(directory: StrPath, fs: FileSystem = REAL) -> None:
    """fsync ``directory`` (its entries: creates, renames, removals); the fd never leaks."""
    fd = fs.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fs.fsync(fd)
    finally:
        fs.close(fd)


def read_file(path: Path, fs: FileSystem = REAL) -> bytes | None:
    """The file's bytes, or None when it does not exist. Other OS errors propagate."""
    return fs.read(path)


def _aside_names(path: Path, reason: str) -> Iterator[Path]:
    """``<name>.<reason>-<UTC time to the microsecond>[-<n>]`` beside ``path``: the names
    :func:`move_aside` and :func:`keep_aside` try in turn (1000 of them)."""
    stamp = (
        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 10**6:06d}Z"
    )
    for attempt in range(1000):
        suffix = "" if attempt == 0 else f"-{attempt}"
        yield path.with_name(f"{path.name}.{reason}-{stamp}{suffix}")


def move_aside(path: Path, reason: str, fs: FileSystem = REAL) -> Path:
    """Rename ``path`` to ``<name>.<reason>-<UTC time to the microsecond>[-<n>]`` and sync the
    directory; never replaces an existing file (each move keeps its own evidence)."""
    return _place_aside(path, path, reason, fs)


def _holds(kept: Path, data: bytes, fs: FileSystem) -> bool:
    """Whether ``kept`` is a regular file (not a link, FIFO or directory someone put there)
    holding exactly ``data``; anything unreadable is not (a new copy is made)."""
    try:
        found = kept.lstat()
        return stat.S_ISREG(found.st_mode) and found.st_size == len(data) and fs.read(kept) == data
    except OSError:
        return False


def _place_aside(source: Path, path: Path, reason: str, fs: FileSystem) -> Path:
    """Rename ``source`` to the first free :func:`_aside_names` name of ``path``, then sync the
    directory; never replaces a file."""
    for target in _aside_names(path, reason):
        try:
            fs.link(source, target)  # fails if target exists: nothing is ever overwritten
        except FileExistsError:
            continue
        except OSError:
            # No hard links on this file system: rename, having checked the name is free
            # (the single-instance lock keeps other numamem processes out of the directory).
            if fs.exists(target):
                continue
            fs.rename(source, target)
            fsync_dir(path.parent, fs)
            return target
        fs.unlink(source)
        fsync_dir(path.parent, fs)
        return target
    raise FileExistsError(f"{path}: no free name to set it aside")


def keep_aside(path: Path, data: bytes, reason: str, fs: FileSystem = REAL) -> Path:
    """``data`` (what was read from ``path``, or what stood for it) durable under a name
    :func:`move_aside` would give ``path``; ``path`` itself is untouched, so a failure after
    this changes nothing a restart reads. Idempotent: a copy already there with the same
    bytes (an earlier start's) is synced and returned instead of a new one. The copy is
    written to a temp file first (a crash leaves only a temp, which the next start removes)
    and never replaces a file. Raises what failed (the temp is removed; an interrupt may leave
    it, which the next start removes)."""
    for kept in fs.glob(path.parent, f"{path.name}.{reason}-*"):
        if _holds(kept, data, fs):
            fd = fs.open(kept, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fs.fsync(fd)  # not known to be synced (an older numamem's, an operator's cp)
            finally:
                fs.close(fd)
            fsync_dir(path.parent, fs)  # an earlier attempt's directory sync may have failed
            return kept
    try:
        tmp = _write_temp(path, data, None, fs)
    except PersistenceError as err:  # what failed, not the checkpoint message it was wrapped in
        raise err.__cause__ or err from None
    try:
        return _place_aside(Path(tmp), path, reason, fs)
    except BaseException:
        _unlink_quietly(fs, tmp)
        raise


def remove_stale_temps(directory: Path, name: str, fs: FileSystem = REAL) -> list[Path]:
    """Remove ``.<name>.tmp-*`` files left by a crash; returns what was removed."""
    removed = []
    for child in fs.glob(directory, f".{name}.tmp-*"):
        _unlink_quietly(fs, child)
        removed.append(child)
    return removed


def _unlink_quietly(fs: FileSystem, path: StrPath) -> None:
    with contextlib.suppress(OSError):
        fs.unlink(path)


def close_quietly(fs: FileSystem, fd: int | None) -> None:
    """Close ``fd`` (None: nothing), ignoring an error: Linux releases a descriptor even
    when close reports one, so there is nothing to retry."""
    if fd is not None:
        with contextlib.suppress(OSError):
            fs.close(fd)
