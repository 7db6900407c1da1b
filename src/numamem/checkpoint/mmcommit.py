"""The journal mode of the memory manager's store (``--state-commit=journal``).

:class:`JournalCommit` is the half of :class:`~numamem.checkpoint.mmstore.KubeletStateStore`
that commits a change as one journal record (formats, invariant and failure rules in
:mod:`numamem.checkpoint.mmjournal`), settles the files and a fresh journal when the
journal cannot be appended to, compacts it, and folds a journal into the files for the
replace mode. A mixin: the store's ``__init__`` sets the attributes declared here. Not
thread-safe (the manager's lock).

What a caller sees, by what a restart reads: PersistenceError, nothing applied (memory stays,
the journal ends at its last good record or the next change settles first);
DurabilityUnknownError with ``applied`` saying whether a restart reads the change; success,
the change is durable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from numamem.checkpoint.containerfile import ContainerFileEncoder, encode_containers
from numamem.checkpoint.filestore import (
    atomic_write_all,
    error_text,
    fsync_dir,
    no_fault,
)
from numamem.checkpoint.mmjournal import HEADER, record
from numamem.checkpoint.mmrestore import StoreFields
from numamem.errors import PATH_QUOTE_BYTES, DurabilityUnknownError, PersistenceError, quote
from numamem.logging import get_logger
from numamem.memtypes import ContainerRef

_log = get_logger("checkpoint")

Names = Mapping[str, tuple[str, str]]


class JournalCommit(StoreFields):
    """The journal half of :class:`~numamem.checkpoint.mmstore.KubeletStateStore`."""

    writes: int
    observers: list[Callable[[float, bool], None]]
    durability_observers: list[Callable[[str | None], None]]
    _map_encoder: ContainerFileEncoder
    _last_map_bytes: bytes | None

    def _commit(
        self,
        state: bytes,
        new_map: Mapping[str, ContainerRef],
        new_names: Names,
        new_exclusive: Mapping[str, frozenset[str]],
        names_plan: tuple[str, bytes] | None,
    ) -> None:
        """Save a change in journal mode: the pod names first (an append, or a fold written
        on its own), then one record; see the module for what the caller sees."""
        old_names = self._last_names
        unchanged = new_map == self._last_map and new_exclusive == self._last_exclusive
        if unchanged and self._last_map_bytes is not None:
            containers = self._last_map_bytes  # most changes leave the map alone
        else:
            containers = self._map_encoder.encode(new_map, None, new_exclusive)
        started = time.perf_counter()
        try:
            self._names_first(names_plan, old_names, new_names)
            if state == self._last_state and containers == self._last_map_bytes:
                self.names_file.saved(old_names, new_names, applied=True)
                self._remember(state, containers, new_map, new_names, new_exclusive)
                return
            self._sync_owed_directory()
            data = record(state, containers)
            if self.journal.needs_settle or self.journal.full(len(data)):
                self._settle()  # a journal whose compactions keep failing: this change waits
                self._sync_owed_directory()
            self.journal.append(data, self.faults)
        except DurabilityUnknownError as err:
            self.journal.needs_settle = True
            self.names_file.saved(old_names, new_names, applied=err.applied)
            if err.applied:  # a restart reads the change: memory follows it
                self._remember(state, containers, new_map, new_names, new_exclusive)
            self._observed(started, written=err.applied)
            for observer in self.durability_observers:
                observer(str(err))
            raise
        except PersistenceError:
            self.names_file.saved(old_names, new_names, applied=False)
            self._observed(started, written=False)
            raise
        except Exception as err:  # opening the journal, a defect: nothing was applied
            self.journal.needs_settle = True
            self.names_file.saved(old_names, new_names, applied=False)
            self._observed(started, written=False)
            raise PersistenceError(
                f"cannot write the memory manager journal "
                f"{quote(self.journal.path, limit=PATH_QUOTE_BYTES)}: {error_text(err)}; the "
                "change was not applied"
            ) from err
        except BaseException:
            # An interrupt in the middle of an append: what reached the journal is unknown,
            # so nothing is appended after it (the next change settles first).
            self.journal.needs_settle = True
            self.journal.close()
            self.names_file.close()
            self.names_file.stale()
            raise
        self.names_file.saved(old_names, new_names, applied=True)
        self._remember(state, containers, new_map, new_names, new_exclusive)
        self.writes += 1
        self._observed(started, written=True)
        for observer in self.durability_observers:
            observer(None)
        if self.journal.should_compact():
            self.compact_journal()

    def _names_first(self, plan: tuple[str, bytes] | None, old: Names, new: Names) -> None:
        """The pod names durable before the record (a fold in a write of its own, whose
        directory sync the record's append owes when it fails)."""
        if plan is None:
            return
        kind, data = plan
        if kind == "append":
            self.names_file.append(data, self.faults)
            return
        try:
            atomic_write_all([(self.names_file.path, data)], faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:
            self.journal.directory_unknown = str(err)
        except PersistenceError:
            self.names_file.folded(data, old, new, renamed=False)
            raise
        # The fold replays to the old names with the old state and to the new ones with the
        # new state, so it stands whether or not the record follows.
        self.names_file.folded(data, old, new, renamed=True)

    def _remember(
        self,
        state: bytes,
        containers: bytes,
        new_map: Mapping[str, ContainerRef],
        new_names: Names,
        new_exclusive: Mapping[str, frozenset[str]],
    ) -> None:
        """Memory's new saved state (the mappings are the save's own copies)."""
        self._last_state, self._last_map_bytes = state, containers
        self._last_map, self._last_names = new_map, new_names
        self._last_exclusive = new_exclusive

    def _observed(self, started: float, *, written: bool) -> None:
        for observer in self.observers:
            observer(time.perf_counter() - started, written)

    def _sync_owed_directory(self) -> None:
        """Retry a directory sync a journal swap or a fold still owes; DurabilityUnknownError
        (nothing of this change written: not applied) while it fails."""
        if self.journal.directory_unknown is None:
            return
        try:
            (self.faults or no_fault)("dirsync-retry", self.journal.path)
            fsync_dir(self.dir, self.fs)
        except Exception as err:
            raise DurabilityUnknownError(
                f"cannot sync the state directory {quote(self.dir, limit=PATH_QUOTE_BYTES)} "
                f"after replacing the memory manager journal: {error_text(err)}; whether the "
                "last changes survive a power loss is unknown; the change was not applied",
                applied=False,
            ) from err
        self.journal.directory_unknown = None

    def _files_now(self) -> list[tuple[Path, bytes]]:
        """The map and the state as memory has them (what a restart reads), then a fresh
        journal: written in this order, so the journal's old records override the files
        until its rename."""
        containers = self._last_map_bytes
        if containers is None:
            containers = encode_containers(self._last_map, None, self._last_exclusive)
        files = [(self.containers_path, containers)]
        if self._last_state is not None:
            files.append((self.state_path, self._last_state))
        files.append((self.journal.path, HEADER))
        return files

    def _settle(self) -> None:
        """Make the files what memory holds and start a fresh journal. PersistenceError:
        nothing applied (the journal still overrides the files); a failed directory sync is
        owed by the next append."""
        try:
            atomic_write_all(self._files_now(), faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:
            self.journal.directory_unknown = str(err)
        else:
            self.journal.directory_unknown = None  # its directory sync covers earlier renames
        self.journal.swapped()
        self.writes += 1

    def compact_journal(self) -> bool:
        """Fold the journal into the files (they become its last record) and start a fresh
        one. A failure is logged and loses nothing (the journal holds every change); False
        then. Called after an acknowledged append, at a graceful stop and by the replace
        mode's start."""
        try:
            self._settle()
        except PersistenceError as err:
            _log.warning(
                "could not compact the memory manager journal; it stays and is replayed at "
                "the next start",
                path=str(self.journal.path),
                error=str(err),
            )
            return False
        except BaseException as err:
            # Not a failure of the write (an interrupt, a defect) among the renames: the
            # journal's name may be the fresh file's, so nothing is appended to the old
            # descriptor (the next change settles first).
            self.journal.needs_settle = True
            self.journal.close()
            if not isinstance(err, Exception):
                raise
            _log.error("compacting the memory manager journal failed", error=error_text(err))
            return False
        self.journal.compactions += 1
        if self.journal.directory_unknown is not None:
            _log.warning(
                "memory manager journal compacted; the directory sync failed and is retried "
                "before the next change is acknowledged",
                error=self.journal.directory_unknown,
            )
        return True

    def fold_at_stop(self) -> None:
        """The graceful stop's fold (journal mode): only once the manager accepted the state
        (a refused start writes nothing) and not while an older container map holds pod names
        (only a save moves them); a failure is an error naming the stale file."""
        pending = self.journal.records or self.journal.needs_settle
        # Not while an older map holds pod names: only a save moves them (the fold would
        # rewrite the map without them).
        folds = self.journal_mode and self.accepted and pending and not self._legacy_names
        if folds and not self.compact_journal():
            _log.error(
                "memory_manager_state is behind the memory manager journal: the fold at "
                "stop failed; the next start reads the journal, but before handing the "
                "file to a kubelet start numamem once without --state-commit=journal "
                "(it folds the journal) and check that `numamem state verify` shows no "
                "journal records",
                state=str(self.state_path),
                journal=str(self.journal.path),
            )

    def retire_journal(self) -> None:
        """Replace mode on a journal holding records (a daemon that ran in journal mode):
        fold it into the files and remove it, before any change is written the replace way
        (the journal's records would override those files at the next start).
        PersistenceError when the fold fails (nothing changed that a restart reads)."""
        self._settle()
        try:
            self.fs.unlink(self.journal.path)
        except OSError as err:  # an empty journal is inert: the files are read
            _log.warning("could not remove the folded memory manager journal", error=str(err))
        self.journal.close()
        _log.info(
            "memory manager journal folded into memory_manager_state (--state-commit=replace)",
            path=str(self.journal.path),
        )
