"""The memory manager's store: ``memory_manager_state`` (kubelet format) plus numamem's container map.

``<state-dir>/memory_manager_state`` holds exactly what the kubelet's file holds
(V1 written, or V3 as kubelet master writes it with pod-level resource managers
on; V1, V2 and V3 read), so a kubelet and numamem can take over each other's
state. Pod-level entries (``podEntries``, KEP-5526) are kept only with the
``PodLevelResourceManagers`` gate on (``pod_level``); with it off a file holding
any refuses the start, naming the pods and the fix (deviation: the kubelet drops
them silently, and the memory they hold would be reserved with nothing owning it).
The container id -> (pod, container) map, which the kubelet
rebuilds from the container runtime at start, lives in numamem's own file
``<state-dir>/numamem_containers`` (never inside the kubelet's file), with
which containers of a pod allocated as a whole hold memory of their own
(``exclusive``; the others share its pool). The namespace and name of each pod
with state, when the manager records them (the podresources API lists pods by
name; the kubelet knows them from the API server), live in
``<state-dir>/numamem_pod_names`` (:mod:`numamem.checkpoint.namesfile`): a pod's
name is appended there and fsynced before the state that holds it is written,
and a name without state is inert, as an id without state is. (Older numamem
kept the names in the container map; they are read from there and moved by the
next save, in a write of their own ahead of it: the names file, then the map without
them, so no state is written while the map still names a pod. A missing state file
leaves every recorded name inert.)

Write order keeps the files consistent without a shared transaction. The
state and the map of one operation are written by one
:func:`~numamem.checkpoint.filestore.atomic_write_all`: each temp file written
and fsynced, then the renames in this order, then one directory sync (a power
cut keeps a prefix of the renames), so an operation costs one atomic write:

* when an operation adds ids, the container map goes first, then the
  memory manager state; a crash in between leaves ids for containers whose
  operation was not acknowledged, which the client retries (AddContainer is
  idempotent);
* a pod's name is durable before either (an append, or a rewrite of the names
  file renamed first in the same write), so a state never stands without it;
* when it only removes ids, the state goes first and the map after;
* on start, map entries whose container has no blocks are dropped, so ids left
  behind by a crash between the two renames are inert.

A failed write of the state (or of the map before it) fails the operation with
the previous files in place (a map renamed before a failed state rename is
taken back); a failed map rename *after* the state is logged and retried with
the next write, since its stale ids are inert by the rule above. When only a directory sync fails, the files hold the new state (what a
restart reads) with unknown durability: the save finishes writing and raises
:class:`~numamem.errors.DurabilityUnknownError`, and the manager keeps the new
state in memory. The bytes of the last write are kept in memory, so no write
reads a file first.

Restoring (reading the three files, the refusals, what is dropped as inert) is
:mod:`numamem.checkpoint.mmrestore`; this module writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from numamem.checkpoint import kubeletwrite
from numamem.checkpoint.containerfile import (
    ContainerFileEncoder,
    encode_containers,
    read_container_file,
)
from numamem.checkpoint.filestore import (
    FaultHook,
    PartialWriteError,
    atomic_write,
    atomic_write_all,
    read_file,
)
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.mmcommit import JournalCommit
from numamem.checkpoint.mmjournal import CommitJournal
from numamem.checkpoint.mmrestore import StoreRestore, UnusableMap, replayed
from numamem.checkpoint.namesfile import NAMES_FILE, NamesJournal, encode_names, read_names
from numamem.errors import (
    CheckpointError,
    DurabilityUnknownError,
    PersistenceError,
)
from numamem.logging import get_logger
from numamem.memtypes import ContainerRef, Snapshot

_log = get_logger("checkpoint")

STATE_FILE = "memory_manager_state"
CONTAINERS_FILE = "numamem_containers"


def recorded_names(state_dir: Path) -> dict[str, tuple[str, str]]:
    """The pod names a restart reads from ``state_dir`` (an older container map's, then the
    names file replayed), before the uids without state are dropped; read-only, and empty
    where a file is missing or unreadable (``numamem state verify`` reports those)."""
    names: dict[str, tuple[str, str]] = {}
    try:
        data = read_file(state_dir / CONTAINERS_FILE)
        if data is not None:
            names = read_container_file(data).names
    except (OSError, CheckpointError):
        pass
    try:
        data = read_file(state_dir / NAMES_FILE)
    except OSError:
        data = None
    return replayed(names, read_names(data, state_dir / NAMES_FILE).names if data else {})


class KubeletStateStore(JournalCommit, StoreRestore):
    """A :class:`~numamem.memorymanager.state.store.StateStore` on a state directory.

    Not thread-safe: the memory manager calls it under its own lock. Restoring
    (:class:`~numamem.checkpoint.mmrestore.StoreRestore`) only reads: temp files of
    interrupted writes and an unusable container map are dealt with in :meth:`restored`,
    once the manager accepted the state, so a refused start changes nothing on disk.
    """

    def __init__(
        self,
        state_dir: str | Path,
        faults: FaultHook | None = None,
        fs: FileSystem = REAL,
        *,
        pod_level: bool = False,
        journal: bool = False,
    ) -> None:
        """``pod_level``: the ``PodLevelResourceManagers`` gate (pod-level entries are kept,
        and the file is written as V3). ``journal``: ``--state-commit=journal``
        (:mod:`numamem.checkpoint.mmjournal`); either way a journal on disk is read."""
        self.pod_level = pod_level
        self.journal_mode = journal
        self.journal = CommitJournal(Path(state_dir), fs)
        self.accepted = False
        """:meth:`restored` ran to its end: a stop may fold the journal (a start refused
        before, even after a save at start, folds nothing: the journal holds what it wrote)."""
        self._last_map_bytes: bytes | None = None
        self.fs = fs
        self.dir = Path(state_dir)
        self.state_path = self.dir / STATE_FILE
        self.containers_path = self.dir / CONTAINERS_FILE
        self.faults = faults
        self._last_state: bytes | None = None
        self._encoder = kubeletwrite.V1Encoder()
        self._encoder_v3 = kubeletwrite.V3Encoder()
        self._map_encoder = ContainerFileEncoder()
        self.names_file = NamesJournal(self.dir, fs)
        self._last_map: Mapping[str, ContainerRef] = {}
        self._last_names: Mapping[str, tuple[str, str]] = {}
        self._last_exclusive: Mapping[str, frozenset[str]] = {}
        self._map_dirty = False
        self._legacy_names = False
        """The container map on disk holds names (an older numamem's): see
        :meth:`_move_legacy_names`."""
        self._map_unusable: UnusableMap | None = None
        self.writes = 0
        self.observers: list[Callable[[float, bool], None]] = []
        """Called after each write of memory_manager_state with (seconds, succeeded)."""
        self.durability_observers: list[Callable[[str | None], None]] = []
        """Called after each save that wrote: the DurabilityUnknownError text, or None when
        everything written is durable (which also makes earlier unknown writes durable)."""

    def close(self) -> None:
        """Close the descriptors (a later save reopens them); in journal mode, first fold the
        journal into the files (a graceful stop leaves ``memory_manager_state`` current;
        a failure is logged and the journal is replayed at the next start)."""
        self.fold_at_stop()
        self.journal.close()
        self.names_file.close()

    # --- save --------------------------------------------------------------------

    def save(self, snapshot: Snapshot) -> None:
        """Write what changed, in the order of the module docstring, with one directory sync.

        Raises PersistenceError (nothing changed on disk that a restart would
        use) or DurabilityUnknownError (every file holds the new state; the
        directory sync failed).
        """
        if self.pod_level:
            state = self._encoder_v3.encode(
                snapshot.policy_name,
                snapshot.machine_state,
                snapshot.assignments,
                snapshot.pod_entries,
            )
        else:
            state = self._encoder.encode(
                snapshot.policy_name, snapshot.machine_state, snapshot.assignments
            )
        self.set_evidence_aside()  # a save at start, before restored()
        if self._legacy_names:
            self._move_legacy_names()
        new_map, new_names = dict(snapshot.container_map), dict(snapshot.pod_names)
        new_exclusive = dict(snapshot.exclusive)
        old_map, old_names = self._last_map, self._last_names
        old_exclusive = self._last_exclusive
        names_plan = self.names_file.plan(old_names, new_names, snapshot.assignments)
        if self.journal_mode:  # one record of both files (the map encoded there, once)
            self._commit(state, new_map, new_names, new_exclusive, names_plan)
            return
        if self.journal.records:  # a journal mode's journal: folded before files change
            self.retire_journal()
        adds = not (
            new_map.items() <= old_map.items() and new_exclusive.items() <= old_exclusive.items()
        )
        map_item = None
        if adds or new_map != old_map or new_exclusive != old_exclusive or self._map_dirty:
            map_item = (
                self.containers_path,
                self._map_encoder.encode(new_map, None, new_exclusive),
            )
        state_item = (self.state_path, state) if state != self._last_state else None
        ordered = (map_item, state_item) if adds else (state_item, map_item)
        files = [item for item in ordered if item is not None]
        fold = None
        if names_plan is not None and names_plan[0] == "fold":
            fold = (self.names_file.path, names_plan[1])
            files.insert(0, fold)  # a pod's name is durable before a state that holds it
        elif names_plan is not None:
            try:
                self.names_file.append(names_plan[1], self.faults)
            except PersistenceError:
                self._observe_state(state_item, started=time.perf_counter(), written=False)
                raise
        self._last_map, self._last_names = new_map, new_names
        self._last_exclusive = new_exclusive
        if not files:
            self.names_file.saved(old_names, new_names, applied=True)
            return
        unknown: DurabilityUnknownError | None = None
        started = time.perf_counter()
        try:
            atomic_write_all(files, faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:
            unknown = err
        except PartialWriteError as err:
            self._names_after_failure(fold, old_names, new_names, err.replaced)
            if adds:  # the map is in place, the state is not: take the map back (inert anyway)
                self._last_map, self._last_names = old_map, old_names
                self._last_exclusive = old_exclusive
                self._observe_state(state_item, started, written=False)
                if map_item is not None and map_item[0] in err.replaced:
                    self._best_effort_map(old_map, old_exclusive)
                raise
            if state_item is None or state_item[0] not in err.replaced:
                self._last_map, self._last_names = old_map, old_names
                self._last_exclusive = old_exclusive
                self._observe_state(state_item, started, written=False)
                raise  # only the names were renamed: nothing applied
            # The state is in place, the map that only removes ids is not: its stale ids are
            # inert (dropped at restore) and it is written again with the next change.
            self.writes += 1
            self._map_dirty = True
            _log.warning(
                "container map write failed; stale ids are inert and rewritten later",
                error=str(err),
            )
            files = [file for file in files if file is not map_item]
        except PersistenceError:
            self._names_after_failure(fold, old_names, new_names, ())
            self._last_map, self._last_names = old_map, old_names
            self._last_exclusive = old_exclusive
            self._observe_state(state_item, started, written=False)
            raise
        except BaseException:
            # Not a failure of the write (an interrupt, a thread's exit): memory stays as it
            # was, and what reached the disk is unknown, so the next save rewrites each file
            # (the state, the map, a fold of the names) from memory.
            self._last_map, self._last_names = old_map, old_names
            self._last_exclusive = old_exclusive
            self._last_state = None
            self._map_dirty = True
            self.names_file.close()
            self.names_file.stale()
            raise
        else:
            self.writes += len(files)
            if map_item is not None:
                self._map_dirty = False
        if fold is not None:
            self.names_file.folded(fold[1], old_names, new_names, renamed=True)
        else:
            self.names_file.saved(old_names, new_names, applied=True)
        if state_item is not None:
            self._last_state = state
        self._observe_state(state_item, started, written=True)
        for observer in self.durability_observers:
            observer(None if unknown is None else str(unknown))
        if unknown is not None:
            raise unknown

    def _move_legacy_names(self) -> None:
        """Move an older map's names to the names file, in a write of its own ahead of the
        save's: the names file (memory's names), then the map without names. A restart reads
        the map's names until the map is rewritten, so no state may be written before that:
        a pod the map names inertly, given state without a name, would get it back.
        PersistenceError: nothing of the save applied (the next save tries again)."""
        fold = encode_names(self._last_names)
        files = [
            (self.names_file.path, fold),
            (self.containers_path, encode_containers(self._last_map, None, self._last_exclusive)),
        ]
        try:
            atomic_write_all(files, faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:  # in place: the save's directory sync settles it
            _log.warning("pod names moved out of the container map; sync failed", error=str(err))
        except PartialWriteError:
            self.names_file.folded(fold, {}, self._last_names, renamed=True)
            raise
        except PersistenceError:
            self.names_file.folded(fold, {}, self._last_names, renamed=False)
            raise
        self.names_file.folded(fold, {}, self._last_names, renamed=True)
        self._legacy_names = self._map_dirty = False
        self.writes += 1

    def _observe_state(
        self, state_item: tuple[Path, bytes] | None, started: float, *, written: bool
    ) -> None:
        """Tell the write observers about a write that included the state file."""
        if state_item is not None:
            self._observed(started, written=written)

    def _names_after_failure(
        self,
        fold: tuple[Path, bytes] | None,
        old: Mapping[str, tuple[str, str]],
        new: Mapping[str, tuple[str, str]],
        replaced: Sequence[Path],
    ) -> None:
        """A save failed after its names plan: the names file may hold what memory does not
        (an appended record, or a renamed fold), so the next save folds it."""
        if fold is None:
            self.names_file.saved(old, new, applied=False)
            return
        renamed = fold[0] in replaced
        self.names_file.folded(fold[1], old, new, renamed=renamed)
        if renamed:
            self.names_file.stale()

    def _best_effort_map(
        self,
        entries: Mapping[str, ContainerRef],
        exclusive: Mapping[str, frozenset[str]],
    ) -> None:
        try:
            atomic_write(
                self.containers_path,
                encode_containers(entries, None, exclusive),
                faults=self.faults,
                fs=self.fs,
            )
            self.writes += 1
        except PersistenceError as err:
            self._map_dirty = True
            _log.warning(
                "could not roll back the container map; its extra ids are inert", error=str(err)
            )
