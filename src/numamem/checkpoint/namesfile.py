"""The pod names file (``numamem_pod_names``): each named pod's namespace and name, as a journal.

With ``--podresources-socket`` the memory manager keeps the namespace and name of each pod
with state, and a pod's name must be durable before a state that holds the pod. Naming a new
pod is the common case of an admission, so the name is **appended** (one small record, one
fsync of a file that only grows: about a third of an atomic write here) instead of rewriting
a whole file beside the state's atomic write.

The file is records in the frame of :mod:`numamem.checkpoint.records`: a header
``{"podNames":1}``, then ``["uid","namespace","name"]`` per recording, in order. Replaying
it is: for each record, remove the uid and insert it last (the newest recording of a uid
wins and is the last one: the order of the pod names, see
:class:`~numamem.memorymanager.manager.versions.Committed`); then the store drops the uids without
state, as it drops container ids. So a pod that loses its state needs no record: its name is
inert on disk, and a later recording of the uid moves it last again.

A **fold** rewrites the file (an atomic write, in the same
:func:`~numamem.checkpoint.filestore.atomic_write_all` as the state, ahead of it) with one
record per name. It replaces an append when an append cannot keep the replay equal to
memory:

* the file is missing, damaged, ends in a torn record, or an append or the write after it
  failed (a durable record of a change that was not applied must not stay behind);
* a uid that has a name changes it, or a uid whose name is inert on disk gets state without
  a name (the inert name would come back);
* the records are more than twice the last fold and :data:`FOLD_MIN_BYTES` (the file's
  size stays proportional to the names; a fold is amortised over the appends).

A fold also keeps the names of uids this save removes, in their place: if the state's rename
does not happen (a failure or a power cut), a restart still names every pod of the old state
in the old order; with it, those names are inert.

Not thread-safe: the store calls it under the memory manager's lock.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path

from numamem.checkpoint.filestore import FaultHook, close_quietly, error_text, no_fault, read_file
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.records import Scan, frame
from numamem.errors import PATH_QUOTE_BYTES, CheckpointError, PersistenceError, quote

NAMES_FILE = "numamem_pod_names"
FOLD_MIN_BYTES = 64 << 10
"""The records a file holds beyond twice its last fold before the next save folds it."""

Names = Mapping[str, tuple[str, str]]
_HEADER = frame(b'{"podNames":1}')


def _record(uid: str, name: tuple[str, str]) -> bytes:
    return frame(json.dumps([uid, name[0], name[1]], separators=(",", ":")).encode())


def _removed(old: Names, new: Names) -> set[str]:
    """The uids ``old`` names and ``new`` does not (set operations on key views, in C)."""
    return set() if old.keys() <= new.keys() else old.keys() - new.keys()


def encode_names(names: Names) -> bytes:
    """The file holding ``names`` in their order (a fold)."""
    return _HEADER + b"".join(_record(uid, n) for uid, n in names.items())


@dataclass
class NamesRead:
    """What :func:`read_names` found: the replayed names and why the file must be folded."""

    names: dict[str, tuple[str, str]]
    torn: int = 0
    """Bytes of a torn last record (a crash during its append)."""
    damage: str | None = None
    """Why the records after a point were left unread (names read before it are kept)."""


def read_names(data: bytes, where: Path) -> NamesRead:
    """Replay the file's records (see the module); never raises on bad content."""
    names: dict[str, tuple[str, str]] = {}
    scan = Scan(data, where)
    damage = None
    try:
        for n, (start, end) in enumerate(scan):
            payload = data[start:end]
            if n == 0:
                if payload != _HEADER[18:-1]:
                    damage = f"{where}: not a pod names file (its first record is not the header)"
                    break
                continue
            value = json.loads(payload)
            if not (
                isinstance(value, list)
                and len(value) == 3
                and all(isinstance(v, str) for v in value)
            ):
                damage = f"{where}: record {n} is not [uid, namespace, name]"
                break
            uid, namespace, name = value
            names.pop(uid, None)
            names[uid] = (namespace, name)
    except (CheckpointError, ValueError, RecursionError) as err:  # RecursionError: nesting
        damage = f"{where}: {err}" if isinstance(err, RecursionError) else str(err)
    return NamesRead(names, scan.torn, damage)


