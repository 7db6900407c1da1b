"""Restoring the memory manager's store: ``memory_manager_state``, the container map, the names.

:class:`StoreRestore` is the restore half of
:class:`~numamem.checkpoint.mmstore.KubeletStateStore` (a mixin: the store's ``__init__``
sets the attributes declared here). :meth:`~StoreRestore.restore` only reads: the kubelet's
file (V1, V2 or V3), then the container map and the pod names (an older map's names, then
the names file replayed over them), and keeps the container ids and names of pods that have
state; the rest are inert and dropped from memory. A state that cannot be used refuses the
start with the kubelet's wrapper text naming the file and the fix (:func:`restore_error`);
so does a file holding pod-level entries (``podEntries``, KEP-5526) with the
``PodLevelResourceManagers`` gate off (the deviation :mod:`numamem.checkpoint.mmstore`
names). An unusable container map or a damaged names file is only noted:
:meth:`~StoreRestore.restored`, called once the manager accepted the state, removes temp
files of interrupted writes and keeps copies of those files (a save before it keeps them
first), so a refused start changes nothing a restart reads. Not thread-safe (the manager's
lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from numamem.checkpoint import kubelet
from numamem.checkpoint.containerfile import ContainerFile, read_container_file
from numamem.checkpoint.filestore import (
    FaultHook,
    atomic_write,
    error_text,
    fsync_dir,
    keep_aside,
    read_file,
    remove_stale_temps,
)
from numamem.checkpoint.fs import FileSystem
from numamem.checkpoint.mmjournal import JOURNAL_FILE, CommitJournal
from numamem.checkpoint.namesfile import NAMES_FILE, NamesJournal, encode_names
from numamem.errors import CheckpointError, DurabilityUnknownError, PersistenceError, quote
from numamem.logging import get_logger
from numamem.memtypes import ContainerRef, Snapshot

_log = get_logger("checkpoint")


def restore_error(path: Path, err: object, *, beside: Path | None = None) -> CheckpointError:
    """The kubelet's wrapper text, naming the file and the fix (``beside``: a second file to
    delete, the older ``memory_manager_state`` a journal's record overrides)."""
    files = f'file "{path}"' if beside is None else f'files "{path}" and "{beside}"'
    return CheckpointError(
        f"could not restore state from checkpoint: {err}, please drain this node and delete the memory "
        f"manager checkpoint {files} before restarting numamem"
    )


def replayed(
    base: Mapping[str, tuple[str, str]], records: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[str, str]]:
    """``base`` (an older container map's names) with the names file's ``records`` after it:
    each recorded uid last, with its recorded name."""
    names = {uid: n for uid, n in base.items() if uid not in records}
    names.update(records)
    return names


class StoreFields:
    """What :class:`~numamem.checkpoint.mmstore.KubeletStateStore`'s ``__init__`` sets and
    its halves (:class:`StoreRestore`, :class:`~numamem.checkpoint.mmcommit.JournalCommit`)
    share: its files, and memory's last saved state."""

    fs: FileSystem
    dir: Path
    state_path: Path
    containers_path: Path
    faults: FaultHook | None
    names_file: NamesJournal
    journal: CommitJournal
    journal_mode: bool
    accepted: bool
    _last_state: bytes | None
    _last_map: Mapping[str, ContainerRef]
    _last_names: Mapping[str, tuple[str, str]]
    _last_exclusive: Mapping[str, frozenset[str]]
    _legacy_names: bool
    """The container map on disk holds pod names (an older numamem's), which only a save
    moves to the names file."""


class UnusableMap(NamedTuple):
    """A container map that did not decode: why, its bytes (the evidence kept), and whether
    they came from its file (else from the journal's last record)."""

    reason: str
    data: bytes
    from_file: bool


