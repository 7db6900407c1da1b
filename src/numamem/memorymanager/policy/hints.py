"""The Static policy's NUMA hints (kubelet ``GetTopologyHints``/``GetPodTopologyHints``).

Hints are the NUMA masks whose summed allocatable fits the request, whose nodes obey the
multi-NUMA group rules, and whose summed free memory (plus the pod's reusable
init-container memory for exactly that mask) fits; "preferred" means the minimal number
of nodes whose *allocatable* could hold the request. They are given by rule
(:class:`~numamem.memorymanager.search.space.HintSpace`), not by visiting all 2^n masks.

What they derive from (:class:`HintSource`): the container's request (container scope)
or the pod's (pod scope: the pod-level budget for a pod allocated as a whole, KEP-5526),
and, when memory is already allocated, the stored blocks (``regenerateHints``: a
container's own, in the pod scope the pod-level entry (kubernetes#141070) or else the
first container's with blocks). With the pod scope's ``validatePodScopeResources``
refusing a pod-level pod, every requested type gets an empty list: no placement.

Pod-scope hints regenerate from the first container that has blocks using the *pod's*
request, as the released upstream code does (descriptions of the algorithm say "its own
container request", and the open drift PR kubernetes#140473 passes it; the code, which
clients observe, passes the pod request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from numamem.config.model import FeatureGates
from numamem.errors import AllocationError, InvalidArgumentError, quote
from numamem.memorymanager.policy.interface import HintExplanation, MaskVerdict
from numamem.memorymanager.policy.reuse import ReuseTable, reusable_memory
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.requests.resources import (
    Requested,
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.search.explain import mask_verdicts
from numamem.memorymanager.search.space import HintSpace
from numamem.memorymanager.state.model import StateReader
from numamem.memtypes import Block, NUMANodeState
from numamem.pod import GUARANTEED, Container, Pod, pod_qos
from numamem.quantity import format_bytes
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from numamem.work import Work

Hints = dict[str, list[TopologyHint] | HintSpace]
POD_LEVEL_SKIPPED = (
    "the pod sets pod-level resources (spec.resources), which the memory manager allocates only "
    "with --feature-gates PodLevelResources=true,PodLevelResourceManagers=true: no hints and "
    'nothing pinned (the kubelet\'s "Allocation skipped, pod is using pod-level resources")'
)


@dataclass(frozen=True)
class HintSource:
    """What hints derive from: the request, the stored blocks (and whose) or a rejection."""

    requested: Requested
    blocks: list[Block] | None = None
    owner: str = ""
    """The container whose blocks they are ("" for the pod-level entry)."""
    rejection: str = ""
    """``validatePodScopeResources``' text: the hints are empty lists (no placement)."""


