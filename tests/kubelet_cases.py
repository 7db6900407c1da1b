"""Loading ../shared/cases/kubelet/ scenarios into numamem's core types (see its SCHEMA.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from numamem.config import ReservedMemory
from numamem.memorymanager.state import Block, MachineState, MemoryTable, NUMANodeState
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity, parse_quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from tests.daemon import shared_path

CHECKPOINT_FILES = {"checkpoint.json"}


def load_cases(*, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    folder = shared_path("cases", "kubelet")
    cases: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")):
        if exclude and path.name in exclude:
            continue
        cases.extend(json.loads(path.read_text()))
    return cases


def machine(data: Mapping[str, Any] | None) -> Machine:
    if data is None:
        return Machine(())
    nodes = []
    for n in sorted(data["numa_nodes"], key=lambda n: n["id"]):
        pools = tuple(
            HugePagePool(h["page_size_kb"], h["num_pages"], h["num_pages"])
            for h in sorted(n.get("hugepages") or [], key=lambda h: h["page_size_kb"])
        )
        nodes.append(NUMANode(n["id"], n["memory_bytes"], pools))
    return Machine(tuple(nodes))


def machine_state(data: Mapping[str, Any] | None) -> MachineState:
    result: MachineState = {}
    for key, node in (data or {}).items():
        if node is None:
            result[int(key)] = None
            continue
        tables = node.get("memoryMap")
        result[int(key)] = NUMANodeState(
            node["numberOfAssignments"],
            None
            if tables is None
            else {
                name: MemoryTable(
                    t["total"], t["systemReserved"], t["allocatable"], t["reserved"], t["free"]
                )
                for name, t in tables.items()
            },
            None if node.get("cells") is None else list(node["cells"]),
        )
    return result


def assignments(data: Mapping[str, Any] | None) -> dict[str, dict[str, list[Block]]]:
    return {
        pod: {
            ctr: [
                Block(
                    None if b.get("numaAffinity") is None else tuple(b["numaAffinity"]),
                    b["type"],
                    b["size"],
                )
                for b in blocks
            ]
            for ctr, blocks in ctrs.items()
        }
        for pod, ctrs in (data or {}).items()
    }


def _quantities(values: Mapping[str, Any] | None) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    for name, value in (values or {}).items():
        out[name] = (
            Quantity.from_int(value, Format.BINARY_SI)
            if isinstance(value, int)
            else parse_quantity(value)
        )
    return out


def _container(data: Mapping[str, Any]) -> Container:
    return Container(
        data["name"],
        _quantities(data.get("requests")),
        _quantities(data.get("limits")),
        data.get("restart_policy") or "",
    )


def pod(data: Mapping[str, Any], *, with_qos: bool = True) -> Pod:
    return Pod(
        data["uid"],
        init_containers=tuple(_container(c) for c in data.get("init_containers") or []),
        containers=tuple(_container(c) for c in data.get("containers") or []),
        qos_class=data.get("qos", "") if with_qos else "",
    )


def affinity(data: Mapping[str, Any] | None) -> TopologyHint:
    if data is None or data.get("numa_nodes") is None:
        return TopologyHint(None, bool(data and data.get("preferred")))
    return TopologyHint(bitmask.new_mask(data["numa_nodes"]), data["preferred"])


def hints_to_json(
    hints: Mapping[str, list[TopologyHint]] | None,
) -> dict[str, list[dict[str, Any]]] | None:
    if hints is None:
        return None
    return {
        name: [
            {"numa_nodes": None if h.affinity is None else h.nodes, "preferred": h.preferred}
            for h in lst
        ]
        for name, lst in hints.items()
    }


def go_quantity(q: Mapping[str, Any]) -> Quantity:
    fmt = {
        "DecimalSI": Format.DECIMAL_SI,
        "BinarySI": Format.BINARY_SI,
        "DecimalExponent": Format.DECIMAL_EXPONENT,
    }[q["format"]]
    return Quantity(Fraction(q["value"]), fmt)


def reserved_memory(data: list[Mapping[str, Any]] | None) -> list[ReservedMemory]:
    return [
        ReservedMemory(
            r["numa_node"], tuple((name, go_quantity(q)) for name, q in r["limits"].items())
        )
        for r in data or []
    ]


def node_allocatable(data: Mapping[str, Any] | None) -> dict[str, Quantity]:
    return {name: go_quantity(q) for name, q in (data or {}).items()}


def system_reserved(data: Mapping[str, Any] | None) -> dict[int, dict[str, int]]:
    return {int(k): dict(v) for k, v in (data or {}).items()}


def normalised_state(ms: MachineState) -> dict[int, Any]:
    """Exact comparison, except that a nil ``cells`` equals [] and cells compare sorted."""
    out: dict[int, Any] = {}
    for node_id, node in ms.items():
        if node is None:
            out[node_id] = None
            continue
        out[node_id] = (
            node.number_of_assignments,
            sorted(node.cells or []),
            {
                k: (t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
                for k, t in (node.memory_map or {}).items()
            },
        )
    return out


def normalised_assignments(
    a: Mapping[str, Mapping[str, list[Block]]],
) -> dict[str, dict[str, list[Any]]]:
    """Blocks as sorted multisets (Go's block order is random); a nil affinity equals []."""
    return {
        pod: {
            ctr: sorted((tuple(sorted(b.numa_affinity or ())), b.type, b.size) for b in blocks)
            for ctr, blocks in ctrs.items()
        }
        for pod, ctrs in a.items()
    }
