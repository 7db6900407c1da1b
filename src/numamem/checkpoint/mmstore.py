"""The memory manager's store: ``memory_manager_state`` (kubelet format) plus numamem's container map.

``<state-dir>/memory_manager_state`` holds exactly what the kubelet's file holds
(V1 written; V1, V2 and V3 read), so a kubelet and numamem can take over each
other's state. The container id -> (pod, container) map, which the kubelet
rebuilds from the container runtime at start, lives in numamem's own file
``<state-dir>/numamem_containers`` (never inside the kubelet's file), with
the namespace and name of each pod with state when the manager records them
(the podresources API lists pods by name; the kubelet knows them from the API
server). Names follow the same rules as ids: a new or changed name is an add.

Write order keeps the two files consistent without a shared transaction:

* when an operation adds ids, the container map is written first, then the
  memory manager state; a crash in between leaves ids for containers whose
  operation was not acknowledged, which the client retries (AddContainer is
  idempotent);
* when it only removes ids, the state is written first and the map after;
* on start, map entries whose container has no blocks are dropped, so ids left
  behind by a crash between the two writes are inert.

A failed write of the state (or of the map before it) fails the operation with
the previous files in place; a failed map write *after* the state is logged
and retried with the next write, since its stale ids are inert by the rule
above. When only a directory sync fails, the files hold the new state (what a
restart reads) with unknown durability: the save finishes writing and raises
:class:`~numamem.errors.DurabilityUnknownError`, and the manager keeps the new
state in memory. The bytes of the last write are kept in memory, so no write
reads a file first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from numamem.checkpoint import kubelet
from numamem.checkpoint.filestore import (
    FaultHook,
    atomic_write,
    move_aside,
    observed,
    read_file,
    remove_stale_temps,
)
from numamem.checkpoint.fnv import fnv1a_32
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.errors import (
    CheckpointError,
    CorruptCheckpointError,
    DurabilityUnknownError,
    PersistenceError,
)
from numamem.logging import get_logger
from numamem.memtypes import ContainerRef, Snapshot

_log = get_logger("checkpoint")

STATE_FILE = "memory_manager_state"
CONTAINERS_FILE = "numamem_containers"


def restore_error(path: Path, err: object) -> CheckpointError:
    """The kubelet's wrapper text, naming the file and the fix."""
    return CheckpointError(
        f"could not restore state from checkpoint: {err}, please drain this node and delete the memory "
        f'manager checkpoint file "{path}" before restarting numamem'
    )


