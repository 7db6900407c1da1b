"""Resize and ExplainResize (issue 30) as messages: the core's decision to the wire."""

from __future__ import annotations

from numamem.api.convert import blocks_to_proto
from numamem.api.validation import container_in_pod
from numamem.errors import InvalidArgumentError, quote
from numamem.memorymanager.resize import decide as resizing
from numamem.pod import Pod
from numamem.v1 import common_pb2, memorymanager_pb2

ACTIONS = {
    resizing.UNCHANGED: memorymanager_pb2.RESIZE_UNCHANGED,
    resizing.NOT_PINNED: memorymanager_pb2.RESIZE_NOT_PINNED,
    resizing.GROWN: memorymanager_pb2.RESIZE_GROWN_IN_GROUP,
    resizing.EXTENDED: memorymanager_pb2.RESIZE_GROWN_BY_EXTENSION,
    resizing.SHRUNK: memorymanager_pb2.RESIZE_SHRUNK,
    resizing.REPARTITIONED: memorymanager_pb2.RESIZE_REPARTITIONED,
}


def resized_container(pod: Pod, name: str) -> str:
    """``container_name``; when it is empty, "" (the pod itself) for a pod that sets pod-level
    resources, else the pod's only container."""
    if name:
        return container_in_pod(pod, name)
    if pod.pod_level_resources_set:
        return ""
    names = [c.name for c in pod.all_containers()]
    if len(names) != 1:
        raise InvalidArgumentError(
            f"container_name: empty, and pod {quote(pod.uid)} has {len(names)} containers "
            f"({', '.join(quote(n) for n in names)}); fix: name the container to resize"
        )
    return names[0]


def resize_to_proto(decided: resizing.Resize) -> memorymanager_pb2.ResizeResponse:
    budget = decided.pod_level
    resp = memorymanager_pb2.ResizeResponse(
        action=ACTIONS[decided.action],
        blocks=blocks_to_proto(decided.blocks),
        previous_memory=decided.old_size,
        memory=decided.new_size,
        previous_numa_nodes=decided.old_nodes,
        numa_nodes=decided.nodes,
        affinity_changed=decided.nodes != decided.old_nodes,
        moved=[common_pb2.ContainerRef(pod_uid=p, container_name=c) for p, c in decided.moved],
    )
    if budget is not None:
        resp.pod_level = True
        resp.pod_blocks.extend(blocks_to_proto(budget.blocks))
        resp.previous_pod_memory = budget.old_size
        resp.pod_memory = budget.new_size
    return resp


def explain_resize_to_proto(
    decided: resizing.Resize, topology_policy: str
) -> memorymanager_pb2.ExplainResizeResponse:
    resp = memorymanager_pb2.ExplainResizeResponse(topology_manager_policy=topology_policy)
    if decided.refusal is not None:
        resp.refusal = decided.refusal.verdict
        resp.message = str(decided.refusal)
    else:
        resp.decision.CopyFrom(resize_to_proto(decided))
    extension = decided.extension
    if extension is not None:
        resp.candidates.extend(
            memorymanager_pb2.SupersetCandidate(numa_nodes=c.nodes, taken=c.taken, reason=c.reason)
            for c in extension.candidates
        )
        resp.omitted_candidates = extension.omitted
        resp.notes.extend(extension.notes)
    return resp
