"""What differs between a stored state and the machine now, field by field, and how it is said.

The pieces of the restore check (:mod:`numamem.memorymanager.state.drift`) that state facts
rather than decide: replaying every stored block onto the machine as it is now and what does
not fit (:func:`replay_strict`), every field ``areMachineStatesEqual`` would find different
(:func:`diff_states`), which containers hold blocks on each node
(:func:`containers_by_node`), and how messages name pods and containers (namespace and name
where the manager recorded them). Pure: the caller supplies the states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from numamem.errors import quote
from numamem.memtypes import Block, ContainerRef, MachineState, NUMANodeState
from numamem.quantity import format_bytes, format_bytes_exact

Assignments = Mapping[str, Mapping[str, Sequence[Block]]]
PodNames = Mapping[str, tuple[str, str]]
"""Pod uid -> (namespace, name), where the manager recorded them."""


def pod_label(uid: str, names: PodNames) -> str:
    """``namespace/name (uid)`` when the pod's names are known, else the uid."""
    namespace, name = (quote(n, style="bare") for n in names.get(uid, ("", "")))
    shown = quote(uid, style="bare")
    return f"{namespace}/{name} ({shown})" if namespace or name else shown


def container_label(uid: str, container: str, names: PodNames) -> str:
    """``namespace/name/container (pod uid)`` when the pod's names are known, else
    ``uid/container``."""
    namespace, name = (quote(n, style="bare") for n in names.get(uid, ("", "")))
    shown, ctr = quote(uid, style="bare"), quote(container, style="bare")
    if namespace or name:
        return f"{namespace}/{name}/{ctr} (pod {shown})"
    return f"{shown}/{ctr}"


@dataclass(frozen=True)
class Difference:
    """One field that differs between the stored state and the one recomputed now."""

    node: int
    resource: str
    """A memory type, or "" for node-level fields (the node itself, assignments, cells)."""
    field: str
    stored: str
    now: str

    def line(self) -> str:
        where = f"node {self.node}" + (f" {self.resource}" if self.resource else "")
        return f"{where} {self.field}: stored {self.stored}, now {self.now}"


def replay_strict(
    expected: MachineState, assignments: Assignments, names: PodNames | None = None
) -> list[str]:
    """Reserve every stored block on ``expected``; what cannot be placed is returned, in order.

    The kubelet's GA replay drops a remainder it cannot place; here it is a misfit
    (the drift PR's ``the memory assignment does not fit the machine state``). ``names``
    name the pods (``namespace/name (uid)``) where they are known.
    """
    misfits: list[str] = []
    for pod_uid in sorted(assignments):
        for container_name in sorted(assignments[pod_uid]):
            who = f"(pod: {pod_label(pod_uid, names or {})}, container: {quote(container_name, style='bare')})"
            for block in assignments[pod_uid][container_name]:
                nodes = list(block.numa_affinity or ())
                missing = [n for n in nodes if expected.get(n) is None]
                if missing:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment uses the NUMA that does not "
                        f"exist: node {missing[0]} is gone, and the block of {format_bytes(block.size)} "
                        f"{block.type} on nodes {nodes} is pinned there"
                    )
                    continue
                remaining = block.size
                lacking = []
                for n in nodes:
                    node = expected[n]
                    assert node is not None
                    node.number_of_assignments += 1
                    node.cells = list(nodes)
                    table = (node.memory_map or {}).get(block.type)
                    if table is None:
                        lacking.append(n)
                        continue
                    take = min(max(table.free, 0), remaining)
                    table.reserved += take
                    table.free -= take
                    remaining -= take
                if lacking:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment uses memory resource that does "
                        f"not exist: node {lacking[0]} has no {block.type} now"
                    )
                elif remaining:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment does not fit the machine state: "
                        f"{format_bytes(block.size)} {block.type} on nodes {nodes}, "
                        f"{format_bytes(remaining)} more than they have free now"
                    )
    return misfits


def diff_states(
    stored: Mapping[int, NUMANodeState | None], expected: Mapping[int, NUMANodeState | None]
) -> list[Difference]:
    """Every difference ``areMachineStatesEqual`` would see (free/reserved as group sums)."""
    out: list[Difference] = []
    for n in sorted(set(stored) | set(expected)):
        a, e = stored.get(n), expected.get(n)
        if a is None or e is None:
            out.append(
                Difference(
                    n, "", "node", "present" if a else "absent", "present" if e else "absent"
                )
            )
            continue
        if a.number_of_assignments != e.number_of_assignments:
            out.append(
                Difference(
                    n,
                    "",
                    "NumberOfAssignments",
                    str(a.number_of_assignments),
                    str(e.number_of_assignments),
                )
            )
        if sorted(a.cells or []) != sorted(e.cells or []):
            out.append(
                Difference(n, "", "Cells", str(sorted(a.cells or [])), str(sorted(e.cells or [])))
            )
        a_map, e_map = a.memory_map or {}, e.memory_map or {}
        for name in sorted(set(a_map) | set(e_map)):
            at, et = a_map.get(name), e_map.get(name)
            if at is None or et is None:
                out.append(
                    Difference(
                        n,
                        name,
                        "type",
                        "present" if at else "absent",
                        "present" if et else "absent",
                    )
                )
                continue
            for label, x, y in (
                ("TotalMemSize", at.total, et.total),
                ("SystemReserved", at.system_reserved, et.system_reserved),
                ("Allocatable", at.allocatable, et.allocatable),
            ):
                if x != y:
                    out.append(Difference(n, name, label, _bytes(x), _bytes(y) + _delta(y - x)))
            for label, attr in (("Free (group sum)", "free"), ("Reserved (group sum)", "reserved")):
                x, y = _group_sum(stored, a, name, attr), _group_sum(expected, a, name, attr)
                if x != y:
                    out.append(Difference(n, name, label, _bytes(x), _bytes(y) + _delta(y - x)))
    return out


def containers_by_node(assignments: Assignments) -> dict[int, list[ContainerRef]]:
    """node -> (pod, container) of every container with a block on that node, sorted."""
    out: dict[int, set[ContainerRef]] = {}
    for pod, containers in assignments.items():
        for ctr, blocks in containers.items():
            for block in blocks:
                for n in block.numa_affinity or ():
                    out.setdefault(n, set()).add((pod, ctr))
    return {n: sorted(refs) for n, refs in out.items()}


def _group_sum(
    state: Mapping[int, NUMANodeState | None], node: NUMANodeState, name: str, attr: str
) -> int:
    total = 0
    for cell in node.cells or []:
        member = state.get(cell)
        table = None if member is None else (member.memory_map or {}).get(name)
        if table is not None:
            total += int(getattr(table, attr))
    return total


def _bytes(value: int) -> str:
    return format_bytes_exact(value)


def _delta(value: int) -> str:
    sign = "+" if value >= 0 else "-"
    return f", {sign}{format_bytes(abs(value))}"


def container_owner(pod_uid: str, container_name: str) -> str:
    """The kubelet's ``(pod: %s, container: %s)`` of its state validation errors."""
    return (
        f"(pod: {quote(pod_uid, style='bare')}, container: {quote(container_name, style='bare')})"
    )
