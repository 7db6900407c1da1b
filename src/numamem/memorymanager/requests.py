"""What a container or a pod asks the memory manager for (kubelet ``getRequestedResources``)."""

from __future__ import annotations

from numamem.errors import AllocationError
from numamem.memtypes import is_memory_resource
from numamem.pod import Container, Pod
from numamem.quantity import Quantity

Requested = dict[str, int]
"""Memory type (``memory``, ``hugepages-<size>``) -> bytes."""


def container_requested_resources(container: Container) -> Requested:
    """``getRequestedResources``: memory and hugepages requests in bytes, zeros kept."""
    result: Requested = {}
    for name, q in container.requests.items():
        if not is_memory_resource(name):
            continue
        result[name] = _bytes(q)
    return result


def _bytes(q: Quantity) -> int:
    if q.value.denominator != 1 or not (-(1 << 63) <= q.value < (1 << 63)):
        raise AllocationError("[memorymanager] failed to represent quantity as int64")
    if q.value < 0:
        raise AllocationError(f"[memorymanager] a memory request may not be negative, got {q}")
    return int(q.value)


def pod_requested_resources(pod: Pod) -> Requested:
    """``getPodRequestedResources`` with the sidecar rules of KEP-753.

    A type requested only by init containers is dropped (upstream quirk 6).
    """
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
