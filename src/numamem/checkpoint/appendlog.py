"""One durable append to a journal, and undoing a failed one: shared by both journals.

The metacache's journal (:mod:`numamem.metacache.journal_store`) and the memory manager's
commit journal (:mod:`numamem.checkpoint.mmjournal`) acknowledge a change once its record
is appended and fsynced. :func:`append_durably` does that; when any step fails it cuts the
file back to its last good record (``ftruncate``, then fsync) and raises what the writer
learns, which depends on what a restart would read:

* the cut succeeded: :class:`~numamem.errors.PersistenceError`, the change was not applied
  and the journal is as before (appending may go on);
* a strict prefix of the record was written and cutting it off failed:
  :class:`TornTailError` (a PersistenceError: not applied). A restart drops a torn last
  record, but nothing may follow it: the caller rewrites its files before the next append;
* the whole record was written (its fsync failed) and cutting it off failed: a restart reads
  the change, but whether it survives a power loss is unknown:
  :class:`~numamem.errors.DurabilityUnknownError` with ``applied=True``;
* it was cut off but syncing the cut failed: a restart does not read the change, unknown
  durability: DurabilityUnknownError with ``applied=False``.

After either DurabilityUnknownError nothing may be appended either (the caller rewrites).
Fault hooks see ``"append"``, ``"append-fsync"``, ``"truncate"`` and ``"truncate-fsync"``.
Stateless; the caller holds whatever lock guards ``fd``.
"""

from __future__ import annotations

from pathlib import Path

from numamem.checkpoint.filestore import FaultHook, error_text, no_fault
from numamem.checkpoint.fs import FileSystem
from numamem.errors import DurabilityUnknownError, PersistenceError


class TornTailError(PersistenceError):
    """The change was not applied, and the journal may end in a part of its record that could
    not be cut off: nothing may be appended until the journal is rewritten."""


def append_durably(
    fs: FileSystem,
    fd: int,
    record: bytes,
    good_size: int,
    *,
    path: Path,
    failed: str,
    rewrite: str,
    faults: FaultHook | None = None,
) -> None:
    """Append ``record`` to ``fd`` (a journal whose good records end at ``good_size``) and
    fsync it; on any ``Exception``, undo as the module says. ``path`` is what the fault hook
    is told; ``failed`` starts every message ("cannot append to ..."), ``rewrite`` says what
    the caller's next write does ("the next write rewrites the snapshot"). A BaseException
    that is not an Exception (an interrupt) propagates untouched: what reached the file is
    unknown, and the caller must rewrite before appending again."""
    hook = faults or no_fault
    written = False
    try:
        hook("append", path)
        view = memoryview(record)
        while view:
            view = view[fs.write(fd, view) :]
        written = True
        hook("append-fsync", path)
        fs.fsync(fd)
    except Exception as err:  # noqa: BLE001 - every error is undone and reported
        _undo(fs, fd, good_size, err, written, path, f"{failed}: {error_text(err)}", rewrite, hook)


def _undo(
    fs: FileSystem,
    fd: int,
    good_size: int,
    err: Exception,
    written: bool,
    path: Path,
    failed: str,
    rewrite: str,
    hook: FaultHook,
) -> None:
    try:
        hook("truncate", path)
        fs.ftruncate(fd, good_size)
    except Exception as cut:  # noqa: BLE001 - reported to the writers
        if not written:
            raise TornTailError(f"{failed}; the change was not applied") from err
        raise DurabilityUnknownError(
            f"{failed}, and cutting the record off again failed: {error_text(cut)}; a "
            "restart reads the change but whether it survives a power loss is unknown; "
            f"{rewrite}",
            applied=True,
        ) from err
    try:
        hook("truncate-fsync", path)
        fs.fsync(fd)
    except Exception as sync:  # noqa: BLE001 - reported to the writers
        raise DurabilityUnknownError(
            f"{failed}; the record was cut off again but syncing the cut failed: "
            f"{error_text(sync)}; a restart does not read the change, but whether that "
            f"survives a power loss is unknown; {rewrite}",
            applied=False,
        ) from err
    raise PersistenceError(f"{failed}; the change was not applied") from err
