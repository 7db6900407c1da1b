"""The Static policy (kubelet ``policy_static.go``, GA semantics).

Guaranteed pods get their memory and hugepages pinned to NUMA nodes:

* hints are the NUMA masks whose summed allocatable fits the request, whose
  nodes obey the multi-NUMA group rules, and whose summed free memory (plus
  this pod's reusable init-container memory for exactly that mask) fits;
  "preferred" means the minimal number of nodes whose *allocatable* could hold
  the request. They are kubelet's hints in kubelet's order, given by rule
  (:class:`~numamem.memorymanager.hints.HintSpace`) rather than by visiting
  all 2^n masks, so hints and admission stay fast on large machines;
* Allocate takes the topology manager's affinity (or the default hint),
  extends an insufficient affinity to the narrowest superset, checks the group
  rule and reserves each memory type lowest node first
  (:mod:`~numamem.memorymanager.arithmetic`);
* init containers' memory is reused by later containers of the same pod and
  their stored blocks shrink accordingly (sidecars are never reused);
* Start validates a restored state by replaying every block on the default
  machine state and comparing group sums.

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
  blocks are charged (:func:`~numamem.memorymanager.reuse.reusable_memory`), not
  a table of the last pod allocated kept in memory: the same in the kubelet's
  order, and reserved memory equals the blocks in any order of Allocate calls
  and across restarts (:mod:`~numamem.memorymanager.reuse`).

Pod-scope hints regenerate from the first container that has blocks using the
*pod's* request, as the released upstream code does (descriptions of the
algorithm say "its own container request"; the code, which clients observe,
passes the pod request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numamem.errors import (
    AllocationError,
    InvalidArgumentError,
    ReservedMemoryError,
    StateMismatchError,
    UnsupportedResourceError,
    quote,
)
from numamem.logging import get_logger
from numamem.memorymanager import drift
from numamem.memorymanager.arithmetic import (
    affinity_satisfies,
    copy_for_write,
    default_machine_state,
    machine_states_equal,
    node_state,
    release_memory,
    replay_assignments,
    update_machine_state,
    violates_numa_allocations,
)
from numamem.memorymanager.explain import mask_verdicts
from numamem.memorymanager.hints import HintSpace
from numamem.memorymanager.options import StaticOptions, verify_hugepages
from numamem.memorymanager.policy import HintExplanation, MaskVerdict
from numamem.memorymanager.requests import (
    Requested,
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.reserved import SystemReservedMemory
from numamem.memorymanager.reuse import reusable_memory, update_init_container_blocks
from numamem.memorymanager.state import State, StateReader
from numamem.memtypes import MEMORY, Block, MachineState, NUMANodeState
from numamem.pod import GUARANTEED, Container, Pod, pod_qos
from numamem.quantity import format_bytes
from numamem.topology import Machine
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from numamem.work import Work

POLICY_NAME = "Static"
_log = get_logger("memorymanager")

Hints = dict[str, list[TopologyHint] | HintSpace]


def _resource_order(name: str) -> tuple[bool, str]:
    """Block order: memory first, then hugepages by name (Go's order is random)."""
    return (name != MEMORY, name)


class StaticPolicy:
    """The Static policy. Keeps no state between calls: safe for concurrent readers."""

    name = POLICY_NAME

    def __init__(
        self,
        machine: Machine,
        system_reserved: SystemReservedMemory,
        numa_nodes: Sequence[int] | None = None,
        options: StaticOptions | None = None,
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
        """``validateState``: default state for an empty one; else replay and compare, and
        accept a changed machine as ``memory-drift-tolerance`` says (:mod:`.drift`).

        Raises StateMismatchError whose first line is the kubelet's text, followed by
        what differs, the containers concerned and the fix. An accepted change
        re-baselines the state (the manager then writes it once).
        """
        machine_state = state.get_machine_state()
        assignments = state.get_memory_assignments()
        if not machine_state:
            if assignments:
                raise StateMismatchError(
                    "[memorymanager] machine state can not be empty when it has memory assignments"
                )
            state.set_machine_state(self.default_machine_state())
            return
        opts = self.options
        if opts.tolerance.mode == drift.OFF:
            expected = self.default_machine_state()
            try:
                replay_assignments(expected, assignments)
            except StateMismatchError as err:
                raise StateMismatchError(
                    f"{err}\n  in {opts.state_file}; fix: drain the node, remove {opts.state_file} "
                    "and restart numamem"
                ) from err
            if machine_states_equal(machine_state, expected):
                self.drift = _no_drift(expected)
                return
        verdict = drift.check_restore(
            machine_state,
            assignments,
            self.default_machine_state(),
            opts.tolerance,
            opts.auto_bound,
            pod_names,
        )
        if not verdict.accepted:
            raise StateMismatchError(verdict.report(opts.state_file))
        self.drift = verdict.drift
        self.last_verdict = verdict
        if verdict.rebaseline is not None:
            _log.warning(
                "the machine changed since the state was written; every stored block still fits "
                "and keeps its nodes: re-baselined",
                tolerance=opts.tolerance.text,
                changes=[d.line() for d in verdict.differences],
            )
            state.set_machine_state(verdict.rebaseline)

    # --- hints -------------------------------------------------------------

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
        requested, blocks, _ = source
        if blocks is not None:
            return regenerate_hints(blocks, requested)
        return self.calculate_hints(
            state.machine_view(), requested, reusable_memory(state, pod, container), work
        )

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
    ) -> tuple[Requested, list[Block] | None, str] | str:
        """The request, the stored blocks hints derive from and their container, or why no hints.

        ``container`` None is the pod scope: the pod's request, and the blocks of
        the first container that has any.
        """
        qos = pod_qos(pod)
        if qos != GUARANTEED:
            return f"the pod's QoS class is {qos}; only Guaranteed pods get NUMA hints"
        try:
            if container is None:
                requested = pod_requested_resources(pod)
            else:
                requested = container_requested_resources(container)
        except AllocationError as err:
            return f"{err}; no hints"
        if not requested:
            return "no memory or hugepages requested; no hints"
        if container is not None:
            return requested, state.get_memory_blocks(pod.uid, container.name), container.name
        for ctr in pod.all_containers():
            blocks = state.get_memory_blocks(pod.uid, ctr.name)
            if blocks is not None:
                return requested, blocks, ctr.name
        return requested, None, ""

    def explain(
        self, state: StateReader, pod: Pod, container: Container | None, work: Work | None = None
    ) -> HintExplanation:
        source = self._hint_source(state, pod, container)
        if isinstance(source, str):
            return HintExplanation(note=source)
        requested, blocks, owner = source
        if blocks is not None:
            if regenerate_hints(blocks, requested) is None:
                stored = ", ".join(f"{b.type} {format_bytes(b.size)}" for b in blocks)
                note = (
                    f"container {quote(owner)} already holds {stored}, which does not match the request; "
                    "no preference"
                )
                if container is None:
                    note += " (in the pod scope the kubelet compares the pod's request with one container's blocks)"
                elif pod.is_regular_init_container(owner):
                    note += " (later containers reuse an init container's memory)"
            else:
                note = (
                    f"container {quote(owner)} is already allocated; the hints repeat its affinity"
                )
            return HintExplanation(dict(requested), note=note)
        space = self.hint_space(
            state.machine_view(), requested, reusable_memory(state, pod, container), work or Work()
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
        if state.get_memory_blocks(pod.uid, container.name) is not None:
            return
        requested = container_requested_resources(container)
        if not requested:
            return
        machine_state = state.machine_view()
        reuse_table = reusable_memory(state, pod, container)
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
        blocks = []
        changed = copy_for_write(machine_state, bits)
        for name in sorted(requested, key=_resource_order):
            size = requested[name]
            blocks.append(Block(tuple(bits), name, size))
            to_reserve = max(size - reuse.get(name, 0), 0)
            update_machine_state(changed, bits, name, to_reserve)
        state.adopt_machine_state(changed)
        state.set_memory_blocks(pod.uid, container.name, blocks)
        update_init_container_blocks(state, pod, container, blocks)

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
        """Release the container's blocks (lowest node first) and reset dissolved groups."""
        blocks = state.get_memory_blocks(pod_uid, container_name)
        if blocks is None:
            return
        state.delete(pod_uid, container_name)
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
            for name in sorted(node.memory_map or {}, key=_resource_order):
                table = (node.memory_map or {})[name]
                if table.allocatable != 0:
                    result.append(Block((node_id,), name, table.allocatable))
        return result


def _no_drift(state: MachineState) -> dict[tuple[int, str], int]:
    return {(n, name): 0 for n, node in state.items() if node for name in (node.memory_map or {})}


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
