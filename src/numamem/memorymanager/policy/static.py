"""The Static policy (kubelet ``policy_static.go``, GA semantics).

Guaranteed pods get their memory and hugepages pinned to NUMA nodes:

* hints (:mod:`~numamem.memorymanager.policy.hints`) are kubelet's hints in
  kubelet's order, given by rule (:class:`~numamem.memorymanager.search.space.HintSpace`)
  rather than by visiting all 2^n masks, so hints and admission stay fast on
  large machines;
* Allocate takes the topology manager's affinity (or the default hint),
  extends an insufficient affinity to the narrowest superset, checks the group
  rule and reserves each memory type lowest node first
  (:mod:`~numamem.memorymanager.state.arithmetic`);
* init containers' memory is reused by later containers of the same pod and
  their stored blocks shrink accordingly (sidecars are never reused);
* Start validates a restored state by replaying every block on the default
  machine state and comparing group sums (:mod:`~numamem.memorymanager.policy.restore`,
  with its deviations: a changed machine, a pod-level entry without containers).

Hints are made of the machine state's nodes, as in the kubelet, or only of
``numa_nodes`` (the CPU nodes, under the topology manager's
``restrict-to-cpu-numa-nodes``); the machine state still covers every node.

Deliberate deviations from upstream (each raises a clear error or behaves
sanely where Go would panic or wrap around; all are unreachable on machines
and states the kubelet itself handles):

* a reservation or hugepage total larger than a node's memory is an error
  (:class:`~numamem.errors.ReservedMemoryError`), not a uint64 wrap-around;
* a memory type missing from some node's memory map (e.g. a memory-only node
  without hugepage directories) counts as 0 there, and masks including such a
  node are not offered; Go dereferences a nil table (panic);
* a requested type that no node has is an
  :class:`~numamem.errors.UnsupportedResourceError`;
* negative requests are refused instead of wrapped to huge uint64 values;
* quirk 2 is fixed: a single-node affinity on a node that belongs to a
  multi-NUMA group is a violation, so groups stay disjoint;
* the memory a container reuses from init containers is what their stored
  blocks are charged (:func:`~numamem.memorymanager.policy.reuse.reusable_memory`), not
  a table of the last pod allocated kept in memory: the same in the kubelet's
  order, and reserved memory equals the blocks in any order of Allocate calls
  and across restarts (:mod:`~numamem.memorymanager.policy.reuse`).

Pod-level resources (KEP-5526, :mod:`~numamem.memorymanager.requests.podlevel`): with both
feature gates on, a pod that sets ``spec.resources`` asks for its pod-level budget in
the pod scope (:meth:`StaticPolicy.allocate_pod`: one allocation, partitioned among its
containers), and only its equivalent-Guaranteed containers ask for memory of their own
(container scope); its pod-scope hints regenerate from its pod-level blocks (#141070),
``allocate_pod`` leaves an allocated pod alone (#141077), the last container's removal
releases the budget, and Start replays the pod-level blocks instead of the containers'.
With either gate off such a pod gets no hints and nothing pinned ("Allocation skipped,
pod is using pod-level resources"). Deviations: the pod-level entry and its containers
are written in one atomic write with the machine state (the kubelet writes each sub-step,
kubernetes#141993), and Start refuses a pod-level entry without container entries, naming the pod
(as kubernetes#141994 proposes; in :mod:`~numamem.memorymanager.policy.restore`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numamem.config.model import FeatureGates
from numamem.errors import (
    AllocationError,
    ReservedMemoryError,
    UnsupportedResourceError,
    quote,
)
from numamem.logging import get_logger
from numamem.memorymanager.policy.hints import StaticHints
from numamem.memorymanager.policy.options import StaticOptions, verify_hugepages
from numamem.memorymanager.policy.restore import validate_state
from numamem.memorymanager.policy.reuse import (
    ReuseTable,
    reusable_memory,
    update_init_container_blocks,
)
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.requests.resources import (
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.state import drift
from numamem.memorymanager.state.arithmetic import (
    affinity_satisfies,
    copy_for_write,
    default_machine_state,
    node_state,
    release_memory,
    update_machine_state,
    violates_numa_allocations,
)
from numamem.memorymanager.state.model import State, StateReader
from numamem.memorymanager.state.reserved import SystemReservedMemory
from numamem.memtypes import MEMORY, Block, MachineState, NUMANodeState
from numamem.pod import GUARANTEED, Container, Pod, pod_qos
from numamem.topology import Machine
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from numamem.work import Work

POLICY_NAME = "Static"
_log = get_logger("memorymanager")


class StaticPolicy(StaticHints):
    """The Static policy. Keeps no state between calls: safe for concurrent readers."""

    name = POLICY_NAME

    def __init__(
        self,
        machine: Machine,
        system_reserved: SystemReservedMemory,
        numa_nodes: Sequence[int] | None = None,
        options: StaticOptions | None = None,
        gates: FeatureGates | None = None,
    ) -> None:
        """``NewPolicyStatic``: the reserved ``memory`` summed over nodes must be > 0."""
        if sum(node.get(MEMORY, 0) for node in system_reserved.values()) <= 0:
            raise ReservedMemoryError(
                "[memorymanager] you should specify the system reserved memory"
            )
        self.machine = machine
        self.system_reserved = system_reserved
        self.numa_nodes = None if numa_nodes is None else tuple(sorted(numa_nodes))
        """The nodes hints and allocations may use; None: every node of the machine state."""
        self.options = options or StaticOptions()
        self.gates = gates or FeatureGates()
        """The feature gates: pod-level resources are the policy's business only with both."""
        self.drift: dict[tuple[int, str], int] = {}
        """Set by :meth:`start`: (node, type) -> TotalMemSize now minus stored (0 when equal)."""
        self.last_verdict: drift.Verdict | None = None
        """Set by :meth:`start` when the stored state differed and was re-baselined."""

    def can_allocate_exclusively(self) -> bool:
        return True

    # --- default machine state and validation ----------------------------

    def default_machine_state(self) -> MachineState:
        return default_machine_state(self.machine, self.system_reserved)

    def start(self, state: State, pod_names: Mapping[str, tuple[str, str]] | None = None) -> None:
        """``validateState``: default state for an empty one; else replay and compare, and accept a
        changed machine as ``memory-drift-tolerance`` says
        (:func:`~numamem.memorymanager.policy.restore.validate_state`, which sets the rules).

        Raises StateMismatchError whose first line is the kubelet's text, followed by
        what differs, the containers concerned and the fix. An accepted change
        re-baselines the state (the manager then writes it once). Sets :attr:`drift` and
        :attr:`last_verdict` from what it found.
        """
        found = validate_state(
            state, self.default_machine_state, self.options, self.gates, pod_names
        )
        if found.drift is not None:
            self.drift = found.drift
        if found.verdict is not None:
            self.last_verdict = found.verdict

    # --- allocate ------------------------------------------------------------

    def allocate(
        self,
        state: State,
        pod: Pod,
        container: Container,
        affinity: TopologyHint,
        work: Work | None = None,
    ) -> None:
        if pod_qos(pod) != GUARANTEED:
            return
        if pod.pod_level_resources_set and not self.gates.pod_level:
            return  # "Allocation skipped, pod is using pod-level resources"
        if state.get_memory_blocks(pod.uid, container.name) is not None:
            return
        requested = container_requested_resources(
            container, pod, self.gates.pod_level_resource_managers
        )
        if not requested:
            return
        machine_state = state.machine_view()
        bits, reuse = self._place(
            machine_state, requested, reusable_memory(state, pod, container), affinity, work
        )
        blocks = []
        changed = copy_for_write(machine_state, bits)
        for name in sorted(requested, key=podlevel.resource_order):
            size = requested[name]
            blocks.append(Block(tuple(bits), name, size))
            to_reserve = max(size - reuse.get(name, 0), 0)
            update_machine_state(changed, bits, name, to_reserve)
        state.adopt_machine_state(changed)
        state.set_memory_blocks(pod.uid, container.name, blocks)
        update_init_container_blocks(state, pod, container, blocks)

    def allocate_pod(
        self, state: State, pod: Pod, affinity: TopologyHint, work: Work | None = None
    ) -> None:
        """``AllocatePod`` (KEP-5526): one allocation of the pod's pod-level budget on the NUMA
        nodes ``affinity`` gives (the topology manager's hint for the pod's first container; the
        default hint when it has none, extended when too narrow, exactly as :meth:`allocate`),
        partitioned among its containers
        (:func:`numamem.memorymanager.requests.podlevel.partition`).

        Does nothing for a pod that is not Guaranteed, does not set pod-level resources (or
        with a gate off), or already has its pod-level entry (kubernetes#141077). Raises
        EmptyPodSharedPoolError when the budget leaves its shared containers nothing, and
        the Allocate errors. Deviation: a pod whose containers already hold container-level
        blocks (a client's earlier Allocate calls) is refused; the kubelet overwrites
        their entries and keeps their memory reserved.
        """
        if pod_qos(pod) != GUARANTEED or not podlevel.allocated_as_pod(self.gates, pod):
            return
        if state.get_pod_memory_blocks(pod.uid) is not None:
            return
        try:
            budget = pod_requested_resources(pod, pod_level=True)
        except AllocationError as err:
            _log.error("pod-level allocation skipped", pod_uid=quote(pod.uid), error=str(err))
            return
        exclusive_of = self.exclusive_of(pod)
        podlevel.check_pod_scope_resources(pod, budget, exclusive_of)
        held = [c.name for c in pod.all_containers() if state.get_memory_blocks(pod.uid, c.name)]
        if held:
            raise AllocationError(
                f"[memorymanager] pod {quote(pod.uid)}: container {quote(held[0])} already holds "
                "container-level memory; a pod allocated by its pod-level resources gets all of "
                "it in one allocation: release the pod (ReleasePod) first"
            )
        machine_state = state.machine_view()
        bits, _ = self._place(machine_state, budget, {}, affinity, work)
        plan = podlevel.partition(pod, budget, bits, exclusive_of)
        changed = copy_for_write(machine_state, bits)
        for name in sorted(budget, key=podlevel.resource_order):
            update_machine_state(changed, bits, name, budget[name])  # the budget, once
        # One commit of all of it (the kubelet writes each step: kubernetes#141993).
        state.adopt_machine_state(changed)
        state.set_pod_memory_blocks(pod.uid, plan.pod_blocks, plan.exclusive)
        for name, blocks in plan.containers.items():
            state.set_memory_blocks(pod.uid, name, blocks)

    def _place(
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        requested: Mapping[str, int],
        reuse_table: ReuseTable,
        affinity: TopologyHint,
        work: Work | None,
    ) -> tuple[list[int], Mapping[str, int]]:
        """The NUMA nodes an allocation of ``requested`` takes, and the memory it reuses there:
        the affinity, or the default hint, extended to the narrowest superset that fits,
        checked against the group rules. Raises AllocationError with the kubelet's texts."""
        self._check_types_exist(machine_state, requested)
        space = self.hint_space(machine_state, requested, reuse_table, work or Work())
        best = affinity
        if affinity.affinity is None:
            # The hints of every type are the same; the kubelet looks at those of memory. Every
            # hint has at least minAffinitySize nodes, so best() finds one iff there is one.
            found = space.best() if MEMORY in requested else None
            if found is None and (MEMORY in requested or space.is_empty()):
                raise AllocationError(
                    "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough "
                    "memory is available"
                )
            default = found or TopologyHint(None, False)
            if not default.preferred and affinity.preferred:
                raise AllocationError("[memorymanager] failed to find the default preferred hint")
            best = default
        mask = best.affinity
        if mask is None or not affinity_satisfies(machine_state, mask, requested):
            extended = space.best_superset(mask or 0) if MEMORY in requested else None
            if extended is None:
                raise AllocationError(
                    "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
                )
            if not extended.preferred and best.preferred:
                raise AllocationError("[memorymanager] failed to find the extended preferred hint")
            best = extended
            mask = extended.affinity
        if mask is None or violates_numa_allocations(machine_state, mask):
            raise AllocationError("[memorymanager] preferred hint violates NUMA node allocation")
        bits = bitmask.get_bits(mask)
        for node_id in bits:
            if machine_state.get(node_id) is None:
                raise AllocationError(
                    f"[memorymanager] NUMA node {node_id} of the affinity does not exist"
                )
            if self.numa_nodes is not None and node_id not in self.numa_nodes:
                raise AllocationError(
                    f"[memorymanager] NUMA node {node_id} has no CPUs, and "
                    "restrict-to-cpu-numa-nodes keeps it out of allocations"
                )
        self._check_types_on_nodes(machine_state, bits, requested)
        reuse = reuse_table.get(mask, {})
        if self.options.free_hugepages is not None:
            verify_hugepages(self.machine, self.options.free_hugepages, bits, requested, reuse)
        return bits, reuse

    def _check_types_exist(
        self, machine_state: Mapping[int, NUMANodeState | None], requested: Mapping[str, int]
    ) -> None:
        known = {
            name for n in machine_state.values() if n is not None for name in (n.memory_map or {})
        }
        for name in sorted(requested):
            if name not in known:
                raise UnsupportedResourceError(
                    f"[memorymanager] resource {quote(name)} is not available on this machine"
                )

    def _check_types_on_nodes(
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        bits: Sequence[int],
        requested: Mapping[str, int],
    ) -> None:
        """Every node of the affinity must have every requested type (else restart would fail)."""
        for node_id in bits:
            memory_map = node_state(machine_state, node_id).memory_map or {}
            for name in requested:
                if name not in memory_map:
                    raise AllocationError(
                        f"[memorymanager] NUMA node {node_id} has no {quote(name, style='bare')}; "
                        f"it cannot be part of an allocation of {quote(name, style='bare')}"
                    )

    # --- remove ------------------------------------------------------------

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        """Release the container's blocks (lowest node first) and reset dissolved groups.

        A container of a pod allocated as a whole releases nothing itself: its entry goes,
        and the last container's removal releases the pod-level budget and its entry."""
        if self.gates.pod_level_resource_managers:
            pod_blocks = state.get_pod_memory_blocks(pod_uid)
            if pod_blocks is not None:
                state.delete(pod_uid, container_name)
                if not state.container_names(pod_uid):
                    self._release(state, pod_blocks)
                    state.delete_pod(pod_uid)
                return
        blocks = state.get_memory_blocks(pod_uid, container_name)
        if blocks is None:
            return
        state.delete(pod_uid, container_name)
        self._release(state, blocks)

    def _release(self, state: State, blocks: Sequence[Block]) -> None:
        touched = {n for b in blocks for n in b.numa_affinity or ()}
        machine_state = copy_for_write(state.machine_view(), touched)
        release_memory(machine_state, blocks)
        state.adopt_machine_state(machine_state)

    def get_allocatable_memory(self, state: StateReader) -> list[Block]:
        """One block per node and type with non-zero allocatable (node, then memory first)."""
        result = []
        for node_id, node in sorted(state.machine_view().items()):
            if node is None:
                continue
            for name in sorted(node.memory_map or {}, key=podlevel.resource_order):
                table = (node.memory_map or {})[name]
                if table.allocatable != 0:
                    result.append(Block((node_id,), name, table.allocatable))
        return result