class NamesJournal:
    """The store's side of the pod names file: what it replays to (memory's names, plus the
    inert names of uids without state) and, per save, nothing, an append or a fold (see
    the module)."""

    def __init__(self, directory: Path, fs: FileSystem = REAL) -> None:
        self.path = directory / NAMES_FILE
        self.fs = fs
        self._fd: int | None = None
        self._inert: set[str] = set()
        """Uids the file names that memory does not (their pods have no state)."""
        self._exists = False
        self._size = 0
        self._fold_size = 0
        self._fold_next = False
        self.damage: str | None = None
        """Why the file read at restore was unusable in part (the store keeps a copy)."""
        self.damaged_data = b""
        """The damaged file's bytes, read at restore (the evidence the store keeps)."""
        self.appends = 0
        self.folds = 0

    # --- restore ---------------------------------------------------------------------

    def load(self) -> dict[str, tuple[str, str]] | None:
        """The names the file replays to (None: no file). A torn tail or damage makes the
        next save fold; ``damage`` says what was left unread."""
        data = read_file(self.path, self.fs)
        if data is None:
            return None
        found = read_names(data, self.path)
        self._exists = True
        self._size = self._fold_size = len(data)
        # A file without its header (empty: truncated) is folded before anything is appended.
        self._fold_next = bool(found.torn or found.damage) or not data.startswith(_HEADER)
        self.damage = found.damage
        self.damaged_data = data if found.damage is not None else b""
        self._inert = set(found.names)
        return found.names

    def restored(self, kept: Names, extra: Names) -> None:
        """Restore kept ``kept`` (names of pods with state); ``extra``: names that came from
        elsewhere (an older container map), which the next save folds in."""
        self._inert -= kept.keys()
        if extra:
            self._fold_next = True

    def copied_aside(self) -> None:
        """A copy of the damaged file is kept; the next save folds over the file (:meth:`load`
        made it fold on damage), which a restart reads to the same names until then."""
        self.damage = None
        self.damaged_data = b""

    # --- save ------------------------------------------------------------------------

    def plan(self, old: Names, new: Names, has_state: Container[str]) -> tuple[str, bytes] | None:
        """What saving memory's names ``old`` -> ``new`` takes: ``("append", records)``,
        ``("fold", file)`` or None (the file replays to ``new`` once the uids without state
        are dropped). ``has_state``: the uids with state after the save."""
        if not self._exists:
            return ("fold", self._fold_bytes(old, new)) if new else None
        if self._fold_next:
            return "fold", self._fold_bytes(old, new)
        keys, before = list(new), list(old)
        if keys[: len(before)] == before and old.items() <= new.items():
            added = keys[len(before) :]  # the common case: names recorded, none removed
        else:
            added = [uid for uid, n in new.items() if old.get(uid) != n]
            if any(uid in old for uid in added):
                return "fold", self._fold_bytes(old, new)  # a uid's name changed
            fresh = set(added)
            if [uid for uid in old if uid in new and uid not in fresh] + added != keys:
                return "fold", self._fold_bytes(old, new)  # an order no append gives
        removed = _removed(old, new)
        inert = self._inert | removed if removed else self._inert
        if inert and any(uid not in new for uid in filter(has_state.__contains__, inert)):
            return "fold", self._fold_bytes(old, new)  # an inert name would come back
        if len(inert) > 64 + len(new) or (
            added and self._size > FOLD_MIN_BYTES + 2 * self._fold_size
        ):
            return "fold", self._fold_bytes(old, new)
        if not added:
            return None
        return "append", b"".join(_record(uid, new[uid]) for uid in added)

    def _fold_bytes(self, old: Names, new: Names) -> bytes:
        if [uid for uid in old if uid in new] == [uid for uid in new if uid in old]:
            # Replays to ``old`` with the old state and to ``new`` with the new one, order
            # included (the uids only one of them has are inert in the other).
            return encode_names({**old, **new})
        removed = {uid: n for uid, n in old.items() if uid not in new}
        return encode_names({**removed, **new})  # not reached by the manager's names

    def append(self, records: bytes, faults: FaultHook | None = None) -> None:
        """Append ``records`` and fsync them; PersistenceError (nothing applied) on any
        Exception, after which the next save folds (the records may be in the file)."""
        hook = faults or no_fault
        try:
            if self._fd is None:
                hook("open", self.path)
                self._fd = self.fs.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            hook("append", self.path)
            view = memoryview(records)
            while view:
                view = view[self.fs.write(self._fd, view) :]
            hook("append-fsync", self.path)
            self.fs.fsync(self._fd)
        except BaseException as err:
            self._fold_next = True
            self._close()
            if not isinstance(err, Exception):
                raise
            raise PersistenceError(
                f"cannot append to the pod names file {quote(self.path, limit=PATH_QUOTE_BYTES)}: "
                f"{error_text(err)}; the change was not applied"
            ) from err
        self._size += len(records)
        self.appends += 1

    def saved(self, old: Names, new: Names, applied: bool) -> None:
        """After the write that followed :meth:`plan` (an append, or nothing): memory is
        ``new`` (applied) or stays ``old`` while the file may hold records of ``new`` (the
        next save folds)."""
        if not applied:
            self._fold_next = True
            return
        removed = _removed(old, new)
        if removed:
            self._inert |= removed
        if self._inert:
            self._inert -= new.keys()

    def folded(self, data: bytes, old: Names, new: Names, renamed: bool) -> None:
        """After a write that included a fold: the file is the fold (``renamed``) or as
        before; either way the descriptor of the old file is closed."""
        self._close()
        if not renamed:
            return
        self._exists = True
        self._inert = old.keys() - new.keys()
        self._size = self._fold_size = len(data)
        self._fold_next = False
        self.folds += 1
        with contextlib.suppress(Exception):  # opened for the next append (else it retries)
            self._fd = self.fs.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def stale(self) -> None:
        """The file holds what memory does not (a failed write after a fold's rename)."""
        self._fold_next = True

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        close_quietly(self.fs, fd)

    def close(self) -> None:
        """Close the append descriptor (the next append reopens it)."""
        self._close()
