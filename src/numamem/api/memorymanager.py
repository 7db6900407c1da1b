"""``numamem.v1.MemoryManager``: the memory manager over gRPC.

The component builds the manager from the configuration at start-up
(:mod:`numamem.api.build`: any configuration error refuses start: reservations,
policy names, topology options), restores ``memory_manager_state`` in
:meth:`MemoryManagerComponent.start` (the daemon reports SERVING only afterwards)
and serves every RPC of the contract. Requests are validated by :mod:`numamem.api.validation` before they
reach the core; the manager serialises mutations itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import grpc

from numamem.api import rpclog
from numamem.api.build import build_manager, state_store
from numamem.api.containerids import container_ids_in_pod
from numamem.api.convert import (
    ISOLATION,
    add_blocks,
    admit_outcome_to_proto,
    answer_to_proto,
    blocks_to_proto,
    hint_to_proto,
    hints_to_proto,
    node_state_to_proto,
    pod_level_to_proto,
)
from numamem.api.hintinput import affinity_from_proto, other_providers_from_proto
from numamem.api.residency import ResidencyView
from numamem.api.resize import explain_resize_to_proto, resize_to_proto, resized_container
from numamem.api.validation import (
    ConvertedPods,
    check_string,
    container_in_pod,
    pod_from_proto,
)
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.mmstore import STATE_FILE
from numamem.config.model import Config, Limits
from numamem.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    LimitExceededError,
)
from numamem.logging import get_logger
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.search.explain import MAX_EXPLAINED_MASKS
from numamem.pod import Pod
from numamem.topology import Machine
from numamem.v1 import common_pb2, memorymanager_pb2, memorymanager_pb2_grpc

SERVICE_NAME = memorymanager_pb2.DESCRIPTOR.services_by_name["MemoryManager"].full_name
_log = get_logger("memorymanager")


REPLY_HEADROOM = 64 * 1024
"""Bytes of --max-message-bytes kept for what a hint reply holds besides the hints."""


def _deadline(context: grpc.ServicerContext) -> float | None:
    """The client's deadline as a :func:`time.monotonic` instant (None: the client set none)."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


