"""The memory manager policy interface (kubelet ``policy.go``)."""

from __future__ import annotations

from typing import Protocol

from numamem.memorymanager.state import Block, State, StateReader
from numamem.pod import Container, Pod
from numamem.topologymanager.policy import ProviderHints, TopologyHint


class Policy(Protocol):
    """A memory manager policy. Every method runs under the manager's lock."""

    name: str

    def start(self, state: State) -> None:
        """Validate (and for Static, initialise) the restored state."""

    def allocate(
        self, state: State, pod: Pod, container: Container, affinity: TopologyHint
    ) -> None:
        """Pin memory for one container. Idempotent: an allocated container is left alone."""

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        """Release a container's memory. Idempotent."""

    def get_topology_hints(
        self, state: StateReader, pod: Pod, container: Container
    ) -> ProviderHints: ...

    def get_pod_topology_hints(self, state: StateReader, pod: Pod) -> ProviderHints: ...

    def get_allocatable_memory(self, state: StateReader) -> list[Block]: ...

    def can_allocate_exclusively(self) -> bool: ...

    def snapshot(self) -> object:
        """Policy-private state (Static: the init-container reuse table), for rollback."""

    def restore(self, snapshot: object) -> None: ...


class NonePolicy:
    """``None``: never pins; hints are "don't care"; the state stays empty."""

    name = "None"

    def start(self, state: State) -> None:
        return None

    def allocate(
        self, state: State, pod: Pod, container: Container, affinity: TopologyHint
    ) -> None:
        return None

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        return None

    def get_topology_hints(
        self, state: StateReader, pod: Pod, container: Container
    ) -> ProviderHints:
        return None

    def get_pod_topology_hints(self, state: StateReader, pod: Pod) -> ProviderHints:
        return None

    def get_allocatable_memory(self, state: StateReader) -> list[Block]:
        return []

    def can_allocate_exclusively(self) -> bool:
        return False

    def snapshot(self) -> object:
        return None

    def restore(self, snapshot: object) -> None:
        return None
