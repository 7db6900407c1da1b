"""numamem's container file (``numamem_containers``): container ids, checksummed (and, from older
numamem, pod names: read, no longer written; they live in ``numamem_pod_names``).

``{"checksum": FNV-1a-32 of the body, "containers": {id: [pod, container]}, "exclusive":
{uid: [container, ...]}, "order": [uid, ...], "pods": {uid: [namespace, name]}}``
(``order`` and ``pods`` only when there are names, ``exclusive`` only when a pod
allocated as a whole has containers with memory of their own, so a file without them is
the same as before they existed). ``order`` lists the uids of the names in their order
(oldest recording first: the newest holder of a name is its last uid); a reader that
ignores it loses only that. The body is canonical JSON
(sorted keys, compact) and, since "checksum" sorts first, the file is the body with the
checksum spliced in front.

:func:`encode_containers` builds the file from scratch; :class:`ContainerFileEncoder`
builds the same bytes from what changed since its last call (the memory manager writes
this file with every admission of a named pod, so its cost must follow the change, not
the number of containers on the node).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from numamem.checkpoint.fnv import fnv1a_32
from numamem.errors import CheckpointError, CorruptCheckpointError
from numamem.memtypes import ContainerRef

Names = Mapping[str, tuple[str, str]]
Exclusive = Mapping[str, frozenset[str]]
V = TypeVar("V", bound=Hashable)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _file(canonical: bytes) -> bytes:
    return b'{"checksum":%d,' % fnv1a_32(canonical) + canonical[1:]


def encode_containers(
    entries: Mapping[str, ContainerRef],
    names: Names | None = None,
    exclusive: Exclusive | None = None,
) -> bytes:
    """The file for ``entries``, ``names`` and ``exclusive`` (see the module), in one
    serialisation."""
    body: dict[str, object] = {
        "containers": {cid: [pod, ctr] for cid, (pod, ctr) in entries.items()}
    }
    if names:
        body["pods"] = {uid: [namespace, name] for uid, (namespace, name) in names.items()}
        body["order"] = list(names)
    if exclusive:
        body["exclusive"] = {uid: sorted(ctrs) for uid, ctrs in exclusive.items()}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return _file(canonical)


class _SortedMembers(Generic[V]):
    """The ``"key":value`` members of one JSON object in sorted key order, kept across calls.

    :meth:`members` diffs the mapping against the one it saw last (two set differences of
    item views, in C) and re-renders only the keys that were added, removed or changed.
    """

    def __init__(self, render: Callable[[V], str]) -> None:
        self._render = render
        self._values: dict[str, V] = {}
        self._keys: list[str] = []
        self._parts: list[str] = []
        self.key_json: dict[str, str] = {}
        """Each key as a JSON string (the ``order`` list reuses them)."""
        self._joined = ""

    def members(self, mapping: Mapping[str, V]) -> str:
        if mapping == self._values:  # the common case (one dict comparison, in C)
            return self._joined
        stale = self._values.items() - mapping.items()
        fresh = mapping.items() - self._values.items()
        for key, _ in stale:
            i = bisect.bisect_left(self._keys, key)
            del self._keys[i], self._parts[i], self._values[key], self.key_json[key]
        for key, value in fresh:
            i = bisect.bisect_left(self._keys, key)
            self.key_json[key] = _json(key)
            self._keys.insert(i, key)
            self._parts.insert(i, self.key_json[key] + ":" + self._render(value))
            self._values[key] = value
        self._joined = ",".join(self._parts)
        return self._joined


class ContainerFileEncoder:
    """:func:`encode_containers`, byte for byte, at the cost of what changed since the last call.

    Holds the texts of the last mapping it encoded (not the caller's mappings, which it
    never keeps or changes). Not thread-safe: one encoder per store.
    """

    def __init__(self) -> None:
        self._containers: _SortedMembers[ContainerRef] = _SortedMembers(
            lambda ref: _json([ref[0], ref[1]])
        )
        self._exclusive: _SortedMembers[frozenset[str]] = _SortedMembers(
            lambda ctrs: _json(sorted(ctrs))
        )
        self._pods: _SortedMembers[tuple[str, str]] = _SortedMembers(
            lambda name: _json([name[0], name[1]])
        )
        self._order: list[str] = []
        self._order_text = ""

    def encode(
        self,
        entries: Mapping[str, ContainerRef],
        names: Names | None = None,
        exclusive: Exclusive | None = None,
    ) -> bytes:
        parts = ['{"containers":{', self._containers.members(entries), "}"]
        if exclusive:
            parts += [',"exclusive":{', self._exclusive.members(exclusive), "}"]
        if names:
            pods = self._pods.members(names)
            order = list(names)
            if order != self._order:
                self._order = order
                self._order_text = ",".join(map(self._pods.key_json.__getitem__, order))
            parts += [',"order":[', self._order_text, '],"pods":{', pods, "}"]
        parts.append("}")
        return _file("".join(parts).encode())


def decode_containers(data: bytes) -> dict[str, ContainerRef]:
    return decode_container_file(data)[0]


def decode_container_file(
    data: bytes,
) -> tuple[dict[str, ContainerRef], dict[str, tuple[str, str]]]:
    """The container map and the pod names; raises CheckpointError."""
    record = read_container_file(data)
    return record.containers, record.names


@dataclass
class ContainerFile:
    """What ``numamem_containers`` holds (see the module)."""

    containers: dict[str, ContainerRef] = field(default_factory=dict)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    exclusive: dict[str, frozenset[str]] = field(default_factory=dict)


def read_container_file(data: bytes) -> ContainerFile:
    """Decode and verify ``numamem_containers``; raises CheckpointError."""
    try:
        doc = json.loads(data)
        stored = doc.pop("checksum")
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        result = {str(cid): (str(ref[0]), str(ref[1])) for cid, ref in doc["containers"].items()}
        names = {str(uid): (str(n[0]), str(n[1])) for uid, n in doc.get("pods", {}).items()}
        order = [str(uid) for uid in doc.get("order", ())]
        exclusive = {
            str(uid): frozenset(str(c) for c in ctrs)
            for uid, ctrs in doc.get("exclusive", {}).items()
        }
        actual = fnv1a_32(canonical.encode())  # UnicodeEncodeError (a ValueError): "\ud800"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as err:
        raise CheckpointError(f"cannot decode container map: {err}") from err
    if actual != stored:
        raise CorruptCheckpointError(stored, actual)
    ordered = {uid: names[uid] for uid in order if uid in names}
    ordered.update((uid, n) for uid, n in names.items() if uid not in ordered)
    return ContainerFile(result, ordered, exclusive)
