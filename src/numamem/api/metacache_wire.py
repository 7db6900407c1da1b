"""Conversions between the ``numamem.v1`` metacache messages and the metacache's types.

Every ``*_from_proto`` validates as it converts (INVALID_ARGUMENT naming the field): a
key that disagrees with the info's own key (an empty one is filled from the key), a
malformed cpulist or one naming a CPU id >= ``cpuset.MAX_CPUS`` (a NUMA id >=
``MAX_NUMA_NODES``), kept as ranges, a negative or non-finite amount, an unknown
container type, an unknown field-mask path, an entry whose lists and maps hold more than
:data:`MAX_ENTRY_ITEMS` elements, a request naming more than :data:`MAX_REQUEST_ENTRIES`
entries. Every count is taken (``len()``, no copy) before anything is copied: a list of
short elements costs a Python object each (issue 38, second review: 4 MiB of
``region_names`` peaked at +92 MiB, 4 MiB of empty regions at +719 MiB). Conversions
copy; nothing is shared with the message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any, Protocol

from numamem.api.validation import check_string
from numamem.cpuset import MAX_CPUS, MAX_NUMA_NODES, CPUSet
from numamem.errors import InvalidArgumentError, NotFoundError, quote
from numamem.metacache.types import (
    CONTAINER_FIELDS,
    CONTAINER_TYPES,
    ContainerInfo,
    ControlKnobItem,
    PoolInfo,
    RegionInfo,
    RegionStatus,
    TopologyAwareAssignment,
)
from numamem.v1 import metacache_pb2

MAX_ENTRY_ITEMS = 4096
"""Elements one entry's lists and maps may hold in all (labels, annotations, region names,
assignments' NUMA keys; a region's pods, their container names, control knobs, overshoot
statuses): a pod with a thousand labels and annotations fits four times over. An element
costs 60-600 bytes of Python objects for its 3 or more bytes on the wire."""
MAX_REQUEST_ENTRIES = 16384
"""Entries, keys or names one request may list (UpdateContainers' updates, SetRegionEntries'
regions, DeleteContainers' and GCPoolEntries' lists): a node of 1,000 pods of 16 containers
each fits. A converted entry costs about 1.6 KB (26 MiB at this bound)."""

_KEY_FIELDS = {"pod_uid", "container_name"}
_NUMA_BOUND = f"must be in [0, {MAX_NUMA_NODES}) (MAX_NUMA_NODES, Linux's largest MAX_NUMNODES)"


def check_items(field: str, counted: Iterable[tuple[str, int]]) -> None:
    """Refuse an entry whose lists and maps (``counted``: each field's name and ``len()``)
    hold more than :data:`MAX_ENTRY_ITEMS` elements in all, naming the field that passes it."""
    total = 0
    for name, count in counted:
        total += count
        if total > MAX_ENTRY_ITEMS:
            raise InvalidArgumentError(
                f"{field}.{name}: the entry's lists and maps hold more than {MAX_ENTRY_ITEMS} "
                "elements (MAX_ENTRY_ITEMS); send fewer labels, annotations, names or pods"
            )


_ASSIGNED_PARTS = (
    "region_names",
    "topology_aware_assignments",
    "original_topology_aware_assignments",
)
"""The lists and maps containers and pools both carry."""


def _sizes(msg: object, *parts: str) -> Iterator[tuple[str, int]]:
    """Each of the message's fields ``parts``, named with its ``len()`` (nothing is copied)."""
    for part in parts:
        yield part, len(getattr(msg, part))


def check_entries(values: Sized, field: str) -> None:
    """Refuse a request list of more than :data:`MAX_REQUEST_ENTRIES` elements."""
    if len(values) > MAX_REQUEST_ENTRIES:
        raise InvalidArgumentError(
            f"{field}: {len(values)} elements, more than {MAX_REQUEST_ENTRIES} "
            "(MAX_REQUEST_ENTRIES); split the request"
        )


def cpusets_from_proto(values: Mapping[int, str], field: str) -> TopologyAwareAssignment:
    """``values`` (the message's map itself: nothing is copied before it is counted)."""
    if len(values) > MAX_NUMA_NODES:
        raise InvalidArgumentError(
            f"{field}: {len(values)} NUMA ids, more than {MAX_NUMA_NODES} (MAX_NUMA_NODES)"
        )
    result: TopologyAwareAssignment = {}
    for numa, text in values.items():
        if not 0 <= numa < MAX_NUMA_NODES:
            raise InvalidArgumentError(f"{field}[{numa}]: NUMA id {_NUMA_BOUND}")
        try:
            result[numa] = CPUSet.parse(text, MAX_CPUS)
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"{field}[{numa}]: {err}") from err
    return result


