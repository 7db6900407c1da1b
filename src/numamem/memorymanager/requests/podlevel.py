"""Pod-level resources (KEP-5526, ``PodLevelResourceManagers``): one allocation for a whole pod.

A Guaranteed pod whose ``spec.resources`` sets memory is, in the topology manager's pod
scope, given **one** NUMA-aligned allocation of its pod-level requests (its *budget*).
Inside it, containers that are equivalent-Guaranteed (their own cpu and memory requests
equal their limits) get exclusive blocks of their own requests; the others share what is
left (the *pool*). Pure functions of the pod, the budget and the chosen NUMA nodes:

* :func:`validate_pod_scope_resources` is the kubelet's ``validatePodScopeResources`` (an
  empty shared pool refuses the pod with reason ``EmptyPodSharedPoolError``);
* :func:`partition` is the partition of ``AllocatePod``: init containers in spec order
  (a regular init container without a request of its own gets the budget minus the
  sidecars' exclusive memory so far; a sidecar without one shares the pool; one with its
  own request gets it, and a sidecar's is taken from the budget for good), then the app
  containers (their own requests are taken from the pool), then the pool itself (what
  is left of the budget, the values above 0) for every container without blocks;
* :func:`accounted_assignments` is what the machine state accounts for: the pod-level
  blocks of a pod allocated as a whole (the pod's budget is reserved once, its containers'
  blocks are not reserved again), the containers' blocks of every other pod;
* :func:`isolation_level` is ``GetResourceIsolationLevel`` (``host``, ``pod``, ``container``).

Block order within a container: memory first, then hugepages by name (Go's map order is
random; the kubelet's tests compare blocks as multisets). Where several memory types fail
a check, the message names the first in that order (Go names a random one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from numamem.config.model import FeatureGates
from numamem.errors import AllocationError, EmptyPodSharedPoolError, quote
from numamem.memtypes import MEMORY, Block
from numamem.pod import Container, Pod

HOST = "host"
"""The container's memory is the node's shared pool (it has no blocks)."""
POD = "pod"
"""The container shares its pod's pool: isolated from other pods, not from its pod's containers."""
CONTAINER = "container"
"""The container's memory is its own."""

ExclusiveOf = Callable[[Container], Mapping[str, int]]
"""A container's exclusive request (``getContainerRequestedResources`` under the gate)."""


def allocated_as_pod(gates: FeatureGates, pod: Pod) -> bool:
    """Whether the topology manager's pod scope allocates ``pod`` as a whole (``AllocatePod``):
    both pod-level gates on and pod-level resources set."""
    return gates.pod_level and pod.pod_level_resources_set


def resource_order(name: str) -> tuple[bool, str]:
    """Block order: memory first, then hugepages by name."""
    return (name != MEMORY, name)


def accounted_assignments(
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
) -> dict[str, Mapping[str, Sequence[Block]]]:
    """The blocks the machine state reserves, per pod: a pod with pod-level blocks by those
    (under the container name "", as the kubelet's ``(pod: %s, container: )`` messages name
    them), every other pod by its containers' blocks. A pod-level entry whose pod has no
    container entry is included too, so that a check over this view sees it."""
    out: dict[str, Mapping[str, Sequence[Block]]] = {}
    for pod, containers in assignments.items():
        blocks = pod_entries.get(pod)
        out[pod] = {"": blocks} if blocks else containers  # validateState: len(podBlocks) > 0
    for pod, blocks in pod_entries.items():
        out.setdefault(pod, {"": blocks})
    return out


def validate_pod_scope_resources(
    pod: Pod, budget: Mapping[str, int], exclusive_of: ExclusiveOf
) -> str | None:
    """``validatePodScopeResources``: the kubelet's rejection text, or None when the pod's
    shared containers have memory to share."""
    names = sorted(budget, key=resource_order)
    long_running: dict[str, int] = {}
    shared_long_running = False
    for ctr in pod.init_containers:
        own = exclusive_of(ctr)
        if not ctr.restartable:
            if not own:
                for name in names:
                    if long_running.get(name, 0) >= budget[name]:
                        return (
                            "pod rejected, pod has shared init containers but no "
                            f"{name} available for them"
                        )
        elif not own:
            shared_long_running = True
        else:
            for name, size in own.items():
                long_running[name] = long_running.get(name, 0) + size
    for ctr in pod.containers:
        own = exclusive_of(ctr)
        if not own:
            shared_long_running = True
        for name, size in own.items():
            long_running[name] = long_running.get(name, 0) + size
    if shared_long_running:
        for name in names:
            if long_running.get(name, 0) >= budget[name]:
                return (
                    f"pod rejected, sum of exclusive container {name} requests equals pod budget, "
                    "leaving no memory for shared containers"
                )
    return None


def check_pod_scope_resources(
    pod: Pod, budget: Mapping[str, int], exclusive_of: ExclusiveOf
) -> None:
    """Raise :class:`EmptyPodSharedPoolError` with the kubelet's text when
    :func:`validate_pod_scope_resources` refuses the pod."""
    rejection = validate_pod_scope_resources(pod, budget, exclusive_of)
    if rejection is not None:
        raise EmptyPodSharedPoolError(rejection)


@dataclass
class Partition:
    """How ``AllocatePod`` divides a budget on the NUMA nodes ``bits``."""

    pod_blocks: list[Block]
    """The budget on ``bits``: the pod-level entry, reserved once."""
    containers: dict[str, list[Block]]
    """Every container's blocks, in spec order (init containers first)."""
    exclusive: tuple[str, ...]
    """The containers with blocks of their own request (container isolation)."""
    pool: dict[str, int] = field(default_factory=dict)
    """What the shared containers share, per type (the values above 0)."""


