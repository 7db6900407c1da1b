"""Loading tests/data/kubelet-cases/ scenarios into numamem's core types (see its SCHEMA.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import grpc

from numamem.config.model import ReservedMemory
from numamem.memtypes import (
    HUGEPAGES_PREFIX,
    MEMORY,
    Block,
    MachineState,
    MemoryTable,
    NUMANodeState,
)
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity, parse_quantity
from numamem.testing.sysfs import FakeNode
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import data_path

CHECKPOINT_FILES = {"checkpoint.json"}


def load_cases(*, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    folder = data_path("kubelet-cases")
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


# --- scenarios as daemon configurations (tests/e2e/test_kubelet_corpus_daemon.py) ---------

GIB_KB = 1024 * 1024
DEFAULT_NODES = [FakeNode(i, 8 * GIB_KB, str(i), {1048576: (2, 2)}) for i in range(2)]
"""The machine of scenarios whose Go test passes no machine (``machine: null``)."""


@dataclass
class Seed:
    """A memory manager state to write as ``memory_manager_state``."""

    machine: MachineState
    assignments: dict[str, dict[str, list[Block]]]


@dataclass
class SeedMachine:
    """The machine, flags and seed that give a scenario's seeded numbers on a real start."""

    nodes: list[FakeNode]
    flags: list[str]
    seed: Seed
    shift: dict[int, int] = field(default_factory=dict)
    """NUMA id -> bytes added to ``memory.total`` (the node's hugepages, when the seed counts
    them as allocatable memory)."""


def _page_kb(resource: str) -> int:
    return int(parse_quantity(resource.removeprefix(HUGEPAGES_PREFIX)).value) // 1024


def reservation_flags(reserved: Mapping[int, Mapping[str, int]]) -> list[str]:
    """``--reserved-memory`` and the matching ``--system-reserved memory=`` for a per-node map."""
    spec = ";".join(
        f"{n}:" + ",".join(f"{k}={v}" for k, v in sorted(res.items()))
        for n, res in sorted(reserved.items())
        if res
    )
    total = sum(res.get("memory", 0) for res in reserved.values())
    flags = ["--memory-manager-policy", "Static"]
    if spec:
        flags += ["--reserved-memory", spec]
    if total:
        flags += ["--system-reserved", f"memory={total}"]
    return flags


