"""The metacache's versions: an immutable :class:`State` and a writer's copy-on-write :class:`Work`.

A :class:`State` is never mutated once published: readers of
:class:`~numamem.metacache.cache.MetaCache` take the current one without a lock. A writer
builds the next one through :class:`Work` under the cache's mutation lock, copying only
the maps it changes (a pod's containers, the pools, the regions); the new state's entry
and byte counts are derived from the base's and what the writer touched (O(change)).
A :class:`Persister` writes a state durably (:mod:`numamem.metacache.journal_store`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from numamem.errors import quote
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo

ContainerRef = tuple[str, str]


@dataclass(frozen=True)
class State:
    """One immutable version of the cache. Values inside are never mutated either."""

    pods: dict[str, dict[str, ContainerInfo]] = field(default_factory=dict)
    pools: dict[str, PoolInfo] = field(default_factory=dict)
    regions: dict[str, RegionInfo] = field(default_factory=dict)
    created: dict[ContainerRef, int] = field(default_factory=dict, compare=False)
    """Create timestamps (Unix ns) of containers added since start; in memory only, as
    katalyst keeps them, but part of each version so that a dropped change drops them too."""
    _entries: int = field(default=-1, init=False, compare=False, repr=False)
    """entry_count() memoised; a writer's :class:`Work` sets it from the base's count."""
    _bytes: int = field(default=-1, init=False, compare=False, repr=False)
    """byte_count() memoised, likewise."""

    def entry_count(self) -> int:
        """Containers + pools + regions (O(1) for states made by writers)."""
        if self._entries < 0:
            count = sum(len(c) for c in self.pods.values()) + len(self.pools) + len(self.regions)
            object.__setattr__(self, "_entries", count)
        return self._entries

    def byte_count(self) -> int:
        """The bytes of every entry's JSON (what the snapshot holds), O(1) for states made by
        writers: the base's count plus the pods, pools and regions they touched."""
        if self._bytes < 0:
            total = sum(json_bytes(c) for c in self.pods.values())
            total += json_bytes(self.pools) + json_bytes(self.regions)
            object.__setattr__(self, "_bytes", total)
        return self._bytes


def json_bytes(entries: Mapping[str, ContainerInfo | PoolInfo | RegionInfo] | None) -> int:
    """The bytes of the entries' JSON fragments (a pod's containers, the pools, the regions)."""
    return sum(info.fragment_bytes() for info in (entries or {}).values())


class Persister(Protocol):
    def save(self, state: State, pods: AbstractSet[str] | None = None) -> None:
        """Write ``state`` durably; raise PersistenceError on failure. ``pods`` are the pod
        uids changed since the last save (None: unknown), for persisters that write changes."""


class NoPersistence:
    def save(self, state: State, pods: AbstractSet[str] | None = None) -> None:
        return None


class Work:
    """A writer's copy-on-write view of the pending state, used under the mutation lock."""

    def __init__(self, base: State) -> None:
        self.base = base
        self.pods = base.pods
        self.pools = base.pools
        self.regions = base.regions
        self.created = base.created
        self.changed = False
        self._own_pods: set[str] = set()
        self._deleted_pods: set[str] = set()
        self._own_top: set[str] = set()

    def pods_for_write(self) -> dict[str, dict[str, ContainerInfo]]:
        if "pods" not in self._own_top:
            self.pods = dict(self.pods)
            self._own_top.add("pods")
        return self.pods

    def pod_for_write(self, pod_uid: str) -> dict[str, ContainerInfo]:
        pods = self.pods_for_write()
        if pod_uid not in self._own_pods:
            pods[pod_uid] = dict(pods.get(pod_uid, {}))
            self._own_pods.add(pod_uid)
        return pods[pod_uid]

    def delete_pod(self, pod_uid: str) -> None:
        del self.pods_for_write()[pod_uid]
        self._deleted_pods.add(pod_uid)

    def created_for_write(self) -> dict[ContainerRef, int]:
        """The create timestamps, copied on the first change (they are not a change to persist)."""
        if "created" not in self._own_top:
            self.created = dict(self.created)
            self._own_top.add("created")
            self.changed = True  # published with the change; the checkpoint bytes do not change
        return self.created

    def pools_for_write(self) -> dict[str, PoolInfo]:
        if "pools" not in self._own_top:
            self.pools = dict(self.pools)
            self._own_top.add("pools")
        return self.pools

    def regions_for_write(self) -> dict[str, RegionInfo]:
        if "regions" not in self._own_top:
            self.regions = dict(self.regions)
            self._own_top.add("regions")
        return self.regions

    def touched_pods(self) -> set[str]:
        return self._own_pods | self._deleted_pods

    def state(self) -> State:
        """The new state, its entry count derived from the base's and the pods touched."""
        state = State(self.pods, self.pools, self.regions, self.created)
        base = self.base
        delta = sum(
            len(self.pods.get(p, ())) - len(base.pods.get(p, ()))
            for p in self._own_pods | self._deleted_pods
        )
        delta += len(self.pools) - len(base.pools) + len(self.regions) - len(base.regions)
        object.__setattr__(state, "_entries", base.entry_count() + delta)
        grown = sum(
            json_bytes(self.pods.get(p)) - json_bytes(base.pods.get(p))
            for p in self._own_pods | self._deleted_pods
        )
        if self.pools is not base.pools:
            grown += json_bytes(self.pools) - json_bytes(base.pools)
        if self.regions is not base.regions:
            grown += json_bytes(self.regions) - json_bytes(base.regions)
        object.__setattr__(state, "_bytes", base.byte_count() + grown)
        return state

    def changed_entries(self) -> Iterator[tuple[str, ContainerInfo | PoolInfo | RegionInfo]]:
        """(what, entry) for every entry this change stores anew (a new object)."""
        base = self.base
        for uid in self._own_pods:
            before = base.pods.get(uid, {})
            for name, info in self.pods.get(uid, {}).items():
                if before.get(name) is not info:
                    yield f"container {quote(name)} of pod {quote(uid)}", info
        for kind, now, was in (
            ("pool", self.pools, base.pools),
            ("region", self.regions, base.regions),
        ):
            if now is not was:
                for name, entry in now.items():
                    if was.get(name) is not entry:
                        yield f"{kind} {quote(name)}", entry
