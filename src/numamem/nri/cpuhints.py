"""The kubelet CPU manager's topology hint for a container, from the CPUs the runtime was told
to give it. Pure.

With the static CPU manager and the topology manager, the kubelet merges the CPU manager's
hints with the memory manager's at admission, so a Guaranteed container's exclusive CPUs and
its memory land on the same NUMA nodes. numamem is not asked by the kubelet; what it sees at
CreateContainer is the outcome: ``linux.resources.cpu.cpus``. When those CPUs lie on a strict
subset of the machine's NUMA nodes (exclusive CPUs), :func:`cpu_provider` gives ``Admit`` a
"cpu" provider whose hint for the container is those nodes, preferred, and every larger set
of nodes, not preferred: the hints the kubelet's CPU manager regenerates for CPUs already
assigned on the fewest nodes that hold them (``generateCPUTopologyHints``). CPUs on every
node (the shared pool) or none give no preference, as the CPU manager gives for a container
without exclusive CPUs. This is what the kubelet does where it runs the topology manager;
with ``topologyManagerPolicy: none`` the kubelet aligns nothing, and the daemon's own
``--topology-manager-policy none`` ignores the hint as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

from numamem.nri.kube import parse_mems
from numamem.v1 import memorymanager_pb2 as mm

PROVIDER = "cpu"
MAX_NODES_FOR_SUPERSETS = 16
"""Above this many nodes only the CPUs' own nodes are hinted (2^16 supersets is too many)."""


def cpu_nodes(cpus: str, node_of_cpu: Mapping[int, int]) -> frozenset[int] | None:
    """The NUMA nodes of the CPUs of a cpuset string; None when it names none, or a CPU the
    machine does not have."""
    parsed = parse_mems(cpus)
    if not parsed or any(cpu not in node_of_cpu for cpu in parsed):
        return None
    return frozenset(node_of_cpu[cpu] for cpu in parsed)


def cpu_provider(
    container: str, cpus: str, node_of_cpu: Mapping[int, int]
) -> list[mm.ProviderHints]:
    """The "cpu" provider for ``Admit`` (module docstring); [] for no preference."""
    nodes = cpu_nodes(cpus, node_of_cpu)
    machine = sorted(set(node_of_cpu.values()))
    if nodes is None or len(nodes) >= len(machine):
        return []
    hints = [mm.TopologyHint(numa_nodes=sorted(nodes), preferred=True)]
    others = [n for n in machine if n not in nodes]
    if len(machine) <= MAX_NODES_FOR_SUPERSETS:
        for size in range(1, len(others) + 1):
            for extra in combinations(others, size):
                hints.append(mm.TopologyHint(numa_nodes=sorted(nodes | set(extra))))
    resources = mm.ResourceHints(resources={"cpu": mm.TopologyHints(hints=hints)})
    return [mm.ProviderHints(provider=PROVIDER, containers={container: resources})]
