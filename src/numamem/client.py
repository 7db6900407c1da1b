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
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from numamem.config.model import DEFAULT_SOCKET
from numamem.errors import ERROR_DOMAIN
from numamem.v1 import (
    common_pb2,
    memorymanager_pb2,
    memorymanager_pb2_grpc,
    metacache_pb2,
    metacache_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

__all__ = ["NumamemClient", "error_reason"]


def error_reason(err: grpc.RpcError) -> str | None:
    """The ``google.rpc.ErrorInfo`` reason of a failed numamem RPC (docs/api.md), or None.

    Stable across releases, unlike the message text: branch on this.
    """
    details = rpc_status.from_call(cast(grpc.Call, err))
    for detail in details.details if details is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            reason: str = info.reason
            return reason
    return None


R = TypeVar("R")


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

    def call(
        self,
        method: Callable[..., R],
        request: Any,
        request_id: str | None = None,
        *,
        timeout: float | None = None,
    ) -> R:
        """``method(request)`` with a deadline (``timeout`` seconds, default the client's) and
        an ``x-request-id``.

        ``method`` is a stub's multicallable (``client.memory.Admit``); the
        typed methods below are this call plus the request they build.
        """
        metadata = (("x-request-id", request_id or uuid.uuid4().hex[:16]),)
        return method(
            request, timeout=self.timeout if timeout is None else timeout, metadata=metadata
        )

    # --- health and topology ------------------------------------------------

    def check_health(self, service: str = "", request_id: str | None = None) -> int:
        """The ``HealthCheckResponse.ServingStatus`` of ``service`` ("" = overall)."""
        req = health_pb2.HealthCheckRequest(service=service)
        status: int = self.call(self.health.Check, req, request_id).status
        return status

    def get_machine_info(self, request_id: str | None = None) -> topology_pb2.MachineInfo:
        return self.call(
            self.topology.GetMachineInfo, topology_pb2.GetMachineInfoRequest(), request_id
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
        return self.call(self.memory.Allocate, req, request_id)

    def allocate_pod(
        self,
        pod: memorymanager_pb2.Pod,
        affinity: memorymanager_pb2.TopologyHint | None = None,
        request_id: str | None = None,
    ) -> memorymanager_pb2.AllocatePodResponse:
        """Pin a pod that sets pod-level resources as a whole (AllocatePod, KEP-5526)."""
        req = memorymanager_pb2.AllocatePodRequest(pod=pod)
        if affinity is not None:
            req.affinity.CopyFrom(affinity)
        return self.call(self.memory.AllocatePod, req, request_id)

    def add_container(
        self,
        pod: memorymanager_pb2.Pod,
        container_name: str,
        container_id: str,
        request_id: str | None = None,
    ) -> None:
        req = memorymanager_pb2.AddContainerRequest(
            pod=pod, container_name=container_name, container_id=container_id
        )
        self.call(self.memory.AddContainer, req, request_id)

    def remove_container(self, container_id: str, request_id: str | None = None) -> bool:
        """Release a container by runtime id; False when the id was unknown (nothing to do)."""
        req = memorymanager_pb2.RemoveContainerRequest(container_id=container_id)
        return bool(self.call(self.memory.RemoveContainer, req, request_id).found)

    def get_topology_hints(
        self, pod: memorymanager_pb2.Pod, container_name: str, request_id: str | None = None
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        req = memorymanager_pb2.GetTopologyHintsRequest(pod=pod, container_name=container_name)
        return self.call(self.memory.GetTopologyHints, req, request_id)

    def get_pod_topology_hints(
        self, pod: memorymanager_pb2.Pod, request_id: str | None = None
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        req = memorymanager_pb2.GetPodTopologyHintsRequest(pod=pod)
        return self.call(self.memory.GetPodTopologyHints, req, request_id)

    def get_memory_numa_nodes(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> list[int]:
        req = memorymanager_pb2.GetMemoryNUMANodesRequest(
            pod_uid=pod_uid, container_name=container_name
        )
        return list(self.call(self.memory.GetMemoryNUMANodes, req, request_id).numa_nodes)

    def get_allocatable_memory(
        self, request_id: str | None = None
    ) -> list[memorymanager_pb2.MemoryBlock]:
        req = memorymanager_pb2.GetAllocatableMemoryRequest()
        return list(self.call(self.memory.GetAllocatableMemory, req, request_id).blocks)

    def get_memory(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> list[memorymanager_pb2.MemoryBlock]:
        req = memorymanager_pb2.GetMemoryRequest(pod_uid=pod_uid, container_name=container_name)
        return list(self.call(self.memory.GetMemory, req, request_id).blocks)

    def get_pod_memory(
        self, pod_uid: str, request_id: str | None = None
    ) -> memorymanager_pb2.GetPodMemoryResponse:
        req = memorymanager_pb2.GetPodMemoryRequest(pod_uid=pod_uid)
        return self.call(self.memory.GetPodMemory, req, request_id)

    def get_state(self, request_id: str | None = None) -> memorymanager_pb2.GetStateResponse:
        return self.call(self.memory.GetState, memorymanager_pb2.GetStateRequest(), request_id)

    def sync_active_pods(
        self, pods: Sequence[memorymanager_pb2.Pod], request_id: str | None = None
    ) -> list[common_pb2.ContainerRef]:
        req = memorymanager_pb2.SyncActivePodsRequest(pods=pods)
        return list(self.call(self.memory.SyncActivePods, req, request_id).removed)

    def release_pod(
        self, pod_uid: str, request_id: str | None = None
    ) -> list[common_pb2.ContainerRef]:
        """Release every container of one pod (ReleasePod); returns what was released."""
        req = memorymanager_pb2.ReleasePodRequest(pod_uid=pod_uid)
        return list(self.call(self.memory.ReleasePod, req, request_id).released)

    def admit(
        self,
        pod: memorymanager_pb2.Pod,
        request_id: str | None = None,
        other_providers: Sequence[memorymanager_pb2.ProviderHints] = (),
        container_ids: Mapping[str, str] | None = None,
    ) -> memorymanager_pb2.AdmitResponse:
        """Admit ``pod``; ``other_providers`` are other hint providers' hints to merge with;
        ``container_ids`` (name -> runtime id) are recorded with an admitted pod in the same
        write, as AddContainer of each would record them."""
        req = memorymanager_pb2.AdmitRequest(
            pod=pod, other_providers=other_providers, container_ids=container_ids or {}
        )
        return self.call(self.memory.Admit, req, request_id)

    def explain(
        self,
        pod: memorymanager_pb2.Pod,
        request_id: str | None = None,
        other_providers: Sequence[memorymanager_pb2.ProviderHints] = (),
    ) -> memorymanager_pb2.ExplainResponse:
        req = memorymanager_pb2.ExplainRequest(pod=pod, other_providers=other_providers)
        return self.call(self.memory.Explain, req, request_id)

    def resize(
        self, pod: memorymanager_pb2.Pod, container_name: str = "", request_id: str | None = None
    ) -> memorymanager_pb2.ResizeResponse:
        """Resize a container's pinned memory in place to its resources in ``pod``."""
        req = memorymanager_pb2.ResizeRequest(pod=pod, container_name=container_name)
        return self.call(self.memory.Resize, req, request_id)

    def explain_resize(
        self, pod: memorymanager_pb2.Pod, container_name: str = "", request_id: str | None = None
    ) -> memorymanager_pb2.ExplainResizeResponse:
        """What :meth:`resize` would decide now, and why; changes nothing."""
        req = memorymanager_pb2.ResizeRequest(pod=pod, container_name=container_name)
        return self.call(self.memory.ExplainResize, req, request_id)

    def get_residency(
        self, pod_uid: str = "", container_name: str = "", request_id: str | None = None
    ) -> list[memorymanager_pb2.ContainerResidency]:
        """Where pinned containers' memory is (the last collector round): every pinned
        container, a pod's (``pod_uid``) or one (both)."""
        req = memorymanager_pb2.GetResidencyRequest(pod_uid=pod_uid, container_name=container_name)
        return list(self.call(self.memory.GetResidency, req, request_id))

    # --- metacache reader ---------------------------------------------------

    def get_container_entries(
        self, pod_uid: str, request_id: str | None = None
    ) -> dict[str, metacache_pb2.ContainerInfo]:
        req = metacache_pb2.GetContainerEntriesRequest(pod_uid=pod_uid)
        return dict(self.call(self.reader.GetContainerEntries, req, request_id).containers)

    def get_container_info(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> metacache_pb2.ContainerInfo:
        req = metacache_pb2.GetContainerInfoRequest(pod_uid=pod_uid, container_name=container_name)
        return self.call(self.reader.GetContainerInfo, req, request_id)

    def get_container_metric(
        self, pod_uid: str, container_name: str, metric_name: str, request_id: str | None = None
    ) -> metacache_pb2.GetContainerMetricResponse:
        req = metacache_pb2.GetContainerMetricRequest(
            pod_uid=pod_uid, container_name=container_name, metric_name=metric_name
        )
        return self.call(self.reader.GetContainerMetric, req, request_id)

    def list_containers(
        self, pod_uid: str = "", request_id: str | None = None
    ) -> Iterator[metacache_pb2.ContainerInfo]:
        req = metacache_pb2.ListContainersRequest(pod_uid=pod_uid)
        return iter(self.call(self.reader.ListContainers, req, request_id))

    def get_pool_info(
        self, pool_name: str, request_id: str | None = None
    ) -> metacache_pb2.PoolInfo:
        req = metacache_pb2.GetPoolInfoRequest(pool_name=pool_name)
        return self.call(self.reader.GetPoolInfo, req, request_id)

    def get_pool_size(self, pool_name: str, request_id: str | None = None) -> int:
        req = metacache_pb2.GetPoolSizeRequest(pool_name=pool_name)
        return int(self.call(self.reader.GetPoolSize, req, request_id).size)

    def list_pools(self, request_id: str | None = None) -> Iterator[metacache_pb2.PoolInfo]:
        return iter(self.call(self.reader.ListPools, metacache_pb2.ListPoolsRequest(), request_id))

    def get_region_info(
        self, region_name: str, request_id: str | None = None
    ) -> metacache_pb2.RegionInfo:
        req = metacache_pb2.GetRegionInfoRequest(region_name=region_name)
        return self.call(self.reader.GetRegionInfo, req, request_id)

    def list_regions(self, request_id: str | None = None) -> Iterator[metacache_pb2.RegionInfo]:
        req = metacache_pb2.ListRegionsRequest()
        return iter(self.call(self.reader.ListRegions, req, request_id))

    # --- metacache writer ---------------------------------------------------

    def add_container_info(
        self, info: metacache_pb2.ContainerInfo, request_id: str | None = None
    ) -> None:
        req = metacache_pb2.AddContainerInfoRequest(
            pod_uid=info.pod_uid, container_name=info.container_name, info=info
        )
        self.call(self.writer.AddContainer, req, request_id)

    def set_container_info(
        self, info: metacache_pb2.ContainerInfo, request_id: str | None = None
    ) -> None:
        req = metacache_pb2.SetContainerInfoRequest(
            pod_uid=info.pod_uid, container_name=info.container_name, info=info
        )
        self.call(self.writer.SetContainerInfo, req, request_id)

    def delete_container(
        self, pod_uid: str, container_name: str, request_id: str | None = None
    ) -> None:
        req = metacache_pb2.DeleteContainerRequest(pod_uid=pod_uid, container_name=container_name)
        self.call(self.writer.DeleteContainer, req, request_id)

    def remove_pod(self, pod_uid: str, request_id: str | None = None) -> None:
        """MetaWriter.RemovePod: the pod's metacache entries (not its memory)."""
        self.call(
            self.writer.RemovePod, metacache_pb2.RemovePodRequest(pod_uid=pod_uid), request_id
        )

    def delete_containers(
        self, request: metacache_pb2.DeleteContainersRequest, request_id: str | None = None
    ) -> list[common_pb2.ContainerRef]:
        return list(self.call(self.writer.DeleteContainers, request, request_id).deleted)

    def update_containers(
        self, updates: Sequence[metacache_pb2.ContainerUpdate], request_id: str | None = None
    ) -> None:
        req = metacache_pb2.UpdateContainersRequest(updates=updates)
        self.call(self.writer.UpdateContainers, req, request_id)

    def set_pool_info(self, info: metacache_pb2.PoolInfo, request_id: str | None = None) -> None:
        req = metacache_pb2.SetPoolInfoRequest(pool_name=info.pool_name, info=info)
        self.call(self.writer.SetPoolInfo, req, request_id)

    def delete_pool(self, pool_name: str, request_id: str | None = None) -> None:
        req = metacache_pb2.DeletePoolRequest(pool_name=pool_name)
        self.call(self.writer.DeletePool, req, request_id)

    def gc_pool_entries(self, living: Sequence[str], request_id: str | None = None) -> list[str]:
        req = metacache_pb2.GCPoolEntriesRequest(living_pool_names=living)
        return list(self.call(self.writer.GCPoolEntries, req, request_id).deleted)

    def set_region_entries(
        self, entries: dict[str, metacache_pb2.RegionInfo], request_id: str | None = None
    ) -> None:
        req = metacache_pb2.SetRegionEntriesRequest(entries=entries)
        self.call(self.writer.SetRegionEntries, req, request_id)

    def set_region_info(
        self, info: metacache_pb2.RegionInfo, request_id: str | None = None
    ) -> None:
        req = metacache_pb2.SetRegionInfoRequest(region_name=info.region_name, info=info)
        self.call(self.writer.SetRegionInfo, req, request_id)
