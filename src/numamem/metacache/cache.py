"""The metadata cache (katalyst-core sysadvisor ``MetaCache``), durable and linearizable.

Semantics are katalyst's persistent MetaCache plus ``RangePool``, with the
decisions D1-D8 listed in :mod:`numamem.metacache`: every value stored or returned is a copy (D1); returning
False from a Range callback stops the whole walk (D2); each checkpoint is one
consistent point-in-time state (D3); callbacks may read the cache but not
write through it (D7).

Concurrency and durability:

* A :class:`State` (pods, pools, regions) is never mutated once published.
  Readers take the current committed state without any lock, so a Range
  callback can read the cache freely.
* Writers serialise on one mutation lock, compute the new state copy-on-write
  (:mod:`numamem.metacache.state`) from the latest *pending* state (which
  includes writes not yet durable), and then wait until a checkpoint
  containing their change is on disk (group commit,
  :mod:`numamem.metacache.commit`): the first waiting writer writes the newest
  pending state for every writer queued so far, so under load one fsync covers
  many operations. Only then is the write acknowledged and visible to readers.
* If a checkpoint write fails, every pending change is dropped, all waiting
  writers fail with :class:`~numamem.errors.PersistenceError`, and memory is
  the last durable state again (katalyst keeps the in-memory change; numamem
  keeps memory and disk equal). When the outcome is unknown
  (:class:`~numamem.errors.DurabilityUnknownError`), memory follows what a
  restart reads: the new state when the error says it is applied (a directory
  sync failed after the rename), the old one otherwise; that round's writers
  fail with the error. Any other exception from the persister counts as an
  unknown outcome, not applied; a round always ends, so no writer waits for
  a committer that failed or was interrupted.
* Create timestamps are part of each state version: a change that is refused
  (limit) or dropped (failed write) takes its timestamps with it.
* A single mutation lock replaces katalyst's lock per family: critical
  sections are microseconds (copy-on-write of one pod's map), the slow part
  (serialisation and fsync) runs outside it, and one lock cannot deadlock.

Cost: the daemon's persister (:mod:`numamem.metacache.journal`) appends one
record per commit holding the entries the commit changed (the cache hands it
the pods it touched; pools and regions are compared by identity), so a commit
costs what it changed, not the size of the cache; a background compaction
rewrites the snapshot. :class:`~numamem.metacache.persistence.CheckpointPersister`
writes the whole one-file checkpoint per commit instead (katalyst's way).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import cast

from numamem.errors import FailedPreconditionError, LimitExceededError, NotFoundError, quote
from numamem.metacache.commit import GroupCommit
from numamem.metacache.state import ContainerRef, Persister, State, Work
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo

__all__ = ["MetaCache", "Persister", "State"]


class MetaCache(GroupCommit):
    """See the module docstring. ``clock`` gives Unix nanoseconds (create timestamps)."""

    def __init__(
        self,
        persister: Persister | None = None,
        *,
        initial: State | None = None,
        clock: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
        max_entries: int = 100000,
        max_entry_bytes: int = 256 * 1024,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        super().__init__(persister, initial, monotonic)
        self._clock = clock
        self._max_entries = max_entries
        self._max_entry_bytes = max_entry_bytes
        self._max_bytes = max_bytes
        self._walking = threading.local()

    # --- reading (lock-free on the committed state) ---------------------------

    def state(self) -> State:
        """The current committed state (immutable)."""
        return self._committed

    def get_container_info(self, pod_uid: str, container_name: str) -> ContainerInfo | None:
        info = self._committed.pods.get(pod_uid, {}).get(container_name)
        return None if info is None else info.clone()

    def get_container_entries(self, pod_uid: str) -> dict[str, ContainerInfo] | None:
        pod = self._committed.pods.get(pod_uid)
        return None if pod is None else {name: info.clone() for name, info in pod.items()}

    def range_container(self, f: Callable[[str, str, ContainerInfo], bool]) -> None:
        """Calls ``f`` with copies; returning False stops the whole walk (D2)."""
        with self._walk():
            for pod_uid, containers in self._committed.pods.items():
                for name, info in containers.items():
                    if not f(pod_uid, name, info.clone()):
                        return

    def get_pool_info(self, pool_name: str) -> PoolInfo | None:
        info = self._committed.pools.get(pool_name)
        return None if info is None else info.clone()

    def get_pool_size(self, pool_name: str) -> int | None:
        info = self._committed.pools.get(pool_name)
        return None if info is None else info.size()

    def range_pool(self, f: Callable[[str, PoolInfo], bool]) -> None:
        with self._walk():
            for name, info in self._committed.pools.items():
                if not f(name, info.clone()):
                    return

    def get_region_info(self, region_name: str) -> RegionInfo | None:
        info = self._committed.regions.get(region_name)
        return None if info is None else info.clone()

    def range_region_info(self, f: Callable[[str, RegionInfo], bool]) -> None:
        with self._walk():
            for name, info in self._committed.regions.items():
                if not f(name, info.clone()):
                    return

    @contextlib.contextmanager
    def _walk(self) -> Iterator[None]:
        """Marks this thread as inside a Range callback (writers then refuse, D7)."""
        previous = getattr(self._walking, "active", False)
        self._walking.active = True
        try:
            yield
        finally:
            self._walking.active = previous

    def create_timestamp(self, pod_uid: str, container_name: str) -> int | None:
        """Lock-free, like every read (a Range callback may call it, D7)."""
        return self._committed.created.get((pod_uid, container_name))

    def create_timestamp_count(self) -> int:
        return len(self._committed.created)

    # --- writing ----------------------------------------------------------------

    def _mutate(self, change: Callable[[Work], object]) -> object:
        """Apply ``change`` copy-on-write to the pending state; wait until it is durable."""
        if getattr(self._walking, "active", False):
            raise FailedPreconditionError(
                "a Range callback may read the metacache but not write through it (decision D7)"
            )
        with self._mutation:
            work = Work(self._pending)
            result = change(work)
            if work.changed:
                state = work.state()
                self._check_limits(work, state)
                self._pending = state
                self._dirty |= work.touched_pods()
                self._seq += 1
            target = self._seq
        self._wait_durable(target)
        return result

    def _check_limits(self, work: Work, state: State) -> None:
        """Refuse a change that grows the cache past a limit (a state already past one, under
        limits lowered since, may still shrink or change in place)."""
        if (
            state.entry_count() > self._max_entries
            and state.entry_count() > work.base.entry_count()
        ):
            raise LimitExceededError(
                f"the metacache would hold {state.entry_count()} entries, more than "
                f"--max-metacache-entries {self._max_entries}; delete entries first"
            )
        for what, entry in work.changed_entries():
            size = entry.fragment_bytes()
            if size > self._max_entry_bytes:
                raise LimitExceededError(
                    f"{what} would take {size} bytes of JSON, more than "
                    f"--max-metacache-entry-bytes {self._max_entry_bytes}; send fewer or "
                    "shorter labels, annotations or assignments"
                )
        if state.byte_count() > self._max_bytes and state.byte_count() > work.base.byte_count():
            raise LimitExceededError(
                f"the metacache would hold {state.byte_count()} bytes of entries, more than "
                f"--max-metacache-bytes {self._max_bytes}; delete entries first"
            )

    # containers

    def add_container(self, pod_uid: str, container_name: str, info: ContainerInfo | None) -> None:
        """``AddContainer``: a repeated add updates only requests/limits that are > 0.

        A repeated add that changes nothing writes nothing (as upstream). One that
        changes a request or limit is written before it is acknowledged; katalyst
        would keep it in memory only until the next write (a deliberate deviation:
        memory and disk stay equal).
        """

        def change(w: Work) -> None:
            existing = w.pods.get(pod_uid, {}).get(container_name)
            if existing is not None:
                if info is not None:
                    updated = existing.clone()
                    if updated.update_meta(info):
                        w.pod_for_write(pod_uid)[container_name] = updated
                        w.changed = True
                return
            w.created_for_write()[(pod_uid, container_name)] = self._clock()
            pod = w.pods.get(pod_uid)
            if pod is None:
                w.pod_for_write(pod_uid)
                w.changed = True
            if info is not None:
                w.pod_for_write(pod_uid)[container_name] = info.clone()
                w.changed = True

        self._mutate(change)

    def set_container_info(self, pod_uid: str, container_name: str, info: ContainerInfo) -> None:
        """``SetContainerInfo``: replace; no write when the value is unchanged."""

        def change(w: Work) -> None:
            current = w.pods.get(pod_uid, {}).get(container_name)
            if current is not None and current.fragment() == info.fragment():
                return
            w.pod_for_write(pod_uid)[container_name] = info.clone()
            w.changed = True

        self._mutate(change)

    def delete_container(self, pod_uid: str, container_name: str) -> bool:
        """``DeleteContainer``; the pod goes with its last container. Returns whether it existed."""

        def change(w: Work) -> bool:
            if (pod_uid, container_name) in w.created:
                del w.created_for_write()[(pod_uid, container_name)]
            if container_name not in w.pods.get(pod_uid, {}):
                return False
            pod = w.pod_for_write(pod_uid)
            del pod[container_name]
            if not pod:
                w.delete_pod(pod_uid)
            w.changed = True
            return True

        return bool(self._mutate(change))

    def remove_pod(self, pod_uid: str) -> bool:
        """``RemovePod``: idempotent; returns whether the pod existed."""

        def change(w: Work) -> bool:
            pod = w.pods.get(pod_uid)
            if pod is None:
                return False
            for name, info in pod.items():
                w.created_for_write().pop((pod_uid, info.container_name or name), None)
            w.delete_pod(pod_uid)
            w.changed = True
            return True

        return bool(self._mutate(change))

    def range_and_delete_container(
        self, f: Callable[[ContainerInfo], bool], safe_time: int
    ) -> list[ContainerRef]:
        """``RangeAndDeleteContainer``: containers created after ``safe_time`` (> 0) are protected."""

        def change(w: Work) -> list[ContainerRef]:
            deleted: list[ContainerRef] = []
            with self._walk():
                for pod_uid in list(w.pods):
                    for name, info in list(w.pods.get(pod_uid, {}).items()):
                        key = (info.pod_uid or pod_uid, info.container_name or name)
                        created = w.created.get(key, 0)
                        if safe_time > 0 and created > safe_time:
                            continue
                        if not f(info.clone()):
                            continue
                        pod = w.pod_for_write(pod_uid)
                        del pod[name]
                        if not pod:
                            w.delete_pod(pod_uid)
                        w.created_for_write().pop(key, None)
                        deleted.append((pod_uid, name))
                        w.changed = True
            return deleted

        return cast(list[ContainerRef], self._mutate(change))

    def range_and_update_container(self, f: Callable[[str, str, ContainerInfo], bool]) -> None:
        """``RangeAndUpdateContainer``: ``f`` changes the object in place; False stops the walk (D2)."""

        def change(w: Work) -> None:
            with self._walk():
                for pod_uid in list(w.pods):
                    for name, info in list(w.pods[pod_uid].items()):
                        copy = info.clone()
                        keep_going = f(pod_uid, name, copy)
                        copy.forget_fragment()
                        if copy.fragment() != info.fragment():
                            w.pod_for_write(pod_uid)[name] = copy
                            w.changed = True
                        if not keep_going:
                            return

        self._mutate(change)

    def update_containers(
        self, updates: Iterable[tuple[str, str, Callable[[ContainerInfo], None]]]
    ) -> None:
        """Apply every update or none (one checkpoint write). A missing container is NOT_FOUND."""
        batch = list(updates)

        def change(w: Work) -> None:
            staged: dict[ContainerRef, ContainerInfo] = {}
            for pod_uid, name, apply in batch:
                current = staged.get((pod_uid, name)) or w.pods.get(pod_uid, {}).get(name)
                if current is None:
                    raise NotFoundError(
                        f"container {quote(name)} of pod {quote(pod_uid)} is not in the metacache"
                    )
                copy = current.clone()
                apply(copy)
                staged[(pod_uid, name)] = copy
            for (pod_uid, name), info in staged.items():
                if info.fragment() != w.pods[pod_uid][name].fragment():
                    w.pod_for_write(pod_uid)[name] = info
                    w.changed = True

        self._mutate(change)

    # pools

    def set_pool_info(self, pool_name: str, info: PoolInfo) -> None:
        def change(w: Work) -> None:
            current = w.pools.get(pool_name)
            if current is not None and current.fragment() == info.fragment():
                return
            w.pools_for_write()[pool_name] = info.clone()
            w.changed = True

        self._mutate(change)

    def delete_pool(self, pool_name: str) -> bool:
        def change(w: Work) -> bool:
            if pool_name not in w.pools:
                return False
            del w.pools_for_write()[pool_name]
            w.changed = True
            return True

        return bool(self._mutate(change))

    def gc_pool_entries(self, living: Iterable[str]) -> list[str]:
        """``GCPoolEntries``: delete every pool not in ``living`` (an empty set deletes all)."""
        keep = set(living)

        def change(w: Work) -> list[str]:
            dead = sorted(name for name in w.pools if name not in keep)
            if dead:
                pools = w.pools_for_write()
                for name in dead:
                    del pools[name]
                w.changed = True
            return dead

        return cast(list[str], self._mutate(change))

    # regions

    def set_region_entries(self, entries: Mapping[str, RegionInfo]) -> None:
        """``SetRegionEntries``: replace all regions; writes only when something differs."""
        new = {name: info.clone() for name, info in entries.items()}

        def change(w: Work) -> None:
            old = w.regions
            same = old.keys() == new.keys() and all(
                old[k].fragment() == new[k].fragment() for k in new
            )
            if not same:
                w.regions = new
                w.changed = True

        self._mutate(change)

    def set_region_info(self, region_name: str, info: RegionInfo) -> None:
        def change(w: Work) -> None:
            current = w.regions.get(region_name)
            if current is not None and current.fragment() == info.fragment():
                return
            w.regions_for_write()[region_name] = info.clone()
            w.changed = True

        self._mutate(change)
