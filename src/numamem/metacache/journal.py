"""Snapshot plus journal: the files, their records, and restore (pure, plus offline tools).

Files in the state directory:

* ``sys_advisor_state``, the *snapshot*: the checksummed checkpoint of
  :mod:`numamem.metacache.persistence` plus ``"generation": G``, the number of
  journal records it includes (katalyst's decoder ignores the extra field);
* ``sys_advisor_state.journal``: records, each framed as
  ``<length: 8 hex> <crc32: 8 hex> <payload>\\n`` (the payload is JSON on one
  line). The first is the header ``{"base": B, "journal": 1}``; every later one
  is one acknowledged commit, ``{"seq": N, "pods": {...}, "pools": {...},
  "regions": {...}}``: for each pod it touched, the containers that changed
  (``null`` for one deleted) or ``null`` for a pod gone; for pools and regions
  the new entry or ``null``. Records are numbered ``B+1, B+2, ...``.

A snapshot of generation G goes with a journal whose base is at most G:
restore skips the records the snapshot has and replays the rest. It refuses
(``CheckpointError``) a snapshot whose checksum fails, a damaged record with
anything after it, a journal whose base is above the snapshot's generation
(they do not belong together) or whose numbers have a gap: corruption. A
damaged *last* record, with nothing after it, is a crash during its append (it
was never acknowledged): it is reported as ``torn`` for the caller to drop. A
journal that ends before its snapshot (a crash between a rewrite's two
renames) adds nothing.

The daemon's writer is :class:`numamem.metacache.journal_store.JournalPersister`;
:func:`read` and :func:`export` are the offline tools.
"""

from __future__ import annotations

import json
from collections.abc import Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numamem.checkpoint.filestore import atomic_write, read_file
from numamem.checkpoint.records import Scan, frame
from numamem.errors import PATH_QUOTE_BYTES, CheckpointError, quote
from numamem.metacache.persistence import STATE_FILE, decode_snapshot, encode, json_key
from numamem.metacache.state import State
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo

JOURNAL_FILE = STATE_FILE + ".journal"


# --- records ------------------------------------------------------------------------


def header(base: int) -> bytes:
    return frame(b'{"base":%d,"journal":1}' % base)


# --- changes ------------------------------------------------------------------------


def change_payload(seq: int, old: State, new: State, pods: Set[str] | None) -> bytes | None:
    """The record of the commit that turned ``old`` into ``new`` (None: nothing to persist).

    ``pods`` are the pod uids the commit may have touched (None: compare them all). A pod
    is written as the containers that changed (``null`` for one deleted), or ``null`` when
    the pod is gone; pools and regions by entry. Unchanged entries are recognised by
    identity: the cache copies what it changes and keeps the rest.
    """
    parts = []
    candidates = new.pods.keys() | old.pods.keys() if pods is None else pods
    pod_texts = []
    for uid in sorted(candidates):
        after, before = new.pods.get(uid), old.pods.get(uid)
        if after is before:
            continue
        if after is None:
            pod_texts.append(json_key(uid) + ":null")
            continue
        base = before or {}
        changed = [
            json_key(name) + ":" + ("null" if name not in after else after[name].fragment())
            for name in sorted(base.keys() | after.keys())
            if after.get(name) is not base.get(name)
        ]
        if changed or before is None:
            pod_texts.append(json_key(uid) + ":{" + ",".join(changed) + "}")
    if pod_texts:
        parts.append('"pods":{' + ",".join(pod_texts) + "}")
    for name, earlier, now in (
        ("pools", old.pools, new.pools),
        ("regions", old.regions, new.regions),
    ):
        if earlier is now:
            continue
        texts = [
            json_key(key) + ":" + ("null" if key not in now else now[key].fragment())
            for key in sorted(earlier.keys() | now.keys())
            if now.get(key) is not earlier.get(key)
            and not (
                key in now and key in earlier and now[key].fragment() == earlier[key].fragment()
            )
        ]
        if texts:
            parts.append(f'"{name}":{{' + ",".join(texts) + "}")
    if not parts:
        return None
    return ("{" + ",".join(parts) + f',"seq":{seq}}}').encode()


class Replay:
    """Records applied in order to a base state. Values stay JSON until :meth:`state`, so
    an entry changed many times is decoded once."""

    def __init__(self, base: State) -> None:
        self.base = base
        self._pods: dict[str, dict[str, Any] | None] = {}
        """Touched pods: container name -> JSON (or the base's ContainerInfo); None: gone."""
        self._pools: dict[str, Any] = {}
        self._regions: dict[str, Any] = {}

    def apply(self, record: dict[str, Any]) -> None:
        for uid, change in (record.get("pods") or {}).items():
            if change is None:
                self._pods[uid] = None
                continue
            current = self._pods.get(uid, _UNTOUCHED)
            if current is _UNTOUCHED:
                current = dict(self.base.pods.get(uid, {}))
            elif current is None:
                current = {}
            for name, value in change.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            self._pods[uid] = current
        self._pools.update(record.get("pools") or {})
        self._regions.update(record.get("regions") or {})

    def state(self) -> State:
        pods = dict(self.base.pods)
        for uid, containers in self._pods.items():
            if containers is None:
                pods.pop(uid, None)
            else:
                pods[uid] = {
                    name: v if isinstance(v, ContainerInfo) else ContainerInfo.from_json(v)
                    for name, v in containers.items()
                }
        pools = dict(self.base.pools)
        for name, info in self._pools.items():
            if info is None:
                pools.pop(name, None)
            else:
                pools[name] = PoolInfo.from_json(info)
        regions = dict(self.base.regions)
        for name, info in self._regions.items():
            if info is None:
                regions.pop(name, None)
            else:
                regions[name] = RegionInfo.from_json(info)
        return State(pods, pools, regions)