class _Assigned(Protocol):
    """What containers and pools share: the assignment maps, now and as first given."""

    @property
    def topology_aware_assignments(self) -> Any: ...

    @property
    def original_topology_aware_assignments(self) -> Any: ...


def assignments_from_proto(
    msg: _Assigned, field: str
) -> tuple[TopologyAwareAssignment, TopologyAwareAssignment]:
    """The two assignment maps of a ContainerInfo or PoolInfo message, each counted and bounded
    by :func:`cpusets_from_proto` before anything is copied: ``(now, original)``."""
    return (
        cpusets_from_proto(msg.topology_aware_assignments, f"{field}.topology_aware_assignments"),
        cpusets_from_proto(
            msg.original_topology_aware_assignments,
            f"{field}.original_topology_aware_assignments",
        ),
    )


def assignments_to_proto(info: _Assigned) -> dict[str, dict[int, str]]:
    """The keyword arguments that give a message the two assignment maps of ``info``."""
    return {
        "topology_aware_assignments": {
            k: str(v) for k, v in info.topology_aware_assignments.items()
        },
        "original_topology_aware_assignments": {
            k: str(v) for k, v in info.original_topology_aware_assignments.items()
        },
    }


def check_amount(value: float, field: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{field}: must be a finite number >= 0, got {value}")
    return value


def same_key(msg: object, key_field: str, key: str, field: str) -> None:
    """The info's own ``key_field``, when given, must be the request's key (every MetaWriter
    RPC that takes an info and its key)."""
    given = getattr(msg, key_field)
    if given and given != key:
        raise InvalidArgumentError(
            f"{field}.{key_field}: {quote(given)} disagrees with {key_field} {quote(key)}"
        )


def missing(what: str) -> NotFoundError:
    """NOT_FOUND for ``what`` (already quoted: ``pod 'p1'``)."""
    return NotFoundError(f"{what} is not in the metacache")


def container_from_proto(
    msg: metacache_pb2.ContainerInfo, pod_uid: str, name: str, field: str = "info"
) -> ContainerInfo:
    same_key(msg, "pod_uid", pod_uid, field)
    same_key(msg, "container_name", name, field)
    if msg.container_type not in CONTAINER_TYPES:
        raise InvalidArgumentError(f"{field}.container_type: unknown value {msg.container_type}")
    check_items(field, _sizes(msg, "labels", "annotations", *_ASSIGNED_PARTS))
    return ContainerInfo(
        pod_uid,
        check_string(msg.pod_namespace, f"{field}.pod_namespace", required=False),
        check_string(msg.pod_name, f"{field}.pod_name", required=False),
        name,
        msg.container_type,
        msg.container_index,
        dict(msg.labels),
        dict(msg.annotations),
        check_string(msg.qos_level, f"{field}.qos_level", required=False),
        check_amount(msg.cpu_request, f"{field}.cpu_request"),
        check_amount(msg.cpu_limit, f"{field}.cpu_limit"),
        check_amount(msg.memory_request, f"{field}.memory_request"),
        check_amount(msg.memory_limit, f"{field}.memory_limit"),
        msg.origin_owner_pool_name,
        msg.ramp_up,
        msg.owner_pool_name,
        *assignments_from_proto(msg, field),
        set(msg.region_names),
        msg.isolated,
        check_string(msg.container_id, f"{field}.container_id", required=False),
    )


def container_to_proto(info: ContainerInfo) -> metacache_pb2.ContainerInfo:
    return metacache_pb2.ContainerInfo(
        pod_uid=info.pod_uid,
        pod_namespace=info.pod_namespace,
        pod_name=info.pod_name,
        container_name=info.container_name,
        container_type=info.container_type,  # type: ignore[arg-type]
        container_index=info.container_index,
        labels=info.labels,
        annotations=info.annotations,
        qos_level=info.qos_level,
        cpu_request=info.cpu_request,
        cpu_limit=info.cpu_limit,
        memory_request=info.memory_request,
        memory_limit=info.memory_limit,
        origin_owner_pool_name=info.origin_owner_pool_name,
        ramp_up=info.ramp_up,
        owner_pool_name=info.owner_pool_name,
        **assignments_to_proto(info),
        region_names=sorted(info.region_names),
        isolated=info.isolated,
        container_id=info.container_id,
    )


def pool_from_proto(msg: metacache_pb2.PoolInfo, name: str, field: str = "info") -> PoolInfo:
    same_key(msg, "pool_name", name, field)
    check_items(field, _sizes(msg, *_ASSIGNED_PARTS))
    return PoolInfo(
        name,
        *assignments_from_proto(msg, field),
        set(msg.region_names),
    )


def pool_to_proto(info: PoolInfo) -> metacache_pb2.PoolInfo:
    return metacache_pb2.PoolInfo(
        pool_name=info.pool_name,
        **assignments_to_proto(info),
        region_names=sorted(info.region_names),
    )


def region_from_proto(msg: metacache_pb2.RegionInfo, name: str, field: str = "info") -> RegionInfo:
    same_key(msg, "region_name", name, field)
    check_items(field, _region_items(msg))
    try:
        numas = CPUSet.parse(msg.binding_numas, MAX_NUMA_NODES, "NUMA node")
    except InvalidArgumentError as err:
        raise InvalidArgumentError(f"{field}.binding_numas: {err}") from err
    knobs = {}
    for knob, item in msg.control_knob_map.items():
        if not math.isfinite(item.value):
            raise InvalidArgumentError(
                f"{field}.control_knob_map[{quote(knob)}].value: must be finite"
            )
        knobs[knob] = ControlKnobItem(item.value, item.action)
    if not math.isfinite(msg.headroom):
        raise InvalidArgumentError(f"{field}.headroom: must be finite")
    return RegionInfo(
        name,
        msg.region_type,
        msg.owner_pool_name,
        numas,
        RegionStatus(dict(msg.region_status.overshoot_status), msg.region_status.bound_type),
        {pod: set(names.container_names) for pod, names in msg.pods.items()},
        knobs,
        msg.provision_policy_top_priority,
        msg.provision_policy_in_use,
        msg.headroom,
        msg.headroom_policy_top_priority,
        msg.headroom_policy_in_use,
    )


def _region_items(msg: metacache_pb2.RegionInfo) -> Iterator[tuple[str, int]]:
    """The region's lists and maps, counted (a pod's names once its pods are counted)."""
    yield "region_status.overshoot_status", len(msg.region_status.overshoot_status)
    yield "control_knob_map", len(msg.control_knob_map)
    yield "pods", len(msg.pods)
    for pod, names in msg.pods.items():
        yield f"pods[{quote(pod)}].container_names", len(names.container_names)


def region_to_proto(info: RegionInfo) -> metacache_pb2.RegionInfo:
    return metacache_pb2.RegionInfo(
        region_name=info.region_name,
        region_type=info.region_type,
        owner_pool_name=info.owner_pool_name,
        binding_numas=str(info.binding_numas),
        region_status=metacache_pb2.RegionStatus(
            overshoot_status=info.region_status.overshoot_status,
            bound_type=info.region_status.bound_type,
        ),
        pods={
            p: metacache_pb2.ContainerNames(container_names=sorted(c)) for p, c in info.pods.items()
        },
        control_knob_map={
            k: metacache_pb2.ControlKnobItem(value=v.value, action=v.action)
            for k, v in info.control_knob_map.items()
        },
        provision_policy_top_priority=info.provision_policy_top_priority,
        provision_policy_in_use=info.provision_policy_in_use,
        headroom=info.headroom,
        headroom_policy_top_priority=info.headroom_policy_top_priority,
        headroom_policy_in_use=info.headroom_policy_in_use,
    )


def checked_keys(pod_uid: str, container_name: str) -> tuple[str, str]:
    return check_string(pod_uid, "pod_uid"), check_string(container_name, "container_name")


def mask_updater(
    update: metacache_pb2.ContainerUpdate, field: str
) -> Callable[[ContainerInfo], None]:
    """An in-place update of the named fields (all but the keys when the mask is empty)."""
    pod_uid, name = checked_keys(update.pod_uid, update.container_name)
    new = container_from_proto(update.info, pod_uid, name, f"{field}.info")
    mask = update.update_mask.paths  # checked in place: a long mask is refused, not copied
    for path in mask:
        if path not in CONTAINER_FIELDS:
            raise InvalidArgumentError(
                f"{field}.update_mask: unknown path {quote(path)} "
                f"(ContainerInfo fields: {', '.join(CONTAINER_FIELDS)})"
            )
        if path in _KEY_FIELDS:
            raise InvalidArgumentError(
                f"{field}.update_mask: {quote(path)} is the entry's key and cannot be updated"
            )
    # Each field once (a repeated path is the same update): at most the fields, however long.
    paths = list(dict.fromkeys(mask)) or [f for f in CONTAINER_FIELDS if f not in _KEY_FIELDS]

    def apply(info: ContainerInfo) -> None:
        for path in paths:
            setattr(info, path, getattr(new, path))

    return apply
