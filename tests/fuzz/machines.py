"""The machines a fuzz campaign runs on (``python -m tests.fuzz --machine``).

``small``: the standard 2-node fake machine, where no hint search is long. ``large``: 40
nodes at random distances (seeded) with prefer-closest-numa-nodes, where a short pod can
spend the whole search budget (``numamem.work.SEARCH_BUDGET``): the cost oracle's
allowance for a searching RPC (tests/fuzz/cost.py, ``CPU_SEARCH_S``) is charged there.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import Message

from numamem.testing.sysfs import FakeNode, standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm

MACHINES = ("small", "large")
LARGE_NODES = 40
LARGE_ARGS = [
    "--topology-manager-policy-options",
    "prefer-closest-numa-nodes=true,max-allowable-numa-nodes=64",
]
"""Flags the large machine adds (the topology manager allows 8 nodes by default)."""


def random_distance(seed: int) -> Callable[[int, int], int]:
    """Random symmetric distances (10 to itself), drawn as pairs are first asked for: the same
    ``seed`` and the same order of questions give the same table."""
    rnd = random.Random(seed)
    table: dict[tuple[int, int], int] = {}

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        key = (min(a, b), max(a, b))
        if key not in table:
            table[key] = rnd.choice([11, 12, 20, 21, 32])
        return table[key]

    return distance


def distances(nodes: int = LARGE_NODES, seed: int = 3) -> list[list[int]]:
    """The table of :func:`random_distance` (``seed``), asked row by row."""
    distance = random_distance(seed)
    return [[distance(i, j) for j in range(nodes)] for i in range(nodes)]


def large_nodes(nodes: int = LARGE_NODES) -> list[FakeNode]:
    """4 GiB a node (node 0 256 MiB more, for the reservation), a CPU each."""
    return [
        FakeNode(i, memory_kb=(4 << 20) + ((1 << 18) if i == 0 else 0), cpus=str(i), distances=row)
        for i, row in enumerate(distances(nodes))
    ]


def write_machine(sysfs: Path, machine: str) -> list[str]:
    """Writes ``machine``'s sysfs at ``sysfs``; the flags it adds to the daemon's."""
    if machine not in MACHINES:
        raise ValueError(f"machine {machine!r}: one of {', '.join(MACHINES)}")
    large = machine == "large"
    if not sysfs.exists():
        write_sysfs(sysfs, large_nodes() if large else standard_nodes(2))
    return list(LARGE_ARGS) if large else []


def long_searches(nodes: int = LARGE_NODES) -> list[tuple[str, Message]]:
    """(RPC path, request) of short requests that spend the whole search budget on the large
    machine (a 38Gi pod, another provider's hints over all nodes and over ten): sent by a
    campaign on it after its sweep, each charged by the cost oracle. Read-only RPCs (Admit
    is refused for the budget), so the campaign's model of the state is unchanged."""
    res = {"cpu": "1", "memory": "38Gi"}
    wide = mm.TopologyHints(
        hints=[
            mm.TopologyHint(numa_nodes=list(range(nodes)), preferred=False),
            mm.TopologyHint(numa_nodes=list(range(10)), preferred=False),
        ]
    )
    pod = mm.Pod(
        uid="fuzz-search-uid",
        namespace="fuzz",
        name="search",
        qos_class="Guaranteed",
        containers=[mm.Container(name="c0", requests=res, limits=res)],
    )
    provider = mm.ProviderHints(provider="cpu")
    provider.containers["c0"].resources["cpu"].CopyFrom(wide)
    service = "/numamem.v1.MemoryManager"
    return [
        (f"{service}/Admit", mm.AdmitRequest(pod=pod, other_providers=[provider])),
        (f"{service}/Explain", mm.ExplainRequest(pod=pod, other_providers=[provider])),
        (f"{service}/GetPodTopologyHints", mm.GetPodTopologyHintsRequest(pod=pod)),
    ]
