"""The ``None`` policy (kubelet ``policy_none.go``): pins nothing."""

from __future__ import annotations

from collections.abc import Mapping

from numamem.config.model import FeatureGates
from numamem.memorymanager.policy.interface import HintExplanation
from numamem.memorymanager.state.model import State, StateReader
from numamem.memtypes import Block
from numamem.pod import Container, Pod
from numamem.topologymanager.policy import ProviderHints, TopologyHint
from numamem.work import Work


class NonePolicy:
    """``None``: never pins; hints are "don't care"; the state stays empty."""

    name = "None"

    def __init__(self, gates: FeatureGates | None = None) -> None:
        self.gates = gates or FeatureGates()

    def start(self, state: State, pod_names: Mapping[str, tuple[str, str]] | None = None) -> None:
        return None

    def allocate(
        self,
        state: State,
        pod: Pod,
        container: Container,
        affinity: TopologyHint,
        work: Work | None = None,
    ) -> None:
        return None

    def allocate_pod(
        self, state: State, pod: Pod, affinity: TopologyHint, work: Work | None = None
    ) -> None:
        return None

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        return None

    def get_topology_hints(
        self, state: StateReader, pod: Pod, container: Container, work: Work | None = None
    ) -> ProviderHints:
        return None

    def get_pod_topology_hints(
        self, state: StateReader, pod: Pod, work: Work | None = None
    ) -> ProviderHints:
        return None

    def get_allocatable_memory(self, state: StateReader) -> list[Block]:
        return []

    def explain(
        self, state: StateReader, pod: Pod, container: Container | None, work: Work | None = None
    ) -> HintExplanation:
        return HintExplanation(note="the None policy pins no memory and gives no hints")

    def can_allocate_exclusively(self) -> bool:
        return False
