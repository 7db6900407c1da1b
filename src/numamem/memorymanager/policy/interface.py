"""The memory manager policy interface (kubelet ``policy.go``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from numamem.config.model import FeatureGates
from numamem.memorymanager.state.model import State, StateReader
from numamem.memtypes import Block
from numamem.pod import Container, Pod
from numamem.topologymanager.policy import ProviderHints, TopologyHint
from numamem.work import Work


@dataclass(frozen=True)
class MaskVerdict:
    """Why one NUMA mask was or was not offered as a hint."""

    numa_nodes: tuple[int, ...]
    offered: bool
    preferred: bool = False
    reason: str = ""
    """Why it was not offered; empty when it was."""


@dataclass
class HintExplanation:
    """What a policy considered when hinting one container (or, pod scope, one pod)."""

    requested: dict[str, int] = field(default_factory=dict)
    masks: list[MaskVerdict] = field(default_factory=list)
    note: str = ""
    """Why there is no mask scan (no hints, or hints repeated from stored blocks)."""
    omitted_masks: int = 0
    """Masks scanned but not listed in ``masks`` (after the first ones, smallest first)."""


class Policy(Protocol):
    """A memory manager policy: stateless past construction (the reuse table lives in the state).

    Mutating methods run on a transaction's fork (a private copy of a committed
    state); hints, explanations and allocatable memory may run concurrently on
    committed states. Searches are charged to the ``work`` given (a default budget
    without deadline when None).
    """

    name: str
    gates: FeatureGates
    """The feature gates (pod-level resources, KEP-5526)."""

    def start(self, state: State, pod_names: Mapping[str, tuple[str, str]] | None = None) -> None:
        """Validate (and for Static, initialise) the restored state. ``pod_names`` (uid ->
        namespace, name, where recorded) name the pods in a refusal."""

    def allocate(
        self,
        state: State,
        pod: Pod,
        container: Container,
        affinity: TopologyHint,
        work: Work | None = None,
    ) -> None:
        """Pin memory for one container. Idempotent: an allocated container is left alone."""

    def allocate_pod(
        self, state: State, pod: Pod, affinity: TopologyHint, work: Work | None = None
    ) -> None:
        """Pin a pod allocated as a whole (``AllocatePod``, KEP-5526). Idempotent."""

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        """Release a container's memory. Idempotent."""

    def get_topology_hints(
        self, state: StateReader, pod: Pod, container: Container, work: Work | None = None
    ) -> ProviderHints: ...

    def get_pod_topology_hints(
        self, state: StateReader, pod: Pod, work: Work | None = None
    ) -> ProviderHints: ...

    def get_allocatable_memory(self, state: StateReader) -> list[Block]: ...

    def explain(
        self, state: StateReader, pod: Pod, container: Container | None, work: Work | None = None
    ) -> HintExplanation:
        """Why the hints for ``container`` (None: the pod scope) are what they are. Read-only."""

    def can_allocate_exclusively(self) -> bool: ...
