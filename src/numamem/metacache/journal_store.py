"""The daemon's metacache persister on snapshot + journal (formats in :mod:`numamem.metacache.journal`).

A commit (one group of concurrent writers, see :mod:`numamem.metacache.cache`)
appends one record and fsyncs the journal before it is acknowledged: cost
proportional to the change, not to the cache. When the journal outgrows the
snapshot (and ``min_compact_bytes``) or holds :data:`MAX_RECORDS`, a
background thread writes a new snapshot of the last durable state (temp,
fsync, rename, directory fsync) and then swaps in a journal holding only the
records written since; writers wait only for that swap, not for the rewrite.
A snapshot whose directory sync failed keeps the old journal (it covers the
old snapshot and the new one).

A failed append (ENOSPC, EIO, a failed fsync) truncates the journal back to
its last good record before the writers fail, so memory and disk stay equal;
if even that fails, the next commit first writes a full snapshot and a fresh
journal. A journal swap whose directory sync failed is reported to the
durability observers (NOT_SERVING) until a later commit's directory sync
succeeds. At start (:meth:`JournalPersister.restored`) a torn last record is
cut off and logged, and a missing or stale journal replaced; a refused start
changes nothing. :meth:`JournalPersister.close` (graceful shutdown) leaves a
compacted snapshot and an empty journal.

Fault hooks (tests) see the stages of
:func:`~numamem.checkpoint.filestore.atomic_write` for the snapshot and the
journal swap, and ``"append"``, ``"append-fsync"`` and ``"truncate"`` for a
commit.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Set
from pathlib import Path

from numamem.checkpoint.filestore import (
    FaultHook,
    atomic_write,
    fsync_dir,
    move_aside,
    observed,
    read_file,
    remove_stale_temps,
)
from numamem.errors import (
    PATH_QUOTE_BYTES,
    CheckpointError,
    DurabilityUnknownError,
    PersistenceError,
    quote,
)
from numamem.logging import get_logger
from numamem.metacache.cache import State
from numamem.metacache.journal import JOURNAL_FILE, change_payload, frame, header, restore
from numamem.metacache.persistence import STATE_FILE, PodTextCache, encode

_log = get_logger("metacache")

MAX_RECORDS = 100_000
MIN_COMPACT_BYTES = 256 * 1024
"""The journal is compacted once it is larger than the snapshot and than this."""


class JournalPersister:
    """A :class:`~numamem.metacache.cache.Persister` on snapshot + journal.

    The cache calls :meth:`save` from one committer at a time; a background thread
    compacts. Both take ``_lock`` only for the journal itself (append, swap).
    """

    def __init__(
        self,
        state_dir: str | Path,
        faults: FaultHook | None = None,
        *,
        max_records: int = MAX_RECORDS,
        min_compact_bytes: int = MIN_COMPACT_BYTES,
        background: bool = True,
    ) -> None:
        self.path = Path(state_dir) / STATE_FILE
        self.journal_path = Path(state_dir) / JOURNAL_FILE
        self.faults = faults
        self.max_records = max_records
        self.min_compact_bytes = min_compact_bytes
        self.background = background
        self.writes = 0
        self.compactions = 0
        self.observers: list[Callable[[float, bool], None]] = []
        """Called after each journal append with (seconds, succeeded)."""
        self.snapshot_observers: list[Callable[[float, bool], None]] = []
        """Called after each snapshot write (compaction) with (seconds, succeeded)."""
        self.durability_observers: list[Callable[[str | None], None]] = []
        """Called after each append: an outcome-unknown text, or None when durable."""
        self._lock = threading.Lock()
        self._compacting = threading.Lock()
        self._fd: int | None = None
        self._state = State()
        self._seq = 0
        self._size = 0
        self._records = 0
        self._snapshot_bytes = 0
        self._torn = 0
        self._poisoned = False
        self._directory_unknown: str | None = None
        self._needs_snapshot = True  # until load() finds them: restored() creates the files
        self._needs_header = True
        self._pod_texts: PodTextCache = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- restore ----------------------------------------------------------------

    def load(self, *, discard_corrupt: bool = False) -> State | None:
        """The stored state (snapshot + journal), or None when there are no files. Reads only,
        unless the operator asked to discard corrupt files (then both are moved aside)."""
        snapshot, journal = read_file(self.path), read_file(self.journal_path)
        try:
            restored = restore(snapshot, journal, self.journal_path)
        except CheckpointError as err:
            if not discard_corrupt:
                raise CheckpointError(
                    f"could not restore the metacache from {quote(self.path, limit=PATH_QUOTE_BYTES)}: {err}; move the "
                    "files away, or start with --metacache-discard-corrupt-state to set them "
                    "aside and start empty"
                ) from err
            for path in (self.path, self.journal_path):
                if path.exists():
                    aside = move_aside(path, "corrupt")
                    _log.warning(
                        "metacache state unusable; moved aside, starting empty",
                        error=str(err),
                        moved_to=str(aside),
                    )
            return None
        if restored is None:
            return None
        self._state, self._seq = restored.state, restored.seq
        self._size, self._torn = restored.journal_end, restored.torn
        self._records, self._snapshot_bytes = restored.records, restored.snapshot_bytes
        # A missing or empty journal, or one that ends before the snapshot (a crash between a
        # rewrite's snapshot and its journal), is replaced by a fresh one at start.
        self._needs_header = restored.journal_last != restored.seq
        self._needs_snapshot = snapshot is None
        return restored.state

    def restored(self) -> None:
        """The daemon starts with the loaded state: remove temp files, drop a torn last record,
        create missing files, open the journal and start the compactor."""
        for name in (STATE_FILE, JOURNAL_FILE):
            for tmp in remove_stale_temps(self.path.parent, name):
                _log.warning("removed a temp file left by an interrupted write", path=str(tmp))
        if self._needs_snapshot:
            atomic_write(self.path, encode(self._state, self._pod_texts, generation=self._seq))
            self._snapshot_bytes = self.path.stat().st_size
        if self._needs_header:
            first = header(self._seq)
            atomic_write(self.journal_path, first, faults=self.faults)
            self._size, self._records = len(first), 0
        elif self._torn:
            with open(self.journal_path, "r+b") as f:
                f.truncate(self._size)
                os.fsync(f.fileno())
            _log.warning(
                "dropped a torn last journal record (a crash during its append; it was never "
                "acknowledged)",
                path=str(self.journal_path),
                bytes=self._torn,
            )
        self._fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        if self.background and self._thread is None:
            self._thread = threading.Thread(
                target=self._compact_loop, name="metacache-compactor", daemon=True
            )
            self._thread.start()

    # --- commits ----------------------------------------------------------------

    def save(self, state: State, pods: Set[str] | None = None) -> None:
        """Append the record of ``state`` (``pods``: the pod uids it may have changed) and fsync.

        PersistenceError leaves the journal as it was (memory goes back with it);
        DurabilityUnknownError means disk holds ``state`` but a directory sync failed.
        """
        if self._poisoned:
            with self._compacting, self._lock:
                self._rewrite_locked(state)
            return
        with self._lock:
            if self._fd is None:
                raise PersistenceError(f"the metacache journal {self.journal_path} is not open")
            payload = change_payload(self._seq + 1, self._state, state, pods)
            if payload is None:
                self._state = state
                return
            record = frame(payload)
            with observed(self.observers):
                self._append_locked(record)
            self._seq += 1
            self._state = state
            self._size += len(record)
            self._records += 1
            self.writes += 1
            unknown = self._check_directory_locked()
            compact = self._should_compact()
        if compact:
            if self.background:
                self._wake.set()
            else:
                self._compact_logged()
        if unknown is not None:
            raise DurabilityUnknownError(unknown)

    def _append_locked(self, record: bytes) -> None:
        assert self._fd is not None
        hook = self.faults or (lambda stage, target: None)
        try:
            hook("append", self.journal_path)
            view = memoryview(record)
            while view:
                view = view[os.write(self._fd, view) :]
            hook("append-fsync", self.journal_path)
            os.fsync(self._fd)
        except OSError as err:
            self._undo_append(err)

    def _undo_append(self, err: OSError) -> None:
        """Cut the journal back to its last good record; if that fails, the next commit
        rewrites everything first."""
        assert self._fd is not None
        hook = self.faults or (lambda stage, target: None)
        try:
            hook("truncate", self.journal_path)
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError:
            self._poisoned = True
        name = errno.errorcode.get(err.errno or 0, "EIO")
        raise PersistenceError(
            f"cannot append to the metacache journal {quote(self.journal_path, limit=PATH_QUOTE_BYTES)}: "
            f"{err.strerror or err} ({name}); the change was not applied"
        ) from err

    def _check_directory_locked(self) -> str | None:
        """After a journal swap whose directory sync failed, retry it: the outcome-unknown text
        while it still fails (reported to the durability observers), None once durable."""
        if self._directory_unknown is not None:
            try:
                fsync_dir(self.journal_path.parent)
                self._directory_unknown = None
            except OSError as err:
                self._directory_unknown = (
                    f"cannot sync the directory of {quote(self.journal_path, limit=PATH_QUOTE_BYTES)}: "
                    f"{err.strerror or err}; whether the journal survives a power loss is unknown"
                )
        for durability in self.durability_observers:
            durability(self._directory_unknown)
        return self._directory_unknown

    def _should_compact(self) -> bool:
        return self._records >= self.max_records or (
            self._size > self.min_compact_bytes and self._size > self._snapshot_bytes
        )

    # --- compaction -------------------------------------------------------------

    def _compact_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._compact_logged():
                self._stop.wait(1.0)  # do not spin on a full disk

    def _compact_logged(self) -> bool:
        try:
            self.compact()
            return True
        except (PersistenceError, OSError) as err:
            _log.warning("metacache compaction failed; the journal keeps growing", error=str(err))
            return False

    def compact(self) -> None:
        """A new snapshot of the last durable state, then a journal of the records since.

        Writers wait only for the swap: the snapshot is encoded and written without the lock.
        A snapshot whose directory sync failed keeps the old journal (old or new snapshot, it
        covers both). Raises PersistenceError when the snapshot could not be written.
        """
        with self._compacting:
            with self._lock:
                if self._fd is None or self._poisoned:
                    return
                state, seq, offset = self._state, self._seq, self._size
            data = encode(state, self._pod_texts, generation=seq)
            try:
                self._write_snapshot(data)
            except DurabilityUnknownError as err:
                _log.warning("metacache snapshot written, durability unknown", error=str(err))
                return
            with self._lock:
                tail = _read_range(self.journal_path, offset, self._size)
                self._swap_locked(header(seq) + tail, len(data), records=tail.count(b"\n"))
            self.compactions += 1

    def _rewrite_locked(self, state: State) -> None:
        """Snapshot ``state`` as the next generation and start an empty journal, synchronously
        (after a failed append could not be undone, and at shutdown). Holds both locks.

        Once the snapshot is in place the commit stands (a restart reads it), even if the
        journal swap fails: the old journal ends before the new snapshot and adds nothing.
        """
        seq = self._seq + 1
        data = encode(state, self._pod_texts, generation=seq)
        try:
            self._write_snapshot(data)
        except DurabilityUnknownError as err:
            self._state, self._seq = state, seq  # poisoned still: the next commit rewrites
            for durability in self.durability_observers:
                durability(str(err))
            raise
        self._state, self._seq = state, seq
        self.writes += 1
        self.compactions += 1
        try:
            self._swap_locked(header(seq), len(data), records=0)
        except PersistenceError as err:
            self._poisoned = True
            _log.warning(
                "metacache snapshot written but the journal could not be reset; the next "
                "commit rewrites both",
                error=str(err),
            )
        for durability in self.durability_observers:
            durability(self._directory_unknown)

    def _write_snapshot(self, data: bytes) -> None:
        with observed(self.snapshot_observers):
            atomic_write(self.path, data, faults=self.faults)

    def _swap_locked(self, journal: bytes, snapshot_bytes: int, records: int) -> None:
        """Replace the journal with ``journal`` and append to it from now on."""
        try:
            atomic_write(self.journal_path, journal, faults=self.faults)
        except DurabilityUnknownError as err:
            self._directory_unknown = str(err)  # in place, maybe not durable: retried per commit
            for durability in self.durability_observers:
                durability(self._directory_unknown)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._size, self._records, self._snapshot_bytes = len(journal), records, snapshot_bytes
        self._poisoned = False

    def close(self) -> None:
        """Stop compacting and leave a compacted snapshot with an empty journal. Idempotent;
        raises PersistenceError when the final snapshot cannot be written (the journal stays
        and is replayed at the next start)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._compacting, self._lock:
            if self._fd is None:
                return
            try:
                if self._records or self._poisoned:
                    self._rewrite_locked(self._state)
            finally:
                if self._fd is not None:
                    os.close(self._fd)
                self._fd = None


def _read_range(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)