class StaticHints:
    """The hint half of the Static policy (a mixin of
    :class:`~numamem.memorymanager.policy.static.StaticPolicy`)."""

    gates: FeatureGates
    numa_nodes: tuple[int, ...] | None

    def hint_space(
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        requested: Mapping[str, int],
        reuse: Mapping[int, Mapping[str, int]],
        work: Work,
    ) -> HintSpace:
        nodes = sorted(machine_state) if self.numa_nodes is None else self.numa_nodes
        return HintSpace(machine_state, requested, reuse, nodes, work)

    def get_topology_hints(
        self, state: StateReader, pod: Pod, container: Container, work: Work | None = None
    ) -> Hints | None:
        return self._hints(state, pod, container, work or Work())

    def get_pod_topology_hints(
        self, state: StateReader, pod: Pod, work: Work | None = None
    ) -> Hints | None:
        return self._hints(state, pod, None, work or Work())

    def _hints(
        self, state: StateReader, pod: Pod, container: Container | None, work: Work
    ) -> Hints | None:
        source = self._hint_source(state, pod, container)
        if isinstance(source, str):
            return None
        if source.rejection:
            # No NUMA placement is possible: the merge gives {nil, false} (kubelet's empty lists).
            return {name: [] for name in source.requested}
        if source.blocks is not None:
            return regenerate_hints(source.blocks, source.requested)
        return self.calculate_hints(
            state.machine_view(), source.requested, self._reuse(state, pod, container), work
        )

    def _reuse(self, state: StateReader, pod: Pod, container: Container | None) -> ReuseTable:
        """The init-container memory ``container`` (None: the pod scope) may reuse; none for a
        pod allocated as a whole (its budget is reserved once, no container reuses another's)."""
        if container is None and podlevel.allocated_as_pod(self.gates, pod):
            return {}
        return reusable_memory(state, pod, container)

    def exclusive_of(self, pod: Pod) -> podlevel.ExclusiveOf:
        """A container's exclusive request in ``pod`` (``getContainerRequestedResources``)."""
        gate = self.gates.pod_level_resource_managers
        return lambda ctr: container_requested_resources(ctr, pod, gate)

    def calculate_hints(
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        requested: Mapping[str, int],
        reuse: Mapping[int, Mapping[str, int]],
        work: Work,
    ) -> Hints:
        """``calculateHints``: the same hints for every requested type; ``{}`` when no mask
        qualifies (which the topology manager reads as "no preference", as in the kubelet)."""
        space = self.hint_space(machine_state, requested, reuse, work)
        if space.is_empty():
            return {}
        return dict.fromkeys(requested, space)

    def _hint_source(
        self, state: StateReader, pod: Pod, container: Container | None
    ) -> HintSource | str:
        """The request and the stored blocks hints derive from, or why there are no hints.

        ``container`` None is the pod scope: the pod's request (its pod-level budget for a
        pod allocated as a whole), and its pod-level blocks or else the blocks of the first
        container that has any.
        """
        qos = pod_qos(pod)
        if qos != GUARANTEED:
            return f"the pod's QoS class is {qos}; only Guaranteed pods get NUMA hints"
        gate = self.gates.pod_level_resource_managers
        try:
            if container is None:
                requested = pod_requested_resources(pod, gate)
            else:
                requested = container_requested_resources(container, pod, gate)
        except AllocationError as err:
            return f"{err}; no hints"
        if pod.pod_level_resources_set and not self.gates.pod_level:
            return POD_LEVEL_SKIPPED
        if container is not None:
            if not requested:
                if pod.pod_level_resources_set and container.requests:
                    return (
                        f"container {quote(container.name)} is not equivalent-Guaranteed (its own "
                        "cpu and memory requests do not equal its limits): it has no memory of its "
                        "own and shares the pod's pod-level resources; no hints"
                    )
                return "no memory or hugepages requested; no hints"
            return HintSource(
                requested, state.get_memory_blocks(pod.uid, container.name), container.name
            )
        if podlevel.allocated_as_pod(self.gates, pod):
            rejection = podlevel.validate_pod_scope_resources(
                pod, requested, self.exclusive_of(pod)
            )
            if rejection is not None:
                return HintSource(requested, rejection=rejection)
        if not requested:
            return "no memory or hugepages requested; no hints"
        if podlevel.allocated_as_pod(self.gates, pod):
            pod_blocks = state.get_pod_memory_blocks(pod.uid)
            if pod_blocks is not None:
                return HintSource(requested, pod_blocks)  # kubernetes#141070
        for ctr in pod.all_containers():
            blocks = state.get_memory_blocks(pod.uid, ctr.name)
            if blocks is not None:
                return HintSource(requested, blocks, ctr.name)
        return HintSource(requested)

    def explain(
        self, state: StateReader, pod: Pod, container: Container | None, work: Work | None = None
    ) -> HintExplanation:
        source = self._hint_source(state, pod, container)
        if isinstance(source, str):
            return HintExplanation(note=source)
        requested, blocks, owner = source.requested, source.blocks, source.owner
        if source.rejection:
            note = f"{source.rejection} (EmptyPodSharedPoolError): no NUMA placement is offered"
            return HintExplanation(dict(requested), note=note)
        whose = (
            "the pod's pod-level allocation"
            if blocks is not None and not owner
            else (f"container {quote(owner)}")
        )
        if blocks is not None:
            if regenerate_hints(blocks, requested) is None:
                stored = ", ".join(f"{b.type} {format_bytes(b.size)}" for b in blocks)
                note = (
                    f"{whose} already holds {stored}, which does not match the request; "
                    "no preference"
                )
                if container is None and owner:
                    note += " (in the pod scope the kubelet compares the pod's request with one container's blocks)"
                elif pod.is_regular_init_container(owner):
                    note += " (later containers reuse an init container's memory)"
            else:
                note = f"{whose} is already allocated; the hints repeat its affinity"
            return HintExplanation(dict(requested), note=note)
        space = self.hint_space(
            state.machine_view(), requested, self._reuse(state, pod, container), work or Work()
        )
        verdicts, omitted = mask_verdicts(space)
        minimum = space.min_affinity_size
        return HintExplanation(
            dict(requested),
            [
                MaskVerdict(
                    tuple(bitmask.get_bits(mask)),
                    offered=not reason,
                    preferred=not reason and mask.bit_count() == minimum,
                    reason=reason,
                )
                for mask, reason in verdicts
            ],
            omitted_masks=omitted,
        )


def regenerate_hints(blocks: Sequence[Block], requested: Mapping[str, int]) -> Hints | None:
    """``regenerateHints``: the stored affinity as preferred hints, or None on any mismatch."""
    hints: dict[str, list[TopologyHint]] = {name: [] for name in requested}
    if len(blocks) != len(requested):
        return None
    for block in blocks:
        if block.type not in requested or block.size != requested[block.type]:
            return None
        try:
            mask = bitmask.new_mask(block.numa_affinity or ())
        except InvalidArgumentError:
            return None
        hints[block.type].append(TopologyHint(mask, True))
    return dict(hints)
