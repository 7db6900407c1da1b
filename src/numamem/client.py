"""A typed Python client for every numamem RPC.

    with NumamemClient("/run/numamem/numamem.sock") as nm:
        machine = nm.get_machine_info()

Methods take and return the generated ``numamem.v1`` messages. RPC failures
raise :class:`grpc.RpcError` (``.code()``, ``.details()``). Every call sends an
``x-request-id`` (given, or generated) that the daemon logs.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from types import TracebackType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.config.model import DEFAULT_SOCKET
from numamem.memtypes import Block, MemoryTable, NUMANodeState
from numamem.v1 import (
    common_pb2,
    memorymanager_pb2,
    memorymanager_pb2_grpc,
    metacache_pb2,
    metacache_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

__all__ = ["NumamemClient", "state_from_proto"]

MachineState = dict[int, NUMANodeState | None]
Assignments = dict[str, dict[str, list[Block]]]


def state_from_proto(resp: memorymanager_pb2.GetStateResponse) -> tuple[MachineState, Assignments]:
    """A GetState answer as the memory manager's own types (machine state, assignments)."""
    machine: MachineState = {
        node_id: NUMANodeState(
            node.number_of_assignments,
            {
                name: MemoryTable(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
                for name, t in node.memory_map.items()
            },
            list(node.cells),
        )
        for node_id, node in resp.machine_state.items()
    }
    assignments: Assignments = {
        pod: {
            ctr: [Block(tuple(b.numa_affinity), b.type, b.size) for b in blocks.blocks]
            for ctr, blocks in entry.containers.items()
        }
        for pod, entry in resp.entries.items()
    }
    return machine, assignments


class NumamemClient:
    """One channel to a daemon; thread-safe like the grpc channel it wraps."""

    def __init__(
        self,
        socket: str = DEFAULT_SOCKET,
        timeout: float = 10.0,
        channel: grpc.Channel | None = None,
    ) -> None:
        self.target = f"unix://{os.path.abspath(socket)}" if channel is None else "<channel>"
        self._channel = channel or grpc.insecure_channel(self.target)
        self.timeout = timeout
        self.topology = topology_pb2_grpc.TopologyStub(self._channel)
        self.memory = memorymanager_pb2_grpc.MemoryManagerStub(self._channel)
        self.reader = metacache_pb2_grpc.MetaReaderStub(self._channel)
        self.writer = metacache_pb2_grpc.MetaWriterStub(self._channel)
        self.health = health_pb2_grpc.HealthStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> NumamemClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _md(self, request_id: str | None) -> tuple[tuple[str, str], ...]:
        return (("x-request-id", request_id or uuid.uuid4().hex[:16]),)

    # --- health and topology ------------------------------------------------

    def check_health(self, service: str = "", request_id: str | None = None) -> int:
        """The ``HealthCheckResponse.ServingStatus`` of ``service`` ("" = overall)."""
        resp = self.health.Check(
            health_pb2.HealthCheckRequest(service=service),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        status: int = resp.status
        return status

    def get_machine_info(self, request_id: str | None = None) -> topology_pb2.MachineInfo:
        return self.topology.GetMachineInfo(
            topology_pb2.GetMachineInfoRequest(),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    # --- memory manager -----------------------------------------------------

    def allocate(
        self,
        pod: memorymanager_pb2.Pod,
        container_name: str,
        affinity: memorymanager_pb2.TopologyHint | None = None,
        request_id: str | None = None,
    ) -> memorymanager_pb2.AllocateResponse:
        req = memorymanager_pb2.AllocateRequest(pod=pod, container_name=container_name)
        if affinity is not None:
            req.affinity.CopyFrom(affinity)
        return self.memory.Allocate(req, timeout=self.timeout, metadata=self._md(request_id))

    def add_container(
        self,
        pod: memorymanager_pb2.Pod,
        container_name: str,
        container_id: str,
        request_id: str | None = None,
    ) -> None:
        self.memory.AddContainer(
            memorymanager_pb2.AddContainerRequest(
                pod=pod, container_name=container_name, container_id=container_id
            ),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def remove_container(self, container_id: str, request_id: str | None = None) -> None:
        self.memory.RemoveContainer(
            memorymanager_pb2.RemoveContainerRequest(container_id=container_id),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def get_topology_hints(
        self, pod: memorymanager_pb2.Pod, container_name: str, request_id: str | None = None
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        return self.memory.GetTopologyHints(
            memorymanager_pb2.GetTopologyHintsRequest(pod=pod, container_name=container_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def get_pod_topology_hints(
        self, pod: memorymanager_pb2.Pod, request_id: str | None = None
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        return self.memory.GetPodTopologyHints(
            memorymanager_pb2.GetPodTopologyHintsRequest(pod=pod),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def get_memory_numa_nodes(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> list[int]:
        resp = self.memory.GetMemoryNUMANodes(
            memorymanager_pb2.GetMemoryNUMANodesRequest(
                pod_uid=pod_uid, container_name=container_name
            ),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return list(resp.numa_nodes)

    def get_allocatable_memory(
        self, request_id: str | None = None
    ) -> list[memorymanager_pb2.MemoryBlock]:
        resp = self.memory.GetAllocatableMemory(
            memorymanager_pb2.GetAllocatableMemoryRequest(),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return list(resp.blocks)

    def get_memory(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> list[memorymanager_pb2.MemoryBlock]:
        resp = self.memory.GetMemory(
            memorymanager_pb2.GetMemoryRequest(pod_uid=pod_uid, container_name=container_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return list(resp.blocks)

    def get_state(self, request_id: str | None = None) -> memorymanager_pb2.GetStateResponse:
        return self.memory.GetState(
            memorymanager_pb2.GetStateRequest(), timeout=self.timeout, metadata=self._md(request_id)
        )

    def sync_active_pods(
        self, pods: Sequence[memorymanager_pb2.Pod], request_id: str | None = None
    ) -> list[common_pb2.ContainerRef]:
        resp = self.memory.SyncActivePods(
            memorymanager_pb2.SyncActivePodsRequest(pods=pods),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return list(resp.removed)

    def admit(
        self, pod: memorymanager_pb2.Pod, request_id: str | None = None
    ) -> memorymanager_pb2.AdmitResponse:
        return self.memory.Admit(
            memorymanager_pb2.AdmitRequest(pod=pod),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def explain(
        self, pod: memorymanager_pb2.Pod, request_id: str | None = None
    ) -> memorymanager_pb2.ExplainResponse:
        return self.memory.Explain(
            memorymanager_pb2.ExplainRequest(pod=pod),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    # --- metacache reader ---------------------------------------------------

    def get_container_entries(
        self, pod_uid: str, request_id: str | None = None
    ) -> dict[str, metacache_pb2.ContainerInfo]:
        resp = self.reader.GetContainerEntries(
            metacache_pb2.GetContainerEntriesRequest(pod_uid=pod_uid),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return dict(resp.containers)

    def get_container_info(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> metacache_pb2.ContainerInfo:
        return self.reader.GetContainerInfo(
            metacache_pb2.GetContainerInfoRequest(pod_uid=pod_uid, container_name=container_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def get_container_metric(
        self, pod_uid: str, container_name: str, metric_name: str, request_id: str | None = None
    ) -> metacache_pb2.GetContainerMetricResponse:
        return self.reader.GetContainerMetric(
            metacache_pb2.GetContainerMetricRequest(
                pod_uid=pod_uid, container_name=container_name, metric_name=metric_name
            ),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def list_containers(
        self, pod_uid: str = "", request_id: str | None = None
    ) -> Iterator[metacache_pb2.ContainerInfo]:
        return iter(
            self.reader.ListContainers(
                metacache_pb2.ListContainersRequest(pod_uid=pod_uid),
                timeout=self.timeout,
                metadata=self._md(request_id),
            )
        )

    def get_pool_info(
        self, pool_name: str, request_id: str | None = None
    ) -> metacache_pb2.PoolInfo:
        return self.reader.GetPoolInfo(
            metacache_pb2.GetPoolInfoRequest(pool_name=pool_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def get_pool_size(self, pool_name: str, request_id: str | None = None) -> int:
        resp = self.reader.GetPoolSize(
            metacache_pb2.GetPoolSizeRequest(pool_name=pool_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return int(resp.size)

    def list_pools(self, request_id: str | None = None) -> Iterator[metacache_pb2.PoolInfo]:
        return iter(
            self.reader.ListPools(
                metacache_pb2.ListPoolsRequest(),
                timeout=self.timeout,
                metadata=self._md(request_id),
            )
        )

    def get_region_info(
        self, region_name: str, request_id: str | None = None
    ) -> metacache_pb2.RegionInfo:
        return self.reader.GetRegionInfo(
            metacache_pb2.GetRegionInfoRequest(region_name=region_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def list_regions(self, request_id: str | None = None) -> Iterator[metacache_pb2.RegionInfo]:
        return iter(
            self.reader.ListRegions(
                metacache_pb2.ListRegionsRequest(),
                timeout=self.timeout,
                metadata=self._md(request_id),
            )
        )

    # --- metacache writer ---------------------------------------------------

    def add_container_info(
        self, info: metacache_pb2.ContainerInfo, request_id: str | None = None
    ) -> None:
        self.writer.AddContainer(
            metacache_pb2.AddContainerInfoRequest(
                pod_uid=info.pod_uid, container_name=info.container_name, info=info
            ),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def set_container_info(
        self, info: metacache_pb2.ContainerInfo, request_id: str | None = None
    ) -> None:
        self.writer.SetContainerInfo(
            metacache_pb2.SetContainerInfoRequest(
                pod_uid=info.pod_uid, container_name=info.container_name, info=info
            ),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def delete_container(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> None:
        self.writer.DeleteContainer(
            metacache_pb2.DeleteContainerRequest(pod_uid=pod_uid, container_name=container_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def remove_pod(self, pod_uid: str, request_id: str | None = None) -> None:
        self.writer.RemovePod(
            metacache_pb2.RemovePodRequest(pod_uid=pod_uid),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def delete_containers(
        self, request: metacache_pb2.DeleteContainersRequest, request_id: str | None = None
    ) -> list[common_pb2.ContainerRef]:
        resp = self.writer.DeleteContainers(
            request, timeout=self.timeout, metadata=self._md(request_id)
        )
        return list(resp.deleted)

    def update_containers(
        self, updates: Sequence[metacache_pb2.ContainerUpdate], request_id: str | None = None
    ) -> None:
        self.writer.UpdateContainers(
            metacache_pb2.UpdateContainersRequest(updates=updates),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def set_pool_info(self, info: metacache_pb2.PoolInfo, request_id: str | None = None) -> None:
        self.writer.SetPoolInfo(
            metacache_pb2.SetPoolInfoRequest(pool_name=info.pool_name, info=info),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def delete_pool(self, pool_name: str, request_id: str | None = None) -> None:
        self.writer.DeletePool(
            metacache_pb2.DeletePoolRequest(pool_name=pool_name),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def gc_pool_entries(self, living: Sequence[str], request_id: str | None = None) -> list[str]:
        resp = self.writer.GCPoolEntries(
            metacache_pb2.GCPoolEntriesRequest(living_pool_names=living),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
        return list(resp.deleted)

    def set_region_entries(
        self, entries: dict[str, metacache_pb2.RegionInfo], request_id: str | None = None
    ) -> None:
        self.writer.SetRegionEntries(
            metacache_pb2.SetRegionEntriesRequest(entries=entries),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )

    def set_region_info(
        self, info: metacache_pb2.RegionInfo, request_id: str | None = None
    ) -> None:
        self.writer.SetRegionInfo(
            metacache_pb2.SetRegionInfoRequest(region_name=info.region_name, info=info),
            timeout=self.timeout,
            metadata=self._md(request_id),
        )
