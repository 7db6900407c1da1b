"""The memory manager's active pods and stale state (``removeStaleState``).

The second layer of :class:`~numamem.memorymanager.manager.writes.Manager` (see
:mod:`.reads`): with an ``active_pods`` callable the manager asks it, as the kubelet
does; without one it tracks the active set itself (the module docstring of
:mod:`.writes`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from numamem.errors import quote
from numamem.logging import get_logger
from numamem.memorymanager.manager.containermap import ContainerMap
from numamem.memorymanager.manager.reads import CommittedReads
from numamem.memorymanager.state.model import State
from numamem.memtypes import ContainerRef
from numamem.pod import Pod

_log = get_logger("memorymanager")


class ActivePods(CommittedReads):
    """Tracking of the active pods, and removal of the state of the others."""

    _lock: threading.Lock
    _active_pods_fn: Callable[[], Sequence[Pod] | None] | None
    _active_lock: threading.Lock
    _tracked_active: dict[str, frozenset[str]] | None
    _stale_possible: bool

    def _touch(self, pod: Pod) -> None:
        if self._active_pods_fn is None:
            with self._active_lock:
                if self._tracked_active is not None:
                    self._tracked_active[pod.uid] = pod.container_names()

    def _active_containers(self) -> dict[str, frozenset[str]] | None:
        if self._active_pods_fn is not None:
            pods = self._active_pods_fn()
            return None if pods is None else {p.uid: p.container_names() for p in pods}
        with self._active_lock:
            return None if self._tracked_active is None else dict(self._tracked_active)

    def remove_stale_state(self) -> list[ContainerRef]:
        """``removeStaleState`` as its own operation (one write). Returns what was removed."""
        with self._lock:
            removed = self._remove_stale_state_locked()
        _log_removed(removed)
        return removed

    def _remove_stale_state_locked(self) -> list[ContainerRef]:
        if not self._stale_possible:
            return []
        active = self._active_containers()
        if active is None:
            return []
        removed: list[ContainerRef] = []
        with self._versions.transaction() as (work, containers):
            for pod_uid, ctr, _ in list(work.iter_containers()):
                if ctr not in active.get(pod_uid, ()):
                    self._remove_by_ref(work, containers, pod_uid, ctr)
                    removed.append((pod_uid, ctr))
            for _, (pod_uid, ctr) in containers.items():
                if ctr not in active.get(pod_uid, ()):
                    self._remove_by_ref(work, containers, pod_uid, ctr)
                    if (pod_uid, ctr) not in removed:
                        removed.append((pod_uid, ctr))
        if self._active_pods_fn is None:
            self._stale_possible = False
        return removed

    def _remove_by_ref(
        self, state: State, containers: ContainerMap, pod_uid: str, ctr: str
    ) -> None:
        """``policyRemoveContainerByRef``."""
        self.policy.remove_container(state, pod_uid, ctr)
        containers.remove_by_container_ref(pod_uid, ctr)

    def _settle_stale_state(self) -> None:
        """Remove stale state before a hint or allocation, when there can be any."""
        if self._stale_possible:
            with self._lock:
                removed = self._remove_stale_state_locked()
            _log_removed(removed)

    def sync_active_pods(self, pods: Sequence[Pod]) -> list[ContainerRef]:
        """Make ``pods`` the active set (sources ready) and remove every other container's state
        (not logged here: the SyncActivePods RPC's log line lists what it removed)."""
        with self._lock:
            with self._active_lock:
                self._tracked_active = {p.uid: p.container_names() for p in pods}
            self._stale_possible = True
            return self._remove_stale_state_locked()


LOGGED_REFS = 16
"""Containers one "removed stale state" line names at most (``omitted``: how many more)."""


def _log_removed(removed: Sequence[ContainerRef]) -> None:
    """One line for the stale state a hint, an allocation or :meth:`remove_stale_state`
    removed on the way (bounded, whatever was removed)."""
    if removed:
        _log.info(
            "removed stale state",
            containers=[quote(f"{uid}/{ctr}", style="bare") for uid, ctr in removed[:LOGGED_REFS]],
            omitted=max(len(removed) - LOGGED_REFS, 0),
        )