class KubeletStateStore:
    """A :class:`~numamem.memorymanager.store.StateStore` on a state directory.

    Not thread-safe: the memory manager calls it under its own lock. Restoring
    only reads: temp files of interrupted writes and an unusable container map
    are dealt with in :meth:`restored`, once the manager accepted the state, so
    a refused start changes nothing on disk.
    """

    def __init__(
        self, state_dir: str | Path, faults: FaultHook | None = None, fs: FileSystem = REAL
    ) -> None:
        self.fs = fs
        self.dir = Path(state_dir)
        self.state_path = self.dir / STATE_FILE
        self.containers_path = self.dir / CONTAINERS_FILE
        self.faults = faults
        self._last_state: bytes | None = None
        self._encoder = kubelet.V1Encoder()
        self._last_map: dict[str, ContainerRef] = {}
        self._last_names: dict[str, tuple[str, str]] = {}
        self._map_dirty = False
        self._map_unusable: str | None = None
        self.writes = 0
        self.observers: list[Callable[[float, bool], None]] = []
        """Called after each write of memory_manager_state with (seconds, succeeded)."""
        self.durability_observers: list[Callable[[str | None], None]] = []
        """Called after each save that wrote: the DurabilityUnknownError text, or None when
        everything written is durable (which also makes earlier unknown writes durable)."""

    # --- restore ---------------------------------------------------------------

    def restore(self, policy_name: str) -> Snapshot | None:
        data = read_file(self.state_path, self.fs)
        if data is None:
            return None
        try:
            loaded = kubelet.load(data)
        except CheckpointError as err:
            raise restore_error(self.state_path, err) from err
        if loaded.policy_name != policy_name:
            raise restore_error(
                self.state_path,
                f'[memorymanager] configured policy "{policy_name}" differs from state checkpoint policy '
                f'"{loaded.policy_name}"',
            )
        if loaded.format != "v1":
            _log.info(
                "memory manager state read in an older/newer format; it is rewritten as V1 at the "
                "next change",
                format=loaded.format,
                path=str(self.state_path),
            )
        self._last_state = data
        containers, names = self._read_containers()
        live = {(p, c) for p, ctrs in loaded.assignments.items() for c in ctrs}
        kept = {cid: ref for cid, ref in containers.items() if ref in live}
        kept_names = {uid: n for uid, n in names.items() if uid in loaded.assignments}
        if len(kept) != len(containers) or len(kept_names) != len(names):
            _log.info(
                "dropped container ids and pod names without memory state",
                dropped=len(containers) - len(kept) + len(names) - len(kept_names),
            )
            self._map_dirty = True
        self._last_map, self._last_names = kept, kept_names
        return Snapshot(
            loaded.policy_name, loaded.machine_state, loaded.assignments, kept, kept_names
        )

    def _read_containers(self) -> tuple[dict[str, ContainerRef], dict[str, tuple[str, str]]]:
        data = read_file(self.containers_path, self.fs)
        if data is None:
            return {}, {}
        try:
            return decode_container_file(data)
        except CheckpointError as err:
            self._map_unusable = str(err)
            return {}, {}

    def restored(self) -> None:
        """The restored state was accepted: remove temp files, set an unusable map aside."""
        for name in (STATE_FILE, CONTAINERS_FILE):
            for tmp in remove_stale_temps(self.dir, name, self.fs):
                _log.warning("removed a temp file left by an interrupted write", path=str(tmp))
        if self._map_unusable is not None:
            aside = move_aside(self.containers_path, "corrupt", self.fs)
            _log.error(
                "container map file is unusable; moved aside, starting without container ids "
                "(RemoveContainer by id cannot free their memory; SyncActivePods and ReleasePod can)",
                path=str(self.containers_path),
                moved_to=str(aside),
                error=self._map_unusable,
            )
            self._map_unusable = None

    # --- save --------------------------------------------------------------------

    def save(self, snapshot: Snapshot) -> None:
        """Write what changed, in the order of the module docstring.

        Raises PersistenceError (nothing changed on disk that a restart would
        use) or DurabilityUnknownError (every file holds the new state; a
        directory sync failed).
        """
        state = self._encoder.encode(
            snapshot.policy_name, snapshot.machine_state, snapshot.assignments
        )
        new_map, new_names = dict(snapshot.container_map), dict(snapshot.pod_names)
        old_map, old_names = self._last_map, self._last_names
        adds = any(old_map.get(cid) != ref for cid, ref in new_map.items()) or any(
            old_names.get(uid) != name for uid, name in new_names.items()
        )
        unknown: DurabilityUnknownError | None = None
        wrote = False
        if adds:
            unknown = self._write_map(new_map, new_names)
            wrote = True
        if state != self._last_state:
            try:
                with observed(self.observers):
                    unknown = self._write(self.state_path, state) or unknown
            except PersistenceError:
                if adds:
                    self._best_effort_map(old_map, old_names)
                raise
            self._last_state = state
            wrote = True
        if not adds and (new_map != old_map or new_names != old_names or self._map_dirty):
            try:
                unknown = self._write_map(new_map, new_names) or unknown
                wrote = True
            except PersistenceError as err:
                self._map_dirty = True
                _log.warning(
                    "container map write failed; stale ids are inert and rewritten later",
                    error=str(err),
                )
        self._last_map, self._last_names = new_map, new_names
        if wrote:
            for observer in self.durability_observers:
                observer(None if unknown is None else str(unknown))
        if unknown is not None:
            raise unknown

    def _write(self, path: Path, data: bytes) -> DurabilityUnknownError | None:
        """Write ``path``; a failed directory sync is returned (the file is in place)."""
        try:
            atomic_write(path, data, faults=self.faults, fs=self.fs)
        except DurabilityUnknownError as err:
            self.writes += 1
            return err
        self.writes += 1
        return None

    def _write_map(
        self, entries: dict[str, ContainerRef], names: dict[str, tuple[str, str]]
    ) -> DurabilityUnknownError | None:
        unknown = self._write(self.containers_path, encode_containers(entries, names))
        self._map_dirty = False
        return unknown

    def _best_effort_map(
        self, entries: dict[str, ContainerRef], names: dict[str, tuple[str, str]]
    ) -> None:
        try:
            self._write_map(entries, names)
        except PersistenceError as err:
            self._map_dirty = True
            _log.warning(
                "could not roll back the container map; its extra ids are inert", error=str(err)
            )


def encode_containers(
    entries: dict[str, ContainerRef], names: dict[str, tuple[str, str]] | None = None
) -> bytes:
    """``{"checksum": FNV-1a-32 of the body, "containers": {id: [pod, container]},
    "order": [uid, ...], "pods": {uid: [namespace, name]}}`` (``order`` and ``pods`` only
    when there are names, so a file without them is the same as before they existed).
    ``order`` lists the uids of ``names`` in their order (oldest recording first: the
    newest holder of a name is its last uid); a reader that ignores it loses only that.

    Canonical JSON (sorted keys, compact); the body is everything but the checksum
    and, since "checksum" sorts first, the file is the body with the checksum
    spliced in front (one serialisation instead of two).
    """
    body: dict[str, object] = {
        "containers": {cid: [pod, ctr] for cid, (pod, ctr) in entries.items()}
    }
    if names:
        body["pods"] = {uid: [namespace, name] for uid, (namespace, name) in names.items()}
        body["order"] = list(names)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return b'{"checksum":%d,' % fnv1a_32(canonical) + canonical[1:]


def decode_containers(data: bytes) -> dict[str, ContainerRef]:
    return decode_container_file(data)[0]


def decode_container_file(
    data: bytes,
) -> tuple[dict[str, ContainerRef], dict[str, tuple[str, str]]]:
    """The container map and the pod names; raises CheckpointError."""
    try:
        doc = json.loads(data)
        stored = doc.pop("checksum")
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        result = {str(cid): (str(ref[0]), str(ref[1])) for cid, ref in doc["containers"].items()}
        names = {str(uid): (str(n[0]), str(n[1])) for uid, n in doc.get("pods", {}).items()}
        order = [str(uid) for uid in doc.get("order", ())]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise CheckpointError(f"cannot decode container map: {err}") from err
    if fnv1a_32(canonical.encode()) != stored:
        raise CorruptCheckpointError(stored, fnv1a_32(canonical.encode()))
    ordered = {uid: names[uid] for uid in order if uid in names}
    ordered.update((uid, n) for uid, n in names.items() if uid not in ordered)
    return result, ordered