def seed_machine(case: Mapping[str, Any]) -> SeedMachine:
    """The machine whose default state has the seed's allocatable, reserved and free numbers.

    Per node: hugepage pools from the seed's hugepage tables; MemTotal =
    allocatable + systemReserved + hugepages, so that the kubelet's rule
    (allocatable = MemTotal - systemReserved - hugepages) gives the seed's
    allocatable; reservations from the seed's ``systemReserved``. The seed is
    returned with ``memory.total`` set to that MemTotal; ``shift`` says by how
    much it moved. A scenario without a seeded machine state runs on the
    scenario's machine (or :data:`DEFAULT_NODES`) with its ``system_reserved``.
    """
    state = machine_state(case.get("initial_machine_state"))
    if not state:
        nodes, flags = start_flags(case)
        return SeedMachine(nodes, flags, Seed(state, assignments(case.get("initial_assignments"))))
    nodes: list[FakeNode] = []
    reserved: dict[int, dict[str, int]] = {}
    shift: dict[int, int] = {}
    for node_id, node in sorted(state.items()):
        assert node is not None and node.memory_map is not None, case["id"]
        tables = node.memory_map
        pages = {
            _page_kb(name): (t.total // (_page_kb(name) * 1024),) * 2
            for name, t in tables.items()
            if name != MEMORY
        }
        hugepages = sum(t.total for name, t in tables.items() if name != MEMORY)
        memory = tables[MEMORY]
        mem_total = memory.allocatable + memory.system_reserved + hugepages
        shift[node_id] = mem_total - memory.total
        memory.total = mem_total
        nodes.append(FakeNode(node_id, mem_total // 1024, str(node_id), pages))
        reserved[node_id] = {k: t.system_reserved for k, t in tables.items() if t.system_reserved}
    return SeedMachine(
        nodes,
        reservation_flags(reserved),
        Seed(state, assignments(case.get("initial_assignments"))),
        shift,
    )


def shift_memory_total(state: MachineState, shift: Mapping[int, int]) -> None:
    """Apply :attr:`SeedMachine.shift` to an expected machine state, in place."""
    for node_id, delta in shift.items():
        node = state.get(node_id)
        if node is not None and node.memory_map is not None and MEMORY in node.memory_map:
            node.memory_map[MEMORY].total += delta


def _fake_nodes(data: Mapping[str, Any] | None) -> list[FakeNode]:
    if data is None:
        return list(DEFAULT_NODES)
    return [
        FakeNode(
            n["id"],
            n["memory_bytes"] // 1024,
            str(n["id"]),
            {h["page_size_kb"]: (h["num_pages"], h["num_pages"]) for h in n.get("hugepages") or []},
        )
        for n in data["numa_nodes"]
    ]


def start_flags(case: Mapping[str, Any]) -> tuple[list[FakeNode], list[str]]:
    """validateState scenarios: the case's machine, its policy-level reservation as flags."""
    return _fake_nodes(case.get("machine")), reservation_flags(
        system_reserved(case.get("system_reserved"))
    )


def config_flags(case: Mapping[str, Any]) -> tuple[list[FakeNode], list[str]]:
    """Policy construction and reservation scenarios as ``numamem serve`` flags.

    Quantities keep the Go test's String() forms ("1Gi", "12"), which the
    kubelet's error texts print; node allocatable becomes ``--system-reserved``.
    """
    nodes = _fake_nodes(case.get("machine"))
    if case["kind"] in ("policy_new", "policy_name"):
        return nodes, reservation_flags(system_reserved(case.get("system_reserved")))
    flags = ["--memory-manager-policy", case.get("policy", "Static")]
    entries = [
        f"{r['numa_node']}:" + ",".join(f"{k}={q['string']}" for k, q in r["limits"].items())
        for r in case.get("reserved_memory") or []
    ]
    if entries:
        flags += ["--reserved-memory", ";".join(entries)]
    allocatable = case.get("node_allocatable_reservation") or {}
    assert set(allocatable) <= {MEMORY}, "--system-reserved cannot reserve hugepages"
    if MEMORY in allocatable:
        flags += ["--system-reserved", f"memory={allocatable[MEMORY]['string']}"]
    return nodes, flags


def pod_proto(data: Mapping[str, Any], *, guaranteed: bool = False, uid: str = "") -> mm.Pod:
    """A corpus pod as the API's message (byte quantities as decimal strings).

    ``guaranteed`` sets every container's limits to its requests (plus cpu).
    """

    def container(c: Mapping[str, Any]) -> mm.Container:
        requests = {k: str(v) for k, v in (c.get("requests") or {}).items()}
        limits = {k: str(v) for k, v in (c.get("limits") or {}).items()}
        if guaranteed:
            requests.setdefault("cpu", "1")
            limits = dict(requests)
        return mm.Container(
            name=c["name"],
            requests=requests,
            limits=limits,
            restart_policy=c.get("restart_policy") or "",
        )

    return mm.Pod(
        uid=uid or data["uid"],
        init_containers=[container(c) for c in data.get("init_containers") or []],
        containers=[container(c) for c in data.get("containers") or []],
        qos_class="" if guaranteed else data.get("qos", ""),
    )


def expect_rpc_error(call: Callable[[], object], expected: str | None) -> None:
    """``call`` succeeds, or fails with the kubelet's error text as the status details."""
    if expected is None:
        call()
        return
    try:
        call()
    except grpc.RpcError as err:
        assert err.details() == expected  # type: ignore[attr-defined]
        return
    raise AssertionError(f"expected the error {expected!r}")
