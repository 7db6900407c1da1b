"""Loading the metacache's snapshot + journal at start, and opening the journal to append.

The base of :class:`~numamem.metacache.journal_store.JournalPersister` (which sets the
attributes declared here). :meth:`JournalLoad.load` reads both files
(:func:`~numamem.metacache.journal.restore`) and only reads: a corrupt pair refuses the
start with the fix, unless the operator asked to discard it (both set aside, the cache
starts empty). What the start must repair is noted, not done: a torn last record (cut off
by :meth:`~JournalLoad._drop_torn_tail` once the daemon starts with the state), a missing
snapshot, or a missing or stale journal (replaced by a fresh one); so a refused start
changes nothing. :meth:`~JournalLoad._open_append` opens the journal to append to it, or
raises PersistenceError. Not thread-safe: called at start, and under the persister's lock.
"""

from __future__ import annotations

import os
from pathlib import Path

from numamem.checkpoint.filestore import FaultHook, error_text, move_aside, no_fault, read_file
from numamem.checkpoint.fs import FileSystem
from numamem.errors import PATH_QUOTE_BYTES, CheckpointError, PersistenceError, quote
from numamem.logging import get_logger
from numamem.metacache.journal import restore
from numamem.metacache.state import State

_log = get_logger("metacache")

READ_ATTEMPTS = 5
"""Reads of the snapshot + journal pair by :meth:`JournalLoad.load` while either changes
between a failed restore and the read after it (a live daemon's compactions)."""


def append_refusal(path: Path, err: BaseException) -> str:
    """Why the journal at ``path`` cannot be opened to append (the start's refusal, and
    ``numamem serve --check``'s)."""
    return (
        f"cannot open the metacache journal {quote(path, limit=PATH_QUOTE_BYTES)} to append: "
        f"{error_text(err)}; the change was not applied"
    )


class JournalLoad:
    """The loading half of :class:`~numamem.metacache.journal_store.JournalPersister`."""

    fs: FileSystem
    path: Path
    journal_path: Path
    faults: FaultHook | None
    _state: State
    _seq: int
    _size: int
    _records: int
    _snapshot_bytes: int
    _torn: int
    _needs_snapshot: bool
    _needs_header: bool

    def load(self, *, discard_corrupt: bool = False) -> State | None:
        """The stored state (snapshot + journal), or None when there are no files. Reads only,
        unless the operator asked to discard corrupt files (then both are moved aside).

        A pair that does not restore is read again when either file changed meanwhile (at
        most :data:`READ_ATTEMPTS` reads): ``serve --check`` beside a running daemon may
        read the snapshot before a compaction and the journal after it. Only a pair that
        stayed the same across two reads is judged corrupt. A start holds the lock, so
        nothing else writes: it reads the pair once more only when refusing it."""
        attempt = 1
        while True:
            pair = read_file(self.path, self.fs), read_file(self.journal_path, self.fs)
            try:
                return self._restore(*pair)
            except CheckpointError as err:
                now = read_file(self.path, self.fs), read_file(self.journal_path, self.fs)
                if now == pair or attempt == READ_ATTEMPTS:
                    self._refuse(err, discard_corrupt=discard_corrupt)
                    return None
            _log.info("the metacache files changed while being read; reading them again")
            attempt += 1

    def _refuse(self, err: CheckpointError, *, discard_corrupt: bool) -> None:
        """Raise the refusal of a corrupt pair, or set both files aside (``discard_corrupt``)."""
        if not discard_corrupt:
            raise CheckpointError(
                f"could not restore the metacache (snapshot {quote(self.path, limit=PATH_QUOTE_BYTES)} and journal "
                f"{quote(self.journal_path, limit=PATH_QUOTE_BYTES)}): {err}; move both files away, or start with "
                "--metacache-discard-corrupt-state to set them aside and start empty"
            ) from err
        for path in (self.path, self.journal_path):
            if self.fs.exists(path):
                aside = move_aside(path, "corrupt", self.fs)
                _log.warning(
                    "metacache state unusable; moved aside, starting empty",
                    error=str(err),
                    moved_to=str(aside),
                )

    def _restore(self, snapshot: bytes | None, journal: bytes | None) -> State | None:
        restored = restore(snapshot, journal, self.journal_path, self.path)
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

    @property
    def appends_to_found_journal(self) -> bool:
        """After :meth:`load`: whether :meth:`restored` opens the journal found to append to it
        (False: it writes a fresh one first). ``numamem serve --check`` asks."""
        return not self._needs_header

    def _drop_torn_tail(self) -> None:
        hook = self.faults or no_fault
        try:
            hook("truncate", self.journal_path)
            fd = self.fs.open(self.journal_path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                self.fs.ftruncate(fd, self._size)
                hook("truncate-fsync", self.journal_path)
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
        except Exception as err:
            raise CheckpointError(
                f"cannot cut the torn last record off the metacache journal "
                f"{quote(self.journal_path, limit=PATH_QUOTE_BYTES)}: {error_text(err)}; fix the file system and restart"
            ) from err
        _log.warning(
            "dropped a torn last journal record (a crash during its append; it was never "
            "acknowledged)",
            path=str(self.journal_path),
            bytes=self._torn,
        )

    def _open_append(self) -> int:
        """A descriptor appending to the journal; raises PersistenceError."""
        hook = self.faults or no_fault
        try:
            hook("reopen", self.journal_path)
            return self.fs.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except Exception as err:
            raise PersistenceError(append_refusal(self.journal_path, err)) from err
