"""Why each NUMA mask is or is not a hint: the verdicts ``Explain`` shows.

The first masks in kubelet's order (fewest nodes first, then lexicographic)
get a verdict with the reason of the first test they fail (see
:mod:`numamem.memorymanager.hints`); the rest are counted, not visited: a
machine of n nodes has 2^n - 1 masks.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.memorymanager.arithmetic import node_state
from numamem.memorymanager.hints import HintSpace
from numamem.memtypes import MemoryTable
from numamem.quantity import format_bytes
from numamem.topologymanager import bitmask

MAX_EXPLAINED_MASKS = 256
"""Explain lists the first masks (smallest first) and counts the rest: a 16-node machine has
65,535 masks, far more than anyone reads or a gRPC message holds."""

MAX_REPORTED_COUNT = (1 << 64) - 1
"""Counts are uint64 on the wire; larger ones (over 64 nodes) are reported as this."""


def mask_verdicts(
    space: HintSpace, limit: int = MAX_EXPLAINED_MASKS
) -> tuple[list[tuple[int, str]], int]:
    """(mask, why it is not a hint or "") for the first ``limit`` masks, and how many more exist."""
    items: list[tuple[int, str]] = []
    for mask, bits in bitmask.iterate_masks_with_bits(space.nodes):
        if len(items) >= limit:
            break
        items.append((mask, why_not(space, bits)))
    total = (1 << len(space.nodes)) - 1
    return items, min(total - len(items), MAX_REPORTED_COUNT)


def why_not(space: HintSpace, bits: Sequence[int]) -> str:
    """The reason ``bits`` is not a hint (the first of kubelet's tests it fails), or ""."""
    machine_state = space.machine_state
    tables: dict[int, dict[str, MemoryTable]] = {}
    for n in bits:
        node = machine_state.get(n)
        tables[n] = dict(node.memory_map or {}) if node is not None else {}
    for name, size in space.requested.items():
        missing = next((n for n in bits if name not in tables[n]), None)
        if missing is not None:
            return f"node {missing} has no {name}"
        allocatable = sum(tables[n][name].allocatable for n in bits)
        if allocatable < size:
            return (
                f"{name}: {format_bytes(allocatable)} allocatable < {format_bytes(size)} requested"
            )
    if len(bits) == 1:
        cells = sorted(node_state(machine_state, bits[0]).cells or ())
        if len(cells) > 1:
            return f"node {bits[0]} belongs to the multi-NUMA group {cells}"
    else:
        for n in bits:
            node = node_state(machine_state, n)
            if node.number_of_assignments > 0:
                cells = sorted(node.cells or ())
                if len(cells) == 1:
                    return f"node {n} already holds single-NUMA allocations"
                if cells != list(bits):
                    return f"node {n} belongs to the multi-NUMA group {cells}"
    reusable = space.reuse.get(bitmask.new_mask(bits), {})
    for name, size in space.requested.items():
        free = sum(tables[n][name].free for n in bits)
        extra = reusable.get(name, 0)
        if free + extra < size:
            more = f" + {format_bytes(extra)} reusable from init containers" if extra else ""
            return f"{name}: {format_bytes(free)} free{more} < {format_bytes(size)} requested"
    return ""