def _blocks(bits: Sequence[int], sizes: Mapping[str, int]) -> list[Block]:
    affinity = tuple(bits)
    return [
        Block(affinity, name, sizes[name])
        for name in sorted(sizes, key=resource_order)
        if sizes[name] > 0
    ]


def _minus(pod: Pod, budget: Mapping[str, int], taken: Mapping[str, int]) -> dict[str, int]:
    left = {}
    for name, size in budget.items():
        rest = size - taken.get(name, 0)
        if rest < 0:
            # Unreachable after the API server's rule that a pod's requests cover its
            # containers' (numamem.api.validation); Go would wrap around to ~2^64.
            raise AllocationError(
                f"[memorymanager] pod {quote(pod.uid)}: its containers' exclusive {name} requests "
                f"exceed the pod's budget of {size} bytes by {-rest}"
            )
        left[name] = rest
    return left


def partition(
    pod: Pod, budget: Mapping[str, int], bits: Sequence[int], exclusive_of: ExclusiveOf
) -> Partition:
    """``AllocatePod``'s partition of ``budget`` on ``bits`` (see the module docstring)."""
    own_blocks: dict[str, list[Block]] = {}
    exclusive: list[str] = []
    sidecars: dict[str, int] = {}
    for ctr in pod.init_containers:
        own = exclusive_of(ctr)
        if not own:
            if not ctr.restartable:
                own_blocks[ctr.name] = _blocks(bits, _minus(pod, budget, sidecars))
            continue
        own_blocks[ctr.name] = _blocks(bits, own)
        exclusive.append(ctr.name)
        if ctr.restartable:
            for name, size in own.items():
                sidecars[name] = sidecars.get(name, 0) + size
    taken = dict(sidecars)
    for ctr in pod.containers:
        own = exclusive_of(ctr)
        if not own:
            continue
        own_blocks[ctr.name] = _blocks(bits, own)
        exclusive.append(ctr.name)
        for name, size in own.items():
            if size > 0:
                taken[name] = taken.get(name, 0) + size
    pool = _minus(pod, budget, taken)
    shared = _blocks(bits, pool)
    containers = {ctr.name: own_blocks.get(ctr.name, shared) for ctr in pod.all_containers()}
    return Partition(
        _blocks(bits, budget),
        containers,
        tuple(exclusive),
        {name: size for name, size in pool.items() if size > 0},
    )


def isolation_level(
    container_blocks: Sequence[Block] | None,
    pod_blocks: Sequence[Block] | None,
    exclusive: frozenset[str],
    container_name: str,
) -> str:
    """``GetResourceIsolationLevel`` from the stored state: no blocks, ``host``; a container of
    a pod allocated as a whole (it has pod-level blocks) without memory of its own, ``pod``;
    otherwise ``container``. Which containers of such a pod hold memory of their own is
    numamem's record (:meth:`MemoryState.exclusive_containers
    <numamem.memorymanager.state.model.MemoryState.exclusive_containers>`); a pod restored from a
    kubelet's file has none, and all its containers are reported as sharing the pod's pool
    (the accounting stays right: the pod's memory is reported once, at the pod level)."""
    if not container_blocks:
        return HOST
    if pod_blocks is not None and container_name not in exclusive:
        return POD
    return CONTAINER


def entries_without_containers(
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
) -> list[str]:
    """The pods that have a pod-level entry but no container entry (kubernetes#141993)."""
    return sorted(pod for pod in pod_entries if not assignments.get(pod))


@dataclass
class Plan:
    """How a pod's pod-level budget divides, independently of the NUMA nodes (for Explain)."""

    budget: dict[str, int]
    """The pod-level requests of memory and hugepages (bytes per type)."""
    exclusive: dict[str, dict[str, int]]
    """Containers with memory of their own (equivalent-Guaranteed) -> their requests."""
    shared: list[str]
    """Containers without: they share the pod's pool (pod scope) or the node's (container scope)."""
    pool: dict[str, int]
    """The pool the shared long-running containers share: the budget minus the sidecars' and app
    containers' own memory (a regular init container without its own request gets the budget
    minus the sidecars started before it)."""
    rejection: str = ""
    """``validatePodScopeResources``' refusal (EmptyPodSharedPoolError), or ""."""


def plan(pod: Pod, budget: Mapping[str, int], exclusive_of: ExclusiveOf) -> Plan:
    """The :class:`Plan` of ``pod`` with ``budget``; never raises (a budget its containers
    exceed shows a pool of 0 for that type)."""
    exclusive: dict[str, dict[str, int]] = {}
    shared: list[str] = []
    taken: dict[str, int] = {}
    long_running = [(c, c.restartable) for c in pod.init_containers]
    long_running += [(c, True) for c in pod.containers]
    for ctr, stays in long_running:
        own = exclusive_of(ctr)
        if not own:
            shared.append(ctr.name)
            continue
        exclusive[ctr.name] = dict(own)
        if stays:
            for name, size in own.items():
                taken[name] = taken.get(name, 0) + size
    pool = {name: max(size - taken.get(name, 0), 0) for name, size in budget.items()}
    rejection = validate_pod_scope_resources(pod, budget, exclusive_of) or ""
    return Plan(dict(budget), exclusive, shared, pool, rejection)
