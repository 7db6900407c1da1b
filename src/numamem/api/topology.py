"""``numamem.v1.Topology``: the discovered machine, with free hugepages read live."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from numamem.api.component import StatelessComponent
from numamem.errors import FailedPreconditionError, TopologyError
from numamem.topology import Machine
from numamem.topology.sysfs import read_free_hugepages
from numamem.v1 import topology_pb2, topology_pb2_grpc

SERVICE_NAME = topology_pb2.DESCRIPTOR.services_by_name["Topology"].full_name


class TopologyServicer(topology_pb2_grpc.TopologyServicer):
    """Stateless over an immutable :class:`Machine`; safe for concurrent calls."""

    def __init__(self, machine: Machine, sysfs_root: str | None) -> None:
        self._machine = machine
        self._sysfs_root = sysfs_root

    def GetMachineInfo(
        self, request: topology_pb2.GetMachineInfoRequest, context: grpc.ServicerContext
    ) -> topology_pb2.MachineInfo:
        return machine_info(self._machine, self._sysfs_root)


def machine_info(machine: Machine, sysfs_root: str | None) -> topology_pb2.MachineInfo:
    """The machine as a message; free hugepages come from sysfs now when a root is given."""
    nodes = []
    for node in machine.nodes:
        pools = []
        for pool in node.hugepages:
            free = pool.free_pages
            if sysfs_root is not None:
                try:
                    free = read_free_hugepages(sysfs_root, node.id, pool.page_size_kb)
                except TopologyError as err:
                    raise FailedPreconditionError(f"cannot read free hugepages: {err}") from err
            pools.append(
                topology_pb2.HugePages(
                    page_size_bytes=pool.page_size_bytes,
                    total_pages=pool.total_pages,
                    free_pages=free,
                )
            )
        nodes.append(
            topology_pb2.NUMANode(
                id=node.id,
                memory_bytes=node.memory_bytes,
                hugepages=pools,
                cpus=node.cpus,
                distances=node.distances,
                has_cpus=node.has_cpus,
                generic_initiator=node.generic_initiator,
                memory_tier=node.memory_tier,
            )
        )
    return topology_pb2.MachineInfo(numa_nodes=nodes, warnings=machine.warnings)


class TopologyComponent(StatelessComponent):
    """Serves the Topology service; owns no state."""

    service_names: Sequence[str] = (SERVICE_NAME,)

    def __init__(self, machine: Machine, sysfs_root: str | None) -> None:
        self.servicer = TopologyServicer(machine, sysfs_root)

    def register(self, server: grpc.Server) -> None:
        topology_pb2_grpc.add_TopologyServicer_to_server(self.servicer, server)
