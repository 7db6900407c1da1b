"""Compacting the metacache journal: a new snapshot, then a journal of the records since.

The compaction half of :class:`~numamem.metacache.journal_store.JournalPersister` (which
sets the attributes declared here). When the journal outgrows the snapshot (and
``min_compact_bytes``) or holds ``max_records`` (:meth:`Compaction._should_compact`), the
background thread (:meth:`Compaction._compact_loop`, or the committer itself without one)
writes a new snapshot of the last durable state (temp, fsync, rename, directory fsync)
without the journal's lock and then swaps in a journal holding only the records written
since; writers wait only for that swap. A snapshot whose directory sync failed keeps the
old journal (it covers the old snapshot and the new one); a swap whose directory sync
failed is reported to the durability observers until a commit's retry succeeds.
:meth:`Compaction._rewrite_locked` does the same synchronously with an empty journal (after a
failed append could not be undone, and at shutdown). Locks: ``_compacting`` around a
compaction, ``_lock`` for the journal itself; the compactor outlives every error (logged).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from numamem.checkpoint.filestore import atomic_write, close_quietly, error_text, observed
from numamem.errors import DurabilityUnknownError, PersistenceError
from numamem.logging import get_logger
from numamem.metacache.journal import header
from numamem.metacache.journal_load import JournalLoad
from numamem.metacache.persistence import PodTextCache, encode
from numamem.metacache.state import State

_log = get_logger("metacache")


class Compaction(JournalLoad):
    """The compaction half of :class:`~numamem.metacache.journal_store.JournalPersister`."""

    max_records: int
    min_compact_bytes: int
    writes: int
    compactions: int
    snapshot_observers: list[Callable[[float, bool], None]]
    durability_observers: list[Callable[[str | None], None]]
    _lock: threading.Lock
    _compacting: threading.Lock
    _fd: int | None
    _poisoned: bool
    _directory_unknown: str | None
    _pod_texts: PodTextCache
    _wake: threading.Event
    _stop: threading.Event

    def _report(self, problem: str | None) -> None:
        for durability in self.durability_observers:
            durability(problem)

    def _should_compact(self) -> bool:
        return self._records >= self.max_records or (
            self._size > self.min_compact_bytes and self._size > self._snapshot_bytes
        )

    def _compact_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._compact_logged():
                self._stop.wait(1.0)  # do not spin on a full disk

    def _compact_logged(self) -> bool:
        """:meth:`compact`, logging any failure (the thread must outlive every error)."""
        try:
            self.compact()
            return True
        except Exception as err:  # noqa: BLE001 - the compactor outlives every error
            _log.warning(
                "metacache compaction failed; the journal keeps growing", error=error_text(err)
            )
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
                texts = dict(self._pod_texts)  # commits keep changing theirs
            data = encode(state, texts, generation=seq)
            try:
                self._write_snapshot(data)
            except DurabilityUnknownError as err:
                _log.warning("metacache snapshot written, durability unknown", error=str(err))
                return
            with self._lock:
                for uid, made in texts.items():  # texts made here that no commit has renewed
                    self._pod_texts.setdefault(uid, made)
                if self._fd is None or self._poisoned:
                    return  # a failed append meanwhile: the next commit rewrites both files
                tail = self.fs.read_range(self.journal_path, offset, self._size)
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
            self._report(str(err))
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
        self._report(self._directory_unknown)

    def _write_snapshot(self, data: bytes) -> None:
        with observed(self.snapshot_observers):
            atomic_write(self.path, data, faults=self.faults, fs=self.fs)

    def _swap_locked(self, journal: bytes, snapshot_bytes: int, records: int) -> None:
        """Replace the journal with ``journal`` and append to it from now on.

        Raises PersistenceError when the journal was not replaced (the old one stays, with
        its descriptor). Once it is, the old descriptor is closed: when the new journal
        cannot be opened, ``_fd`` is None and the next commit opens it.
        """
        try:
            atomic_write(self.journal_path, journal, faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:
            self._directory_unknown = str(err)  # in place, maybe not durable: retried per commit
            self._report(self._directory_unknown)
        old, self._fd = self._fd, None
        close_quietly(self.fs, old)
        self._size, self._records, self._snapshot_bytes = len(journal), records, snapshot_bytes
        self._poisoned = False
        try:
            self._fd = self._open_append()
        except PersistenceError as err:
            _log.warning(
                "the new metacache journal is in place but cannot be opened; the next commit "
                "opens it",
                error=str(err),
            )
