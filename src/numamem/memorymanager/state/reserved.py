"""Reserved memory: kubelet's configuration validation, node-allocatable check and conversion.

* :func:`validate_reserved_memory_config` is ``validateReservedMemoryConfiguration``
  (kubelet config validation): unsupported types, zero and duplicate entries,
  all errors collected. numamem also refuses negative values (the kubelet would
  wrap them around in uint64).
* :func:`node_allocatable_reservation` is ``GetNodeAllocatableReservation``:
  system-reserved + kube-reserved + the hard eviction threshold, per resource of
  the node's capacity, zeros dropped.
* :func:`get_system_reserved_memory` is ``validateReservedMemory`` then
  ``convertReserved``: the per-type sum over ``reservedMemory`` must equal the
  node-allocatable value (Quantity equality, kubelet's texts with Quantity
  ``String()`` forms), then a node -> type -> bytes map with every NUMA node.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from numamem.config.model import EvictionThreshold, ReservedMemory
from numamem.errors import QuantityError, ReservedMemoryError, quote
from numamem.memtypes import MEMORY, is_memory_resource
from numamem.quantity import Format, Quantity, format_bytes_exact
from numamem.topology import Machine, NUMANode

SystemReservedMemory = dict[int, dict[str, int]]
"""NUMA id -> memory type -> reserved bytes."""


def validate_reserved_memory_config(reserved: Sequence[ReservedMemory]) -> None:
    """Kubelet's config validation of ``reservedMemory``; raises with all errors in one line."""
    errors: list[str] = []
    seen: dict[int, set[str]] = {}
    for entry in reserved:
        node = entry.numa_node
        types = seen.setdefault(node, set())
        for name, q in entry.limits:
            if not is_memory_resource(name):
                errors.append(
                    f"invalid configuration: the limit type {quote(name, style='go')} for NUMA node {node} is not "
                    "supported, only [memory hugepages-<HugePageSize>] is accepted"
                )
            if q.is_zero():
                errors.append(
                    f"invalid configuration: reserved memory may not be zero for NUMA node {node} and "
                    f"resource {quote(name, style='go')}"
                )
            elif q.value < 0:
                errors.append(
                    f"invalid configuration: reserved memory may not be negative for NUMA node {node} and "
                    f"resource {quote(name, style='go')}, got {q}"
                )
            if name in types:
                errors.append(
                    "invalid configuration: the reserved memory has a duplicate value for NUMA node "
                    f"{node} and resource {quote(name, style='go')}"
                )
            types.add(name)
    if len(errors) == 1:
        raise ReservedMemoryError(errors[0])
    if errors:
        raise ReservedMemoryError("[" + ", ".join(errors) + "]")


def _float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def node_allocatable_reservation(
    machine: Machine,
    system_reserved: Mapping[str, Quantity],
    kube_reserved: Mapping[str, Quantity],
    eviction_hard: Sequence[EvictionThreshold],
    memory_capacity: int | None = None,
) -> dict[str, Quantity]:
    """``GetNodeAllocatableReservation``, restricted to memory and the machine's hugepage sizes.

    Those are the only keys ``validateReservedMemory`` looks at; cpu, storage and
    pid reservations do not concern the memory manager.

    ``memory_capacity`` is the node's memory capacity (``/proc/meminfo``), which a
    percentage eviction threshold is applied to; by default the sum over NUMA nodes.
    """
    capacity_memory = memory_capacity if memory_capacity is not None else machine.total_memory_bytes
    eviction: dict[str, Quantity] = {}
    for threshold in eviction_hard:
        if threshold.signal != "memory.available":
            continue
        if threshold.quantity is not None:
            eviction[MEMORY] = threshold.quantity
        elif threshold.percentage is not None:
            pct = _float32(float(threshold.percentage))
            eviction[MEMORY] = Quantity.from_int(
                int(float(capacity_memory) * pct), Format.BINARY_SI
            )
    result: dict[str, Quantity] = {}
    for name in (MEMORY, *machine.hugepage_resources):
        total = Quantity.from_int(0)
        for source in (system_reserved, kube_reserved, eviction):
            if name in source:
                total = total.add(source[name])
        if not total.is_zero():
            result[name] = total
    return result


def get_system_reserved_memory(
    machine: Machine,
    node_allocatable: Mapping[str, Quantity],
    reserved: Sequence[ReservedMemory],
) -> SystemReservedMemory:
    """``getSystemReservedMemory``: validate against node allocatable, then convert."""
    validate_reserved_memory(machine, node_allocatable, reserved)
    return convert_reserved(machine, reserved)