class StoreRestore(StoreFields):
    """The restore half of :class:`~numamem.checkpoint.mmstore.KubeletStateStore`."""

    pod_level: bool
    _map_dirty: bool
    _map_unusable: UnusableMap | None

    def retire_journal(self) -> None: ...

    def restore(self, policy_name: str) -> Snapshot | None:
        try:
            found = self.journal.load()
        except CheckpointError as err:
            raise restore_error(self.journal.path, err, beside=self.state_path) from err
        source, beside = self.state_path, None  # what a refusal names: the state's file(s)
        if found is not None and found.state is not None:
            data: bytes | None = found.state
            journal_map = found.containers
            source, beside = self.journal.path, self.state_path
        else:
            data = read_file(self.state_path, self.fs)
            journal_map = None
        if data is None:
            # No pod has state: every name recorded (in the names file, or in an older map,
            # which the first save moves out of it) is inert, and must stay so.
            self._legacy_names = bool(self._read_containers().names)
            self.names_file.load()
            return None
        try:
            loaded = kubelet.load(data)
        except CheckpointError as err:
            raise restore_error(source, err, beside=beside) from err
        if loaded.policy_name != policy_name:
            raise restore_error(
                source,
                f'[memorymanager] configured policy "{policy_name}" differs from state checkpoint policy '
                f'"{loaded.policy_name}"',
                beside=beside,
            )
        if loaded.pod_entries and not self.pod_level:
            pods = ", ".join(quote(uid) for uid in sorted(loaded.pod_entries)[:5])
            more = len(loaded.pod_entries) - min(len(loaded.pod_entries), 5)
            raise CheckpointError(
                f'{source} holds pod-level memory assignments ("podEntries", KEP-5526) of '
                f"pods {pods}{f' and {more} more' if more else ''}, which numamem keeps only with "
                "the PodLevelResourceManagers feature gate on (the memory they hold would be "
                "reserved with nothing to release it); fix: start with --feature-gates "
                "PodLevelResources=true,PodLevelResourceManagers=true (or featureGates in "
                f"--config), or drain the node, remove {source}{f' and {beside}' if beside else ''} "
                "and restart numamem"
            )
        written = "v3" if self.pod_level else "v1"
        if loaded.format != written:
            _log.info(
                f"memory manager state read in another format; it is rewritten as "
                f"{written.upper()} at the next change",
                format=loaded.format,
                path=str(self.state_path),
            )
        self._last_state = data
        record = self._read_containers(journal_map)
        containers, legacy = record.containers, record.names
        names = replayed(legacy, self.names_file.load() or {})
        if self.names_file.damage is not None:
            _log.error(
                "pod names file is damaged; names recorded after the damage are lost (pods "
                "are listed by uid while they have state); a copy of the file is kept",
                path=str(self.names_file.path),
                error=self.names_file.damage,
            )
        live = {(p, c) for p, ctrs in loaded.assignments.items() for c in ctrs}
        kept = {cid: ref for cid, ref in containers.items() if ref in live}
        kept_names = {uid: n for uid, n in names.items() if uid in loaded.assignments}
        kept_exclusive = {
            uid: n for uid, n in record.exclusive.items() if uid in loaded.pod_entries
        }
        self.names_file.restored(kept_names, legacy)
        self._legacy_names = bool(legacy)  # moved to the names file by the first save
        dropped = len(containers) - len(kept)
        if dropped or len(kept_exclusive) != len(record.exclusive):
            _log.info("dropped container ids without memory state", dropped=dropped)
            self._map_dirty = True
        if len(kept_names) < len(names):
            _log.info(
                "pod names without memory state are inert", count=len(names) - len(kept_names)
            )
        self._last_map, self._last_names = kept, kept_names
        self._last_exclusive = kept_exclusive
        return Snapshot(
            loaded.policy_name,
            loaded.machine_state,
            loaded.assignments,
            kept,
            kept_names,
            loaded.pod_entries,
            kept_exclusive,
        )

    def _read_containers(self, journal_map: bytes | None = None) -> ContainerFile:
        """The container map: ``journal_map`` (the journal's last record's) else the file."""
        data = journal_map
        if data is None:
            data = read_file(self.containers_path, self.fs)
        if data is None:
            return ContainerFile()
        try:
            return read_container_file(data)
        except CheckpointError as err:
            self._map_unusable = UnusableMap(str(err), data, from_file=journal_map is None)
            return ContainerFile()

    def restored(self) -> None:
        """The restored state was accepted: remove temp files, keep copies of an unusable map
        and a damaged names file (:meth:`set_evidence_aside`), then replace the damaged names
        file by the names kept and remove an unusable map file (memory holds no ids from
        it: a missing map reads the same). PersistenceError when a copy cannot be kept."""
        for name in (self.state_path.name, self.containers_path.name, NAMES_FILE, JOURNAL_FILE):
            for tmp in remove_stale_temps(self.dir, name, self.fs):
                _log.warning("removed a temp file left by an interrupted write", path=str(tmp))
        names_damaged = self.names_file.damage is not None
        map_file = self._map_unusable is not None and self._map_unusable.from_file
        self.set_evidence_aside()
        if names_damaged:
            self._rewrite_names()  # the names kept on disk again, not only in memory
        if map_file:
            self._drop_unusable_map()
        if self.journal.records and not self.journal_mode:
            self.retire_journal()
        self.accepted = True  # last: a start refused above folds nothing at its stop

    def set_evidence_aside(self) -> None:
        """Keep a durable copy of an unusable container map (from its file, or from the
        journal's last record) and of a damaged names file, before any write may replace
        them (they are the evidence; a journal mode's first save writes both files). Called
        by :meth:`restored` and before a save at start; the damaged files stay in place, so
        a failure here or in the save after it leaves what a restart reads. PersistenceError
        naming the file when a copy cannot be kept: the change is not applied."""
        names = self.names_file
        for damaged, path, what, keep in (
            (self._map_unusable, self.containers_path, "container map", self._keep_map),
            (names.damage, names.path, "pod names file", self._keep_names),
        ):
            if damaged is None:
                continue
            try:
                keep()
            except Exception as err:
                raise PersistenceError(
                    f"cannot keep a copy of the damaged {what} {quote(path)}: "
                    f"{error_text(err)}; the change was not applied"
                ) from err

    def _keep_names(self) -> None:
        kept = keep_aside(self.names_file.path, self.names_file.damaged_data, "corrupt", self.fs)
        _log.error("a copy of the damaged pod names file kept", path=str(kept))
        self.names_file.copied_aside()

    def _keep_map(self) -> None:
        assert self._map_unusable is not None
        why, data, from_file = self._map_unusable
        kept = keep_aside(self.containers_path, data, "corrupt", self.fs)
        _log.error(
            "container map is unusable; a copy kept, starting without container ids "
            "(RemoveContainer by id cannot free their memory; SyncActivePods and ReleasePod can)",
            source=str(self.containers_path if from_file else self.journal.path),
            copy=str(kept),
            error=why,
        )
        self._map_unusable = None
        self._map_dirty = True  # the next save writes the map

    def _drop_unusable_map(self) -> None:
        """Remove the unusable map file once its copy is kept (a failure is only logged: the
        next save replaces the file)."""
        try:
            self.fs.unlink(self.containers_path)
            fsync_dir(self.dir, self.fs)
        except FileNotFoundError:
            pass
        except OSError as err:
            _log.warning(
                "could not remove the unusable container map (its copy is kept); the next "
                "change replaces it",
                path=str(self.containers_path),
                error=error_text(err),
            )

    def _rewrite_names(self) -> None:
        """Write the names file holding memory's names (a fold); on failure the next save folds
        (the damaged file, which replays to the same names, stays until then)."""
        data = encode_names(self._last_names)
        try:
            atomic_write(self.names_file.path, data, faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:  # in place: the next directory sync settles it
            _log.warning("pod names file rewritten, its directory sync failed", error=str(err))
        except PersistenceError as err:
            _log.warning("could not rewrite the pod names file; the next save does", error=str(err))
            return
        self.names_file.folded(data, {}, self._last_names, renamed=True)