class MemoryManagerServicer(memorymanager_pb2_grpc.MemoryManagerServicer):
    """Thin translation between protos and :class:`Manager`; no state of its own but the cache
    of converted pods."""

    def __init__(self, manager: Manager, machine: Machine, limits: Limits) -> None:
        self.manager = manager
        self.machine = machine
        self.limits = limits
        self._pods = ConvertedPods(machine, limits, gates=manager.policy.gates)
        self.on_admission: Callable[[bool, str], None] | None = None
        """Called after each admission with (admitted, reason); set by the metrics component."""
        self.residency: ResidencyView | None = None
        """GetResidency's and Explain's source; set by the wiring (:mod:`numamem.api.app`)."""

    def _pod(self, msg: memorymanager_pb2.Pod) -> Pod:
        return self._pods.get(msg)

    @property
    def _reply_bytes(self) -> int:
        """What hint lists may take of a reply (the rest of --max-message-bytes is headroom)."""
        return self.limits.max_message_bytes - REPLY_HEADROOM

    def Allocate(
        self, request: memorymanager_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.AllocateResponse:
        pod = self._pod(request.pod)
        name = container_in_pod(pod, request.container_name)
        affinity = (
            affinity_from_proto(request.affinity, self.machine)
            if request.HasField("affinity")
            else None
        )
        blocks = self.manager.allocate(pod, name, affinity, deadline=_deadline(context))
        response = memorymanager_pb2.AllocateResponse()
        add_blocks(response.blocks, blocks)
        return response

    def AllocatePod(
        self, request: memorymanager_pb2.AllocatePodRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.AllocatePodResponse:
        pod = self._pod(request.pod)
        affinity = (
            affinity_from_proto(request.affinity, self.machine)
            if request.HasField("affinity")
            else None
        )
        pod_blocks, containers = self.manager.allocate_pod(
            pod, affinity, deadline=_deadline(context)
        )
        resp = memorymanager_pb2.AllocatePodResponse()
        if pod_blocks is not None:
            resp.pod_blocks.blocks.extend(blocks_to_proto(pod_blocks))
            resp.pod_blocks.SetInParent()
        for name, blocks in containers.items():
            resp.containers[name].blocks.extend(blocks_to_proto(blocks))
            resp.containers[name].SetInParent()
        return resp

    def AddContainer(
        self, request: memorymanager_pb2.AddContainerRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.AddContainerResponse:
        pod = self._pod(request.pod)
        name = container_in_pod(pod, request.container_name)
        self.manager.add_container(pod, name, check_string(request.container_id, "container_id"))
        return memorymanager_pb2.AddContainerResponse()

    def RemoveContainer(
        self, request: memorymanager_pb2.RemoveContainerRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.RemoveContainerResponse:
        ref = self.manager.remove_container(check_string(request.container_id, "container_id"))
        rpclog.attach(**rpclog.container_fields(ref))  # the request names no pod
        return memorymanager_pb2.RemoveContainerResponse(found=ref is not None)

    def ReleasePod(
        self, request: memorymanager_pb2.ReleasePodRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.ReleasePodResponse:
        released = self.manager.release_pod(check_string(request.pod_uid, "pod_uid"))
        return memorymanager_pb2.ReleasePodResponse(
            released=[common_pb2.ContainerRef(pod_uid=p, container_name=c) for p, c in released]
        )

    def GetTopologyHints(
        self, request: memorymanager_pb2.GetTopologyHintsRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        pod = self._pod(request.pod)
        name = container_in_pod(pod, request.container_name)
        hints = self.manager.get_topology_hints(pod, name, deadline=_deadline(context))
        return hints_to_proto(hints, self.limits.max_topology_hints, max_bytes=self._reply_bytes)

    def GetPodTopologyHints(
        self, request: memorymanager_pb2.GetPodTopologyHintsRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetTopologyHintsResponse:
        pod = self._pod(request.pod)
        hints = self.manager.get_pod_topology_hints(pod, deadline=_deadline(context))
        return hints_to_proto(hints, self.limits.max_topology_hints, max_bytes=self._reply_bytes)

    def GetMemoryNUMANodes(
        self, request: memorymanager_pb2.GetMemoryNUMANodesRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetMemoryNUMANodesResponse:
        check_string(request.pod_uid, "pod_uid")
        check_string(request.container_name, "container_name")
        nodes = self.manager.get_memory_numa_nodes(request.pod_uid, request.container_name)
        return memorymanager_pb2.GetMemoryNUMANodesResponse(numa_nodes=nodes or ())

    def GetAllocatableMemory(
        self, request: memorymanager_pb2.GetAllocatableMemoryRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetAllocatableMemoryResponse:
        return memorymanager_pb2.GetAllocatableMemoryResponse(
            blocks=blocks_to_proto(self.manager.get_allocatable_memory())
        )

    def GetMemory(
        self, request: memorymanager_pb2.GetMemoryRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetMemoryResponse:
        check_string(request.pod_uid, "pod_uid")
        check_string(request.container_name, "container_name")
        blocks = self.manager.get_memory(request.pod_uid, request.container_name)
        isolation = self.manager.isolation_level(request.pod_uid, request.container_name)
        return memorymanager_pb2.GetMemoryResponse(
            blocks=blocks_to_proto(blocks), isolation=ISOLATION[isolation]
        )

    def GetPodMemory(
        self, request: memorymanager_pb2.GetPodMemoryRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetPodMemoryResponse:
        blocks = self.manager.get_pod_memory(check_string(request.pod_uid, "pod_uid"))
        return memorymanager_pb2.GetPodMemoryResponse(
            blocks=blocks_to_proto(blocks or []), allocated=blocks is not None
        )

    def GetState(
        self, request: memorymanager_pb2.GetStateRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.GetStateResponse:
        # The last committed version (state and pod names of one commit); no lock, no wait on
        # the disk.
        committed = self.manager.committed()
        state = committed.view
        resp = memorymanager_pb2.GetStateResponse(
            policy_name=self.manager.policy.name,
            topology_manager_policy=self.manager.topology_policy_name,
            topology_manager_scope=self.manager.topology_scope_name,
        )
        for node_id, node in state.machine_view().items():
            if node is not None:
                resp.machine_state[node_id].CopyFrom(node_state_to_proto(node))
        pod_entries = state.pod_entries()
        for pod_uid, containers in state.pods():
            entry = resp.entries[pod_uid]
            entry.namespace, entry.name = committed.names.get(pod_uid, ("", ""))
            pod_blocks = pod_entries.get(pod_uid)
            exclusive = state.exclusive_containers(pod_uid)
            for name, blocks in containers.items():
                entry.containers[name].blocks.extend(blocks_to_proto(blocks))
                entry.containers[name].isolation = ISOLATION[
                    podlevel.isolation_level(blocks, pod_blocks, exclusive, name)
                ]
            if pod_blocks is not None:
                entry.pod_blocks.blocks.extend(blocks_to_proto(pod_blocks))
                entry.pod_blocks.SetInParent()
        return resp

    def SyncActivePods(
        self, request: memorymanager_pb2.SyncActivePodsRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.SyncActivePodsResponse:
        if len(request.pods) > self.limits.max_pods:
            raise LimitExceededError(
                f"pods: {len(request.pods)} pods exceed --max-pods {self.limits.max_pods}"
            )
        pods = [
            pod_from_proto(p, self.machine, self.limits, f"pods[{i}]", self.manager.policy.gates)
            for i, p in enumerate(request.pods)
        ]
        uids = [p.uid for p in pods]
        if len(set(uids)) != len(uids):
            raise InvalidArgumentError("pods: duplicate pod uids")
        removed = self.manager.sync_active_pods(pods)
        return memorymanager_pb2.SyncActivePodsResponse(
            removed=[common_pb2.ContainerRef(pod_uid=p, container_name=c) for p, c in removed]
        )

    def Admit(
        self, request: memorymanager_pb2.AdmitRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.AdmitResponse:
        pod = self._pod(request.pod)
        others = other_providers_from_proto(request.other_providers, pod, self.machine)
        ids = container_ids_in_pod(pod, request.container_ids)
        outcome = self.manager.admit(pod, others, deadline=_deadline(context), container_ids=ids)
        result = outcome.result
        if self.on_admission is not None:
            self.on_admission(result.admitted, result.reason)
        response = admit_outcome_to_proto(pod, outcome)
        response.container_ids_recorded = result.admitted and bool(ids)
        return response

    def Explain(
        self, request: memorymanager_pb2.ExplainRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.ExplainResponse:
        pod = self._pod(request.pod)
        others = other_providers_from_proto(request.other_providers, pod, self.machine)
        explanation = self.manager.explain(pod, others, deadline=_deadline(context))
        resp = memorymanager_pb2.ExplainResponse(
            topology_manager_policy=explanation.topology_policy,
            topology_manager_scope=explanation.topology_scope,
            decision=admit_outcome_to_proto(pod, explanation.outcome),
        )
        for ctr in explanation.containers:
            hints = hints_to_proto(ctr.hints, MAX_EXPLAINED_MASKS, MAX_EXPLAINED_MASKS).hints
            msg = resp.containers.add(
                container_name=ctr.container_name,
                requested=ctr.explanation.requested,
                merged=hint_to_proto(ctr.merged),
                admitted=ctr.admitted,
                note=ctr.explanation.note,
                omitted_masks=ctr.explanation.omitted_masks,
                omitted_hints=sum(h.omitted for h in hints.values()),
            )
            msg.hints.MergeFrom(hints)
            for provider, answer in ctr.others:
                msg.other_providers.add(
                    provider=provider, hints=answer_to_proto(answer, MAX_EXPLAINED_MASKS)
                )
            msg.masks.extend(
                memorymanager_pb2.MaskVerdict(
                    numa_nodes=v.numa_nodes,
                    offered=v.offered,
                    preferred=v.preferred,
                    reason=v.reason,
                )
                for v in ctr.explanation.masks
            )
        if explanation.pod_level is not None:
            resp.pod_level.CopyFrom(pod_level_to_proto(explanation.pod_level))
        if self.residency is not None:
            resp.residency.extend(self.residency.for_pod(pod.uid))
        return resp

    def Resize(
        self, request: memorymanager_pb2.ResizeRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.ResizeResponse:
        pod = self._pod(request.pod)
        name = resized_container(pod, request.container_name)
        decided = self.manager.resize(pod, name, deadline=_deadline(context))
        return resize_to_proto(decided)

    def ExplainResize(
        self, request: memorymanager_pb2.ResizeRequest, context: grpc.ServicerContext
    ) -> memorymanager_pb2.ExplainResizeResponse:
        pod = self._pod(request.pod)
        name = resized_container(pod, request.container_name)
        decided = self.manager.explain_resize(pod, name, deadline=_deadline(context))
        return explain_resize_to_proto(decided, self.manager.topology_policy_name)

    def GetResidency(
        self, request: memorymanager_pb2.GetResidencyRequest, context: grpc.ServicerContext
    ) -> Iterator[memorymanager_pb2.ContainerResidency]:
        if self.residency is None:
            raise FailedPreconditionError("this server does not collect residency")
        yield from self.residency.get(request.pod_uid, request.container_name)


class MemoryManagerComponent:
    """Builds the manager at construction (config errors refuse start), restores in load(),
    writes the initial state in start()."""

    service_names: Sequence[str] = (SERVICE_NAME,)

    def __init__(self, config: Config, machine: Machine, fs: FileSystem = REAL) -> None:
        self.store = state_store(config, fs)
        self.manager = build_manager(config, machine, self.store)
        self.servicer = MemoryManagerServicer(self.manager, machine, config.limits)

    def register(self, server: grpc.Server) -> None:
        memorymanager_pb2_grpc.add_MemoryManagerServicer_to_server(self.servicer, server)

    def liveness_locks(self) -> list[tuple[str, threading.Lock]]:
        """The writer lock the daemon's watchdog probe takes (:mod:`numamem.api.watchdog`)."""
        return [("memory manager", self.manager.writer_lock)]

    def manager_store_observers(self) -> list[Callable[[float, bool], None]]:
        """The write observers of the memory manager's store."""
        return self.store.observers

    def watch_durability(self, report: Callable[[str, str | None], None]) -> None:
        self.store.durability_observers.append(lambda problem: report(STATE_FILE, problem))

    def load(self) -> None:
        self.manager.load()

    def start(self) -> None:
        self.manager.finish_start()
        state = self.manager.reader()
        _log.info(
            "memory manager restored",
            policy=self.manager.policy.name,
            pods=state.pod_count(),
            container_ids=len(self.manager.container_map()),
        )

    def stop(self) -> None:
        self.store.close()
