"""The memory manager's readers: the committed version, read without the lock.

The first layer of :class:`~numamem.memorymanager.manager.writes.Manager` (readers, then active
pods and stale state in :mod:`.stale`, then resizes in :mod:`.resizes`,
then the writers in :mod:`.writes`): every method here reads the current
:class:`~numamem.memorymanager.manager.versions.Committed` version once and takes no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from numamem.errors import NotFoundError, quote
from numamem.memorymanager.manager.containermap import ContainerMap
from numamem.memorymanager.manager.versions import Committed, Versions
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.state.model import MemoryState, StateView
from numamem.memtypes import Block, ContainerRef
from numamem.pod import Container, Pod
from numamem.topologymanager.policy import TopologyPolicy


class CommittedReads:
    """Readers of the committed version (see the module); the manager sets the attributes."""

    policy: Policy
    _versions: Versions
    _allocatable: list[Block]
    _topology_policy: TopologyPolicy | None
    _topology_scope: str

    @property
    def _committed(self) -> Committed:
        return self._versions.current

    @property
    def _state(self) -> MemoryState:
        return self._versions.current.state

    @property
    def _containers(self) -> ContainerMap:
        return self._versions.current.containers

    @property
    def topology_policy_name(self) -> str:
        """The topology manager policy's name ("" without one)."""
        return "" if self._topology_policy is None else self._topology_policy.name

    @property
    def writer_lock(self) -> threading.Lock:
        """The lock writers commit under, held across the checkpoint write. Only for a
        liveness probe: acquire it with a timeout, release it at once, call nothing inside."""
        return self._versions.lock

    @property
    def topology_scope_name(self) -> str:
        """The topology manager scope: "container" or "pod"."""
        return self._topology_scope

    # --- readers: the committed state, no lock ------------------------------------

    def committed(self) -> Committed:
        """The committed version (state, container map, names) as one immutable object."""
        return self._committed

    def reader(self) -> StateView:
        """The committed state, read-only; the same object until the next commit."""
        return self._committed.view

    def get_memory(self, pod_uid: str, container_name: str) -> list[Block]:
        return self._state.get_memory_blocks(pod_uid, container_name) or []

    def get_pod_memory(self, pod_uid: str) -> list[Block] | None:
        """``GetPodMemory``: the pod-level blocks, or None when the pod has none."""
        return self._state.get_pod_memory_blocks(pod_uid)

    def isolation_level(self, pod_uid: str, container_name: str) -> str:
        """``GetResourceIsolationLevel`` from the committed state: ``host`` (no blocks), ``pod``
        (shares its pod's pool) or ``container``
        (:func:`numamem.memorymanager.requests.podlevel.isolation_level`)."""
        state = self._state
        return podlevel.isolation_level(
            state.get_memory_blocks(pod_uid, container_name),
            state.get_pod_memory_blocks(pod_uid),
            state.exclusive_containers(pod_uid),
            container_name,
        )

    def get_memory_numa_nodes(self, pod_uid: str, container_name: str) -> list[int] | None:
        """NUMA ids for ``cpuset.mems``; None (leave unset) when the container has no blocks."""
        nodes = {n for b in self.get_memory(pod_uid, container_name) for n in b.numa_affinity or ()}
        return sorted(nodes) or None

    def get_allocatable_memory(self) -> list[Block]:
        """Cached at start; never refreshed (as in the kubelet)."""
        return list(self._allocatable)

    def container_map(self) -> Mapping[str, ContainerRef]:
        return self._containers.as_dict()

    def pod_names(self) -> Mapping[str, tuple[str, str]]:
        """Pod uid -> (namespace, name), for pods with state whose Pod message named them
        (with ``record_pod_names``); the committed mapping, not a copy: do not mutate."""
        return self._versions.current.names


def container_of(pod: Pod, name: str) -> Container:
    container = pod.container(name)
    if container is None:
        raise NotFoundError(f"container {quote(name)} is not in pod {quote(pod.uid)}")
    return container
