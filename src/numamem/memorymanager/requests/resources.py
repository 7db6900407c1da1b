"""What a container or a pod asks the memory manager for (kubelet ``getRequestedResources``).

With pod-level resource managers on (``pod_level``: the ``PodLevelResourceManagers`` gate)
and a pod that sets pod-level resources, the pod asks for its ``spec.resources`` requests
(its budget), and a container asks for exclusive memory only when it is
equivalent-Guaranteed; the others share the pod's pool and ask for nothing themselves.
"""

from __future__ import annotations

from numamem.errors import AllocationError
from numamem.memtypes import is_memory_resource
from numamem.pod import Container, Pod, is_container_equivalent_guaranteed
from numamem.quantity import Quantity

Requested = dict[str, int]
"""Memory type (``memory``, ``hugepages-<size>``) -> bytes."""


def container_requested_resources(
    container: Container, pod: Pod | None = None, pod_level: bool = False
) -> Requested:
    """``getContainerRequestedResources``: memory and hugepages requests in bytes, zeros kept;
    ``{}`` for a container of ``pod`` that may not have exclusive memory of its own (see the
    module docstring)."""
    if (
        pod_level
        and pod is not None
        and pod.pod_level_resources_set
        and not is_container_equivalent_guaranteed(container)
    ):
        return {}
    result: Requested = {}
    for name, q in container.requests.items():
        if not is_memory_resource(name):
            continue
        result[name] = _bytes(q)
    return result


def _bytes(q: Quantity) -> int:
    value = q.value
    # A whole value is its numerator: compared as an int, not as a Fraction (several times faster).
    whole = value.numerator
    if value.denominator != 1 or not (-(1 << 63) <= whole < (1 << 63)):
        raise AllocationError("[memorymanager] failed to represent quantity as int64")
    if whole < 0:
        raise AllocationError(f"[memorymanager] a memory request may not be negative, got {q}")
    return whole


def pod_requested_resources(pod: Pod, pod_level: bool = False) -> Requested:
    """``getPodRequestedResources`` with the sidecar rules of KEP-753; with ``pod_level`` and
    pod-level resources set, the pod-level requests of memory and hugepages above 0.

    A type requested only by init containers is dropped (upstream quirk 6; kubernetes#140814,
    open: the released code drops it, and so does numamem). Pod-level requests have no such
    gap: the API server defaults a pod-level hugepage limit, and with it the request, from
    the containers' (``with_defaulted_pod_resources``).
    """
    if pod_level and pod.pod_level_resources_set:
        budget: Requested = {}
        for name, q in pod.requests.items():
            if is_memory_resource(name):
                size = _bytes(q)
                if size > 0:
                    budget[name] = size
        return budget
    init_max: Requested = {}
    sidecar_sum: Requested = {}
    for ctr in pod.init_containers:
        for name, size in container_requested_resources(ctr).items():
            init_max.setdefault(name, 0)
            if ctr.restartable:
                sidecar_sum[name] = sidecar_sum.get(name, 0) + size
            elif sidecar_sum.get(name, 0) + size > init_max[name]:
                init_max[name] = sidecar_sum.get(name, 0) + size
    app: Requested = {}
    for ctr in pod.containers:
        for name, size in container_requested_resources(ctr).items():
            app[name] = app.get(name, 0) + size
    return {name: max(app[name] + sidecar_sum.get(name, 0), init_max.get(name, 0)) for name in app}
