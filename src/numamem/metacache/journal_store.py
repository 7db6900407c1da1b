"""The daemon's metacache persister on snapshot + journal (formats in :mod:`numamem.metacache.journal`).

A commit (one group of concurrent writers, see :mod:`numamem.metacache.cache`)
appends one record and fsyncs the journal before it is acknowledged: cost
proportional to the change, not to the cache. When the journal outgrows the
snapshot (and ``min_compact_bytes``) or holds :data:`MAX_RECORDS`, a
background thread compacts it (:mod:`numamem.metacache.compaction`); writers
wait only for the journal swap, not for the rewrite. Loading the files at
start is :mod:`numamem.metacache.journal_load`.

A failed append (ENOSPC, EIO, a failed fsync, or any other error) truncates
the journal back to its last good record before the writers fail, so memory
and disk stay equal. If even that fails, the next commit first writes a full
snapshot and a fresh journal (the journal is *poisoned* until then), and what
the writers learn depends on what a restart would read: a record cut short
while being written is torn and never read back (PersistenceError, not
applied); a whole record whose fsync failed is read back (DurabilityUnknownError,
applied: memory follows it); a cut that could not be synced leaves the state
before the change (DurabilityUnknownError, not applied). An unknown outcome is
reported to the durability observers (NOT_SERVING) until a later write
succeeds, and so is a journal swap whose directory sync failed, until a later
commit's directory sync succeeds. When the journal cannot be reopened after a
swap, nothing is appended to the old descriptor: the next commit reopens it
(and fails, not applied, while it cannot). At start (:meth:`JournalPersister.restored`) a torn last record is
cut off and logged, and a missing or stale journal replaced; a refused start
changes nothing. :meth:`JournalPersister.close` (graceful shutdown) leaves a
compacted snapshot and an empty journal.

Fault hooks (tests) see the stages of
:func:`~numamem.checkpoint.filestore.atomic_write` for the snapshot and the
journal swap, ``"reopen"`` for opening the journal to append to it,
``"dirsync-retry"`` for a commit's retry of a swap's failed directory sync, and
``"append"``, ``"append-fsync"``, ``"truncate"`` and ``"truncate-fsync"`` for
a commit. Every file operation goes through ``fs``
(:mod:`numamem.checkpoint.fs`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Set
from pathlib import Path

from numamem.checkpoint.appendlog import TornTailError, append_durably
from numamem.checkpoint.filestore import (
    FaultHook,
    atomic_write,
    close_quietly,
    error_text,
    fsync_dir,
    no_fault,
    observed,
    remove_stale_temps,
)
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.records import frame
from numamem.errors import (
    PATH_QUOTE_BYTES,
    DurabilityUnknownError,
    PersistenceError,
    quote,
)
from numamem.logging import get_logger
from numamem.metacache.compaction import Compaction
from numamem.metacache.journal import JOURNAL_FILE, change_payload, header
from numamem.metacache.persistence import STATE_FILE, PodTextCache, encode, pod_text
from numamem.metacache.state import State

_log = get_logger("metacache")

MAX_RECORDS = 100_000
MIN_COMPACT_BYTES = 256 * 1024
"""The journal is compacted once it is larger than the snapshot and than this."""


class JournalPersister(Compaction):
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
        fs: FileSystem = REAL,
    ) -> None:
        self.fs = fs
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
        self._open = False
        """Between restored() and close(); ``_fd`` may be None meanwhile (a failed reopen)."""
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

    def restored(self) -> None:
        """The daemon starts with the loaded state: remove temp files, drop a torn last record,
        create missing files, open the journal and start the compactor."""
        for name in (STATE_FILE, JOURNAL_FILE):
            for tmp in remove_stale_temps(self.path.parent, name, self.fs):
                _log.warning("removed a temp file left by an interrupted write", path=str(tmp))
        if self._needs_snapshot:
            data = encode(self._state, self._pod_texts, generation=self._seq)
            atomic_write(self.path, data, faults=self.faults, fs=self.fs)
            self._snapshot_bytes = len(data)
        if self._needs_header:
            first = header(self._seq)
            atomic_write(self.journal_path, first, faults=self.faults, fs=self.fs)
            self._size, self._records = len(first), 0
        elif self._torn:
            self._drop_torn_tail()
        self._fd = self._open_append()
        self._open = True
        if self.background and self._thread is None:
            self._thread = threading.Thread(
                target=self._compact_loop, name="metacache-compactor", daemon=True
            )
            self._thread.start()

    def save(self, state: State, pods: Set[str] | None = None) -> None:
        """Append the record of ``state`` (``pods``: the pod uids it may have changed) and fsync.

        PersistenceError leaves the journal as it was (memory goes back with it);
        DurabilityUnknownError says what a restart reads (``applied``) and that it may not
        survive a power loss (see the module docstring). Any other exception from the file
        system or a defect is reported as DurabilityUnknownError (not applied) and the next
        commit rewrites everything. Called by one committer at a time.
        """
        try:
            self._save(state, pods)
        except PersistenceError:
            raise
        except BaseException as err:
            if not isinstance(err, Exception):
                # An interrupt (or a simulated crash) in the middle of a write: what reached
                # the journal is unknown, so nothing may be appended after it.
                self._poisoned = True
                self._report(
                    f"writing the metacache journal {quote(self.journal_path, limit=PATH_QUOTE_BYTES)} "
                    "was interrupted; the next write rewrites the snapshot"
                )
                raise
            message = (
                f"writing the metacache journal {quote(self.journal_path, limit=PATH_QUOTE_BYTES)} failed: "
                f"{error_text(err)}; the outcome is unknown, and the next write rewrites the "
                "snapshot"
            )
            raise self._outcome_unknown(message, applied=False) from err

    def _save(self, state: State, pods: Set[str] | None) -> None:
        if self._poisoned:
            with self._compacting, self._lock:
                self._require_open()
                self._rewrite_locked(state)
            return
        with self._lock:
            self._require_open()
            if self._fd is None:
                self._fd = self._open_append()
            payload = change_payload(self._seq + 1, self._state, state, pods)
            if payload is None:
                self._state = state
                return
            record = frame(payload)
            try:
                with observed(self.observers):
                    self._append_locked(record)
            except DurabilityUnknownError as err:
                if err.applied:
                    self._state = state  # a restart reads it: so does the next rewrite
                raise
            self._seq += 1
            self._state = state
            self._size += len(record)
            self._records += 1
            self.writes += 1
            self._renew_texts(state, pods)
            unknown = self._check_directory_locked()
            compact = self._should_compact()
        if compact:
            if self.background:
                self._wake.set()
            else:
                self._compact_logged()
        if unknown is not None:
            raise DurabilityUnknownError(unknown)

    def _renew_texts(self, state: State, pods: Set[str] | None) -> None:
        """Keep the snapshot text of each pod a commit changed (holding ``_lock``), so that a
        compaction joins texts instead of making them: its cost is the commits' changes,
        spread over the commits. Unknown ``pods``: the compaction makes what is missing."""
        for uid in pods or ():
            containers = state.pods.get(uid)
            if containers is None:
                self._pod_texts.pop(uid, None)
            else:
                self._pod_texts[uid] = (containers, pod_text(uid, containers))

    def _require_open(self) -> None:
        if not self._open:
            raise PersistenceError(
                f"the metacache journal {quote(self.journal_path, limit=PATH_QUOTE_BYTES)} is not open; the change was "
                "not applied"
            )

    def _append_locked(self, record: bytes) -> None:
        """Append and fsync ``record``; a failure is undone and reported as
        :func:`~numamem.checkpoint.appendlog.append_durably` says, and poisons the journal
        when the cut-off did not leave it as before."""
        assert self._fd is not None
        try:
            append_durably(
                self.fs,
                self._fd,
                record,
                self._size,
                path=self.journal_path,
                failed="cannot append to the metacache journal "
                f"{quote(self.journal_path, limit=PATH_QUOTE_BYTES)}",
                rewrite="the next write rewrites the snapshot",
                faults=self.faults,
            )
        except TornTailError:
            self._poisoned = True
            raise
        except DurabilityUnknownError as err:
            self._poisoned = True  # as _outcome_unknown: the writer gets append_durably's error
            self._report(str(err))
            raise

    def _outcome_unknown(self, message: str, applied: bool) -> DurabilityUnknownError:
        """A write whose outcome on disk is unknown: nothing may be appended after it (the
        next write rewrites the snapshot), the durability observers are told ``message``,
        and the error for the writer (``applied``: a restart reads the change) is returned
        to be raised."""
        self._poisoned = True
        self._report(message)
        return DurabilityUnknownError(message, applied=applied)

    def _check_directory_locked(self) -> str | None:
        """After a journal swap whose directory sync failed, retry it: the outcome-unknown text
        while it still fails (reported to the durability observers), None once durable."""
        if self._directory_unknown is not None:
            try:
                (self.faults or no_fault)("dirsync-retry", self.journal_path)
                fsync_dir(self.journal_path.parent, self.fs)
                self._directory_unknown = None
            except Exception as err:  # noqa: BLE001 - reported as unknown durability
                self._directory_unknown = (
                    f"cannot sync the directory of {quote(self.journal_path, limit=PATH_QUOTE_BYTES)}: "
                    f"{error_text(err)}; whether the journal survives a power loss is unknown"
                )
        self._report(self._directory_unknown)
        return self._directory_unknown

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
            if not self._open:
                return
            try:
                if self._records or self._poisoned:
                    self._rewrite_locked(self._state)
            finally:
                fd, self._fd = self._fd, None
                close_quietly(self.fs, fd)
                self._open = False