_UNTOUCHED: Any = object()


@dataclass
class Restored:
    """What :func:`restore` read: the state, and where the files stand (for the persister)."""

    state: State
    generation: int
    """The snapshot's."""
    seq: int
    """The last record replayed (the snapshot's generation when none was)."""
    journal_last: int
    """The journal's last record number (its base when it has none; -1 without a journal)."""
    journal_end: int
    torn: int
    snapshot_bytes: int
    records: int


def restore(
    snapshot: bytes | None,
    journal: bytes | None,
    where: Path,
    snapshot_path: Path | None = None,
) -> Restored | None:
    """Snapshot plus journal, checked (see the module docstring); None when neither exists.

    Raises CheckpointError naming the file that is damaged: ``where`` (the journal) or
    ``snapshot_path`` (default: the journal's sibling ``sys_advisor_state``).
    """
    if snapshot is None and journal is None:
        return None
    if snapshot is None:
        state, generation = State(), 0
    else:
        try:
            state, generation = decode_snapshot(snapshot)
        except CheckpointError as err:
            named = snapshot_path or where.with_name(STATE_FILE)
            raise CheckpointError(f"{named}: {err}") from err
    size = len(snapshot or b"")
    if journal is None:
        return Restored(state, generation, generation, -1, 0, 0, size, 0)
    found = Scan(journal, where)
    records = iter(found)
    first_span = next(records, None)
    if first_span is None:
        if found.torn:
            raise CheckpointError(f"{where}: no journal header")  # not even the first record
        return Restored(state, generation, generation, -1, 0, 0, size, 0)
    first = _json(journal, first_span, where)
    base = first.get("base") if isinstance(first, dict) and first.get("journal") == 1 else None
    if not isinstance(base, int) or base < 0:
        raise CheckpointError(f"{where}: the journal does not start with a header")
    if base > generation:
        raise CheckpointError(
            f"{where}: the journal starts after record {base} but the snapshot holds only "
            f"{generation}: they do not belong together"
        )
    replay = Replay(state)
    expected = base + 1
    try:
        for span in records:
            record = _json(journal, span, where)
            seq = record.get("seq") if isinstance(record, dict) else None
            if seq != expected:
                raise CheckpointError(
                    f"{where}: journal record {quote(seq)} where {expected} was due"
                )
            expected += 1
            if seq > generation:  # the snapshot has the others
                replay.apply(record)
        state = replay.state()
    except (ValueError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{where}: cannot apply a journal record: {err}") from err
    last = expected - 1  # a journal ending before the snapshot adds nothing: all is in it
    return Restored(
        state,
        generation,
        max(last, generation),
        last,
        found.end,
        found.torn,
        size,
        found.records - 1,
    )


def _json(data: bytes, span: tuple[int, int], where: Path) -> Any:
    try:
        return json.loads(data[span[0] : span[1]])
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise CheckpointError(f"{where}: a journal record at byte {span[0]} is not JSON") from err


def read(state_dir: str | Path) -> Restored | None:
    """Offline, read-only: the state in ``state_dir`` (snapshot + journal, checked; a torn
    last record is ignored), or None when there is none. Raises CheckpointError."""
    directory = Path(state_dir)
    return restore(
        read_file(directory / STATE_FILE),
        read_file(directory / JOURNAL_FILE),
        directory / JOURNAL_FILE,
        directory / STATE_FILE,
    )


def export(state_dir: str | Path) -> Restored:
    """Offline: restore snapshot + journal and write them back compacted (a complete snapshot,
    an empty journal). Idempotent. Raises CheckpointError when there is no state or it is
    corrupt (the files are then left as they are)."""
    directory = Path(state_dir)
    restored = read(directory)
    if restored is None:
        raise CheckpointError(
            f"{quote(directory, limit=PATH_QUOTE_BYTES)}: no metacache state ({STATE_FILE}) here"
        )
    if restored.journal_last == restored.seq == restored.generation and not restored.torn:
        return restored  # compacted already
    seq = restored.seq + 1
    snapshot, journal = encode(restored.state, generation=seq), header(seq)
    atomic_write(directory / STATE_FILE, snapshot)
    atomic_write(directory / JOURNAL_FILE, journal)
    return Restored(restored.state, seq, seq, seq, len(journal), 0, len(snapshot), 0)
