"""Why an admitted container has no memory pinned: a stable reason and a message.

Admission can succeed and pin nothing (the kubelet admits such a pod and runs it in the
node's shared memory): the None policy, a pod that is not Guaranteed, a pod that sets
pod-level resources with a gate off, a container that shares a pod-level budget the
topology manager does not allocate as a whole, a container that requests no memory. The
reasons follow the Static policy's own tests in :meth:`StaticPolicy.allocate
<numamem.memorymanager.policy.static.StaticPolicy.allocate>`, in its order, from what the
daemon knows (the policy, the QoS class, the requests); the codes are API (the
``not_pinned_reason`` of ``ContainerAdmission``), the messages are for people.
"""

from __future__ import annotations

from dataclasses import dataclass

from numamem.errors import AllocationError, quote
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.requests.resources import container_requested_resources
from numamem.pod import GUARANTEED, Container, Pod, not_guaranteed_because, pod_qos

POLICY_NONE = "POLICY_NONE"
NOT_GUARANTEED = "NOT_GUARANTEED"
POD_LEVEL_GATES_OFF = "POD_LEVEL_GATES_OFF"
POD_LEVEL_SHARED = "POD_LEVEL_SHARED"
NOT_ALLOCATED = "NOT_ALLOCATED"
"""None of the above, e.g. a container that requests no memory in a pod the daemon takes for
Guaranteed: not reached over the API (a Guaranteed pod's containers all have memory limits,
and the daemon refuses a ``qos_class`` its requests contradict)."""

REASONS = (POLICY_NONE, NOT_GUARANTEED, POD_LEVEL_GATES_OFF, POD_LEVEL_SHARED, NOT_ALLOCATED)


@dataclass(frozen=True)
class NotPinned:
    reason: str
    """One of :data:`REASONS`: stable, for programs."""
    message: str


def why_not_pinned(policy: Policy, pod: Pod, container: Container) -> NotPinned:
    """Why admitting ``pod`` under ``policy`` pinned nothing for ``container`` (which the
    caller found without blocks after an admission that succeeded). Pure."""
    name = quote(container.name)
    if not policy.can_allocate_exclusively():
        return NotPinned(
            POLICY_NONE,
            f"the memory manager policy is {policy.name}: it pins no memory "
            "(--memory-manager-policy Static pins the memory of Guaranteed pods)",
        )
    qos = pod_qos(pod)
    if qos != GUARANTEED:
        because = not_guaranteed_because(pod)
        return NotPinned(
            NOT_GUARANTEED,
            f"the pod's QoS class is {qos}{f' ({because})' if because else ''}; only "
            "Guaranteed pods get memory pinned (requests equal to limits for cpu and memory)",
        )
    gates = policy.gates
    if pod.pod_level_resources_set and not gates.pod_level:
        return NotPinned(
            POD_LEVEL_GATES_OFF,
            "the pod sets pod-level resources (spec.resources) and the feature gates "
            "PodLevelResources and PodLevelResourceManagers are not both on: the memory "
            'manager leaves it alone, as the kubelet does ("Allocation skipped, pod is using '
            'pod-level resources")',
        )
    try:
        requested = container_requested_resources(container, pod, gates.pod_level_resource_managers)
    except AllocationError as err:
        return NotPinned(NOT_ALLOCATED, f"container {name}: {err}")
    if not requested and pod.pod_level_resources_set:
        own = (
            "is not equivalent-Guaranteed (its own cpu and memory requests do not equal its limits)"
            if container.requests
            else "requests nothing of its own"
        )
        return NotPinned(
            POD_LEVEL_SHARED,
            f"container {name} {own}: it shares the pod's pod-level resources, which are "
            "pinned only when the pod is allocated as a whole (--topology-manager-scope pod, "
            "a topology manager policy other than none); it runs in the node's shared memory",
        )
    if not requested:
        return NotPinned(NOT_ALLOCATED, f"container {name} requests no memory or hugepages")
    return NotPinned(NOT_ALLOCATED, f"the memory manager holds no memory for container {name}")
