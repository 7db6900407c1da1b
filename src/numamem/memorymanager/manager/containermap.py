"""Container id -> (pod uid, container name), kubelet's ``containermap.ContainerMap``.

Insertion-ordered, so "the first id found" (``GetContainerID``) is the oldest
entry for that reference: deterministic where Go's map order is random.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from numamem.memtypes import ContainerRef


class ContainerMap:
    """Not thread-safe; the manager serialises access. Copy before mutating a committed map."""

    __slots__ = ("_ids",)

    def __init__(self, entries: Mapping[str, ContainerRef] | None = None) -> None:
        self._ids: dict[str, ContainerRef] = dict(entries or {})

    def copy(self) -> ContainerMap:
        return ContainerMap(self._ids)

    def add(self, pod_uid: str, container_name: str, container_id: str) -> None:
        """Map ``container_id`` to the reference, replacing an earlier mapping of that id."""
        self._ids[container_id] = (pod_uid, container_name)

    def get_container_ref(self, container_id: str) -> ContainerRef | None:
        return self._ids.get(container_id)

    def get_container_id(self, pod_uid: str, container_name: str) -> str | None:
        for cid, ref in self._ids.items():
            if ref == (pod_uid, container_name):
                return cid
        return None

    def remove_by_container_ref(self, pod_uid: str, container_name: str) -> None:
        """Remove the first id that maps to the reference (only one, like the kubelet)."""
        cid = self.get_container_id(pod_uid, container_name)
        if cid is not None:
            del self._ids[cid]

    def items(self) -> Iterator[tuple[str, ContainerRef]]:
        return iter(list(self._ids.items()))

    def as_dict(self) -> dict[str, ContainerRef]:
        return dict(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, ContainerMap) and other._ids == self._ids)

    __hash__ = None  # type: ignore[assignment]
