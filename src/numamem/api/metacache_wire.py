"""Conversions between the ``numamem.v1`` metacache messages and the metacache's types.

Every ``*_from_proto`` validates as it converts (INVALID_ARGUMENT naming the field): a
key that disagrees with the info's own key (an empty one is filled from the key), a
malformed cpulist or one naming a CPU id >= ``cpuset.MAX_CPUS`` (a NUMA id >=
``MAX_NUMA_NODES``), kept as ranges, a negative or non-finite amount, an unknown
container type, an unknown field-mask path. Conversions copy; nothing is shared with
the message.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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

_KEY_FIELDS = {"pod_uid", "container_name"}
_NUMA_BOUND = f"must be in [0, {MAX_NUMA_NODES}) (MAX_NUMA_NODES, Linux's largest MAX_NUMNODES)"


def cpusets_from_proto(values: dict[int, str], field: str) -> TopologyAwareAssignment:
    result: TopologyAwareAssignment = {}
    for numa, text in values.items():
        if not 0 <= numa < MAX_NUMA_NODES:
            raise InvalidArgumentError(f"{field}[{numa}]: NUMA id {_NUMA_BOUND}")
        try:
            result[numa] = CPUSet.parse(text, MAX_CPUS)
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"{field}[{numa}]: {err}") from err
    return result


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
        cpusets_from_proto(
            dict(msg.topology_aware_assignments), f"{field}.topology_aware_assignments"
        ),
        cpusets_from_proto(
            dict(msg.original_topology_aware_assignments),
            f"{field}.original_topology_aware_assignments",
        ),
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
        topology_aware_assignments={k: str(v) for k, v in info.topology_aware_assignments.items()},
        original_topology_aware_assignments={
            k: str(v) for k, v in info.original_topology_aware_assignments.items()
        },
        region_names=sorted(info.region_names),
        isolated=info.isolated,
        container_id=info.container_id,
    )


def pool_from_proto(msg: metacache_pb2.PoolInfo, name: str, field: str = "info") -> PoolInfo:
    same_key(msg, "pool_name", name, field)
    return PoolInfo(
        name,
        cpusets_from_proto(
            dict(msg.topology_aware_assignments), f"{field}.topology_aware_assignments"
        ),
        cpusets_from_proto(
            dict(msg.original_topology_aware_assignments),
            f"{field}.original_topology_aware_assignments",
        ),
        set(msg.region_names),
    )


def pool_to_proto(info: PoolInfo) -> metacache_pb2.PoolInfo:
    return metacache_pb2.PoolInfo(
        pool_name=info.pool_name,
        topology_aware_assignments={k: str(v) for k, v in info.topology_aware_assignments.items()},
        original_topology_aware_assignments={
            k: str(v) for k, v in info.original_topology_aware_assignments.items()
        },
        region_names=sorted(info.region_names),
    )


def region_from_proto(msg: metacache_pb2.RegionInfo, name: str, field: str = "info") -> RegionInfo:
    same_key(msg, "region_name", name, field)
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
    paths = list(update.update_mask.paths) or [f for f in CONTAINER_FIELDS if f not in _KEY_FIELDS]
    for path in paths:
        if path not in CONTAINER_FIELDS:
            raise InvalidArgumentError(
                f"{field}.update_mask: unknown path {quote(path)} "
                f"(ContainerInfo fields: {', '.join(CONTAINER_FIELDS)})"
            )
        if path in _KEY_FIELDS:
            raise InvalidArgumentError(
                f"{field}.update_mask: {quote(path)} is the entry's key and cannot be updated"
            )

    def apply(info: ContainerInfo) -> None:
        for path in paths:
            setattr(info, path, getattr(new, path))

    return apply
