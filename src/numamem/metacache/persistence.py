"""``<state-dir>/sys_advisor_state``: the metacache checkpoint.

The file is the project's canonical JSON (sorted keys, compact, UTF-8; see
:func:`numamem.metacache.types.canonical_json`) of::

    {"checksum": N, "pod_entries": {...}, "pool_entries": {...}, "region_entries": {...}}

where ``N`` is FNV-1a-32 of the same text with ``"checksum":0`` (decision D5;
files written by the Go katalyst agent do not verify, by design). Entries use
katalyst's JSON field names. It is written atomically (temp file, fsync,
rename, directory fsync) from per-entry fragments cached on the stored
objects, so a write costs the join and the hash, not a re-encoding of every
entry.

Restore: a missing file means an empty cache (written at once); ``null`` or
missing entry maps are empty (D4); a checksum mismatch or an unparsable file
refuses start-up (D6) unless the operator asks to discard it, which moves the
file aside (never deletes it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from numamem.checkpoint.filestore import (
    FaultHook,
    atomic_write,
    move_aside,
    observed,
    read_file,
    remove_stale_temps,
)
from numamem.checkpoint.fnv import fnv1a_32
from numamem.errors import (
    PATH_QUOTE_BYTES,
    CheckpointError,
    CorruptCheckpointError,
    DurabilityUnknownError,
    InvalidArgumentError,
    quote,
)
from numamem.logging import get_logger
from numamem.metacache.state import State
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo, canonical_json

_log = get_logger("metacache")

STATE_FILE = "sys_advisor_state"


def json_key(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


PodTextCache = dict[str, tuple[object, bytes]]
"""pod uid -> (the pod's container mapping, its UTF-8 JSON text); see :func:`encode`."""


def pod_text(pod: str, ctrs: dict[str, ContainerInfo]) -> bytes:
    """The snapshot's text of one pod entry (``"uid":{...}``), from its containers' cached
    fragments."""
    return (
        json_key(pod)
        + ":{"
        + ",".join(json_key(c) + ":" + info.fragment() for c, info in sorted(ctrs.items()))
        + "}"
    ).encode()


_CHECKSUM_ZERO = b'{"checksum":0'


def encode(state: State, cache: PodTextCache | None = None, generation: int | None = None) -> bytes:
    """The checkpoint bytes for ``state`` (canonical JSON with its checksum).

    ``generation`` (the journal's snapshot mode) adds ``"generation": N``: the number
    of journal records the snapshot includes, which binds a journal to it
    (:mod:`numamem.metacache.journal`). Go decoders ignore the extra field.

    With ``cache``, a pod's text is reused while its container mapping is the
    same object: the cache never mutates a committed mapping (a change copies
    the pod's mapping), so identity means "unchanged". The cache holds the
    mappings it saw, so an identity cannot be recycled; texts missing from it are
    made and added, and gone pods forgotten. The daemon's journal keeps the texts
    of the pods each commit changed, so a snapshot mostly joins bytes: one join, one
    hash and one copy of the whole file.
    """
    texts = []
    for pod, ctrs in sorted(state.pods.items()):
        hit = cache.get(pod) if cache is not None else None
        if hit is not None and hit[0] is ctrs:
            texts.append(hit[1])
            continue
        text = pod_text(pod, ctrs)
        if cache is not None:
            cache[pod] = (ctrs, text)
        texts.append(text)
    if cache is not None and len(cache) > len(state.pods):
        for gone in [p for p in cache if p not in state.pods]:
            del cache[gone]
    pools = ",".join(json_key(n) + ":" + p.fragment() for n, p in sorted(state.pools.items()))
    regions = ",".join(json_key(n) + ":" + r.fragment() for n, r in sorted(state.regions.items()))
    head = b"" if generation is None else b',"generation":%d' % generation
    zeroed = b"".join(
        (
            _CHECKSUM_ZERO,
            head,
            b',"pod_entries":{',
            b",".join(texts),
            f'}},"pool_entries":{{{pools}}},"region_entries":{{{regions}}}}}'.encode(),
        )
    )
    checksum = fnv1a_32(zeroed)
    return b'{"checksum":%d' % checksum + memoryview(zeroed)[len(_CHECKSUM_ZERO) :]


def decode(data: bytes) -> State:
    """Parse and verify; raises CheckpointError (CorruptCheckpointError on a checksum mismatch)."""
    return decode_snapshot(data)[0]


def decode_snapshot(data: bytes) -> tuple[State, int]:
    """:func:`decode`, and the snapshot's generation (0 when the file has none)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:  # Recursion: nesting
        raise CheckpointError(f"not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise CheckpointError("not a metacache checkpoint (expected a JSON object)")
    stored = doc.get("checksum")
    if not isinstance(stored, int) or isinstance(stored, bool):
        raise CheckpointError("no checksum")
    try:
        actual = fnv1a_32(canonical_json({**doc, "checksum": 0}).encode())
    except ValueError as err:
        raise CheckpointError(f"cannot canonicalise: {err}") from err
    if actual != stored:
        raise CorruptCheckpointError(stored, actual)
    generation = doc.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise CheckpointError(f"bad generation {quote(generation)}")
    try:
        state = State(
            {
                str(p): {str(c): ContainerInfo.from_json(_obj(i)) for c, i in _obj(ctrs).items()}
                for p, ctrs in _obj(doc.get("pod_entries")).items()
            },
            {str(n): PoolInfo.from_json(_obj(i)) for n, i in _obj(doc.get("pool_entries")).items()},
            {
                str(n): RegionInfo.from_json(_obj(i))
                for n, i in _obj(doc.get("region_entries")).items()
            },
        )
    except (ValueError, TypeError, AttributeError, InvalidArgumentError) as err:
        raise CheckpointError(f"cannot decode entries: {err}") from err
    return state, generation


def _obj(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


class CheckpointPersister:
    """Writes the metacache checkpoint; the cache calls :meth:`save` from one committer at a time."""

    def __init__(self, state_dir: str | Path, faults: FaultHook | None = None) -> None:
        self.path = Path(state_dir) / STATE_FILE
        self.faults = faults
        self.writes = 0
        self._last: bytes | None = None
        self._pod_texts: PodTextCache = {}
        self.observers: list[Callable[[float, bool], None]] = []
        """Called after each write with (seconds, succeeded)."""
        self.durability_observers: list[Callable[[str | None], None]] = []
        """Called after each write: the DurabilityUnknownError text, or None when durable."""

    def load(self, *, discard_corrupt: bool = False) -> State | None:
        """The stored state, or None when there is no file. See the module docstring for refusals.

        Reads only, unless the operator asked to discard a corrupt file.
        """
        data = read_file(self.path)
        if data is None:
            return None
        try:
            state = decode(data)
        except CheckpointError as err:
            if not discard_corrupt:
                raise CheckpointError(
                    f"could not restore the metacache from {quote(self.path, limit=PATH_QUOTE_BYTES)}: {err}; move the file away, or "
                    "start with --metacache-discard-corrupt-state to set it aside and start empty"
                ) from err
            aside = move_aside(self.path, "corrupt")
            _log.warning(
                "metacache checkpoint unusable; moved aside, starting empty",
                error=str(err),
                moved_to=str(aside),
            )
            return None
        self._last = data
        return state

    def restored(self) -> None:
        """The daemon starts with the loaded state: remove temp files of interrupted writes."""
        for tmp in remove_stale_temps(self.path.parent, STATE_FILE):
            _log.warning("removed a temp file left by an interrupted write", path=str(tmp))

    def save(self, state: State, pods: AbstractSet[str] | None = None) -> None:
        """Write ``state`` (all of it; ``pods`` is not needed); PersistenceError leaves the file
        as it was, DurabilityUnknownError means the file holds ``state`` but a directory sync
        failed."""
        data = encode(state, self._pod_texts)
        if data == self._last:
            return
        unknown: DurabilityUnknownError | None = None
        try:
            with observed(self.observers):
                atomic_write(self.path, data, faults=self.faults)
        except DurabilityUnknownError as err:
            unknown = err
        self._last = data
        self.writes += 1
        for durability in self.durability_observers:
            durability(None if unknown is None else str(unknown))
        if unknown is not None:
            raise unknown