def validate_reserved_memory(
    machine: Machine, node_allocatable: Mapping[str, Quantity], reserved: Sequence[ReservedMemory]
) -> None:
    """``validateReservedMemory``: per type, the sum over NUMA nodes equals node allocatable."""
    totals: dict[str, Quantity] = {}
    for entry in reserved:
        if not machine.has_node(entry.numa_node):
            raise ReservedMemoryError(
                f"the reserved memory configuration references a NUMA node {entry.numa_node} that does "
                "not exist on this machine"
            )
        for name, q in entry.limits:
            totals[name] = q.add(totals[name]) if name in totals else q
    types = set(totals) | {n for n in node_allocatable if is_memory_resource(n)}
    for name in sorted(types):
        allocatable = Quantity.from_int(0)
        if name in node_allocatable:
            allocatable = allocatable.add(node_allocatable[name])
        total = Quantity.from_int(0)
        if name in totals:
            total = total.add(totals[name])
        if allocatable.value != total.value:
            raise ReservedMemoryError(
                f"the total amount {quote(str(total), style='go')} of type {quote(name, style='go')} is not equal to the value "
                f"{quote(str(allocatable), style='go')} determined by Node Allocatable feature"
                + _what_passes(machine, node_allocatable)
            )


def plan_reserved_memory(
    machine: Machine, node_allocatable: Mapping[str, Quantity], *, spread: bool = False
) -> tuple[ReservedMemory, ...]:
    """A ``reservedMemory`` that passes :func:`validate_reserved_memory` for this machine.

    Per memory type, the node-allocatable reservation goes to the first NUMA node,
    or with ``spread`` is divided in proportion to each node's memory of that type
    (MemTotal for ``memory``, the pool for a hugepage size), rounded down to whole
    MiB, the remainder on the first node, so that the sums are exact. Raises
    ReservedMemoryError when a node would get more than it has.
    """
    if not machine.nodes:
        return ()
    per_node: dict[int, list[tuple[str, Quantity]]] = {n.id: [] for n in machine.nodes}
    for name in sorted(node_allocatable, key=lambda n: (n != MEMORY, n)):
        if not is_memory_resource(name):
            continue
        total = node_allocatable[name].as_int64()
        if total <= 0:
            continue
        weights = {n.id: _capacity(n, name) for n in machine.nodes}
        if not spread:
            shares = {machine.nodes[0].id: total}
        else:
            whole = sum(weights.values())
            if whole <= 0:
                raise ReservedMemoryError(f"no NUMA node of this machine has {name} to reserve")
            mib = 1024 * 1024
            shares = {n: total * w // whole // mib * mib for n, w in weights.items()}
            first = machine.nodes[0].id
            shares[first] += total - sum(shares.values())
        for node_id, share in shares.items():
            if share == 0:
                continue
            if share > weights[node_id]:
                fix = (
                    "reserve less (--spread already divides it over the nodes)"
                    if spread
                    else "use --spread or reserve less"
                )
                raise ReservedMemoryError(
                    f"NUMA node {node_id} has {format_bytes_exact(weights[node_id])} of {name}, "
                    f"fewer than the {format_bytes_exact(share)} to reserve there; {fix}"
                )
            per_node[node_id].append((name, Quantity.from_int(share, Format.BINARY_SI)))
    return tuple(ReservedMemory(n, tuple(limits)) for n, limits in per_node.items() if limits)


def reserved_memory_flag(reserved: Sequence[ReservedMemory]) -> str:
    """The ``--reserved-memory`` value of ``reserved`` (kubelet syntax)."""
    return ";".join(
        f"{r.numa_node}:" + ",".join(f"{name}={q}" for name, q in r.limits) for r in reserved
    )


def _capacity(node: NUMANode, name: str) -> int:
    if name == MEMORY:
        return node.memory_bytes - sum(p.total_bytes for p in node.hugepages)
    return sum(p.total_bytes for p in node.hugepages if p.resource_name == name)


def convert_reserved(machine: Machine, reserved: Sequence[ReservedMemory]) -> SystemReservedMemory:
    """``convertReserved``: every machine node present; later entries overwrite earlier ones."""
    result: SystemReservedMemory = {node: {} for node in machine.node_ids}
    for entry in reserved:
        for name, q in entry.limits:
            try:
                value = q.as_int64()
            except QuantityError as err:
                raise ReservedMemoryError(
                    "could not covert a variable of type Quantity to int64"
                ) from err
            result.setdefault(entry.numa_node, {})[name] = value
    return result


def _what_passes(machine: Machine, node_allocatable: Mapping[str, Quantity]) -> str:
    """numamem's addition to the kubelet's text, on a line of its own: a reservation that
    would pass."""
    try:
        plan = plan_reserved_memory(machine, node_allocatable)
    except (ReservedMemoryError, QuantityError):
        return ""
    if not plan:
        return (
            "\n  fix: system-reserved + kube-reserved + eviction-hard reserve no memory, and the "
            "Static policy needs some: set --system-reserved memory=<size>, then a reservedMemory "
            "of the same total (numamem plan-reservations prints it)"
        )
    return (
        f"\n  fix: this passes: --reserved-memory '{reserved_memory_flag(plan)}' "
        "(numamem plan-reservations prints it as YAML too, or spread over the nodes)"
    )
