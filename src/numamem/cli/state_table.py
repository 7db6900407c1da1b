"""The ``numamem state`` table (live and ``state show``): the per-NUMA table, then the blocks.

A pod allocated as a whole (pod-level resources, KEP-5526) reserves its pod-level budget
once: its ``(pod-level)`` rows are what RESERVED counts. The rows of its containers are parts
of that budget; the containers that share the pod's pool all show the pool's one block, so
those rows are marked :data:`SHARED` and a legend line says what the marks mean.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from numamem.cli.common import human_bytes, print_table
from numamem.memtypes import Block, NUMANodeState

POD_LEVEL = "(pod-level)"
"""The CONTAINER column of a pod-level block (pod-level resources, KEP-5526)."""

SHARED = "(shared pool)"
"""After the SIZE of a block that is the pod's shared pool, one block for several containers."""

LEGEND = (
    f"{POD_LEVEL} = the budget of a pod allocated as a whole, reserved once (RESERVED counts "
    f"it); its containers' rows are parts of it; {SHARED} = the pod's one shared pool, shown "
    "on each container that shares it."
)
"""Printed under the blocks when a pod allocated as a whole is among them."""


def render(
    policy: str,
    machine: Mapping[int, NUMANodeState | None],
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
    names: Mapping[str, tuple[str, str]] | None = None,
    pod_entries: Mapping[str, Sequence[Block]] | None = None,
    shared: Mapping[str, Collection[str]] | None = None,
) -> None:
    """The per-NUMA table, then one line per block; pods as ``namespace/name (uid)`` where
    their names were recorded; a pod allocated as a whole shows its pod-level blocks first
    (container ``(pod-level)``), the blocks of its containers in ``shared`` (pod uid ->
    container names) marked :data:`SHARED`, and the :data:`LEGEND` follows."""
    from numamem.memorymanager.state.differences import pod_label

    print(f"policy: {policy}")
    rows = []
    for node_id in sorted(machine):
        node = machine[node_id]
        if node is None:
            rows.append([node_id, "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        tables = node.memory_map or {}
        for i, name in enumerate(sorted(tables, key=lambda n: (n != "memory", n))):
            t = tables[name]
            first = i == 0
            rows.append(
                [
                    node_id if first else "",
                    name,
                    human_bytes(t.total),
                    human_bytes(t.system_reserved),
                    human_bytes(t.allocatable),
                    human_bytes(t.reserved),
                    human_bytes(t.free),
                    ",".join(map(str, node.cells or [])) if first else "",
                    node.number_of_assignments if first else "",
                ]
            )
    print_table(
        [
            "NODE",
            "RESOURCE",
            "TOTAL",
            "SYSTEM-RESERVED",
            "ALLOCATABLE",
            "RESERVED",
            "FREE",
            "CELLS",
            "ASSIGNMENTS",
        ],
        rows,
    )
    pod_entries = pod_entries or {}
    shared = shared or {}
    blocks = [
        [
            pod_label(pod, names or {}),
            ctr,
            b.type,
            ",".join(map(str, b.numa_affinity or ())),
            human_bytes(b.size) + (f" {SHARED}" if ctr in shared.get(pod, ()) else ""),
        ]
        for pod in sorted(set(assignments) | set(pod_entries))
        for ctr, pod_blocks in (
            *([(POD_LEVEL, pod_entries[pod])] if pod in pod_entries else []),
            *sorted(assignments.get(pod, {}).items()),
        )
        for b in pod_blocks
    ]
    if blocks:
        print()
        print_table(["POD", "CONTAINER", "TYPE", "NUMA", "SIZE"], blocks)
        if pod_entries:
            print(LEGEND)
