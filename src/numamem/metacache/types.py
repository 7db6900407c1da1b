"""The types the metacache stores: ContainerInfo, PoolInfo, RegionInfo (katalyst ``types``).

Values are normalised when they are built, which is what katalyst's ``Clone``
does on every read: a missing ``RegionNames`` is an empty set, cpusets are
always initialised (katalyst's ``"nil"`` zero value reads back as ``""``),
``OvershootStatus`` is never nil, and maps are never nil. A value read back is
therefore equal to the value stored.

Every type has ``clone()`` (a deep copy) and ``to_json()`` (its part of the
project's canonical checkpoint JSON); ``from_json()`` reads the files back, each
cpuset as ranges with ids below ``cpuset.STORED_ID_LIMIT`` (what numamem ever
accepted), not the API's ``MAX_CPUS``/``MAX_NUMA_NODES``: an entry an older daemon
wrote restores as it was, in time proportional to its text (see
:mod:`numamem.metacache.bounds`). Stored objects are never mutated: the
cache replaces them, so ``to_json`` results are cached on the object.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from numamem.cpuset import STORED_ID_LIMIT, CPUSet
from numamem.errors import quote

TopologyAwareAssignment = dict[int, CPUSet]
"""NUMA id -> cpuset."""

CONTAINER_TYPES = {0: "INIT", 1: "MAIN", 2: "SIDECAR", 3: "EPHEMERAL"}
QOS_LEVELS = ("reclaimed_cores", "shared_cores", "dedicated_cores", "system_cores")


def canonical_json(value: Any) -> str:
    """The project's canonical JSON (checksums are over it): sorted keys, compact, UTF-8, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _assignments_json(value: TopologyAwareAssignment) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


def _assignments_from(value: Mapping[str, str] | None) -> TopologyAwareAssignment:
    return {int(k): _stored(v, "CPU") for k, v in (value or {}).items()}


def _stored(text: str, what: str) -> CPUSet:
    """A cpuset as a daemon wrote it: canonical (one token a range), ids below
    ``STORED_ID_LIMIT``, no bound on its length (it is in memory already; the parse costs
    its tokens)."""
    return CPUSet.parse(text, STORED_ID_LIMIT, what, max_bytes=None, max_tokens=None)


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {quote(value)}")
    return number


class _Cached:
    """Caches the canonical JSON fragment of an immutable-by-convention value."""

    __slots__ = ()

    def fragment(self) -> str:
        cached: str | None = getattr(self, "_fragment", None)
        if cached is None:
            cached = canonical_json(self.to_json())  # type: ignore[attr-defined]
            object.__setattr__(self, "_fragment", cached)
        return cached

    def fragment_bytes(self) -> int:
        """The size of :meth:`fragment` in the files (UTF-8), what the byte limits count."""
        text = self.fragment()
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))

    def forget_fragment(self) -> None:
        object.__setattr__(self, "_fragment", None)


@dataclass(eq=True)
class ContainerInfo(_Cached):
    """``types.ContainerInfo`` plus ``container_id`` (the runtime id, for metrics)."""

    pod_uid: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    container_name: str = ""
    container_type: int = 0
    container_index: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    qos_level: str = ""
    cpu_request: float = 0.0
    cpu_limit: float = 0.0
    memory_request: float = 0.0
    memory_limit: float = 0.0
    origin_owner_pool_name: str = ""
    ramp_up: bool = False
    owner_pool_name: str = ""
    topology_aware_assignments: TopologyAwareAssignment = field(default_factory=dict)
    original_topology_aware_assignments: TopologyAwareAssignment = field(default_factory=dict)
    region_names: set[str] = field(default_factory=set)
    isolated: bool = False
    container_id: str = ""
    _fragment: str | None = field(default=None, init=False, repr=False, compare=False)

    def clone(self) -> ContainerInfo:
        return ContainerInfo(
            self.pod_uid,
            self.pod_namespace,
            self.pod_name,
            self.container_name,
            self.container_type,
            self.container_index,
            dict(self.labels),
            dict(self.annotations),
            self.qos_level,
            self.cpu_request,
            self.cpu_limit,
            self.memory_request,
            self.memory_limit,
            self.origin_owner_pool_name,
            self.ramp_up,
            self.owner_pool_name,
            dict(self.topology_aware_assignments),
            dict(self.original_topology_aware_assignments),
            set(self.region_names),
            self.isolated,
            self.container_id,
        )

    def update_meta(self, other: ContainerInfo) -> bool:
        """``UpdateMeta``: copy each request/limit that is > 0. Returns whether anything changed."""
        changed = False
        for name in ("cpu_request", "cpu_limit", "memory_request", "memory_limit"):
            value = getattr(other, name)
            if value > 0 and value != getattr(self, name):
                setattr(self, name, value)
                changed = True
        if changed:
            self.forget_fragment()
        return changed

    def to_json(self) -> dict[str, Any]:
        return {
            "PodUID": self.pod_uid,
            "PodNamespace": self.pod_namespace,
            "PodName": self.pod_name,
            "ContainerName": self.container_name,
            "ContainerType": self.container_type,
            "ContainerIndex": self.container_index,
            "Labels": self.labels,
            "Annotations": self.annotations,
            "QoSLevel": self.qos_level,
            "CPURequest": self.cpu_request,
            "CPULimit": self.cpu_limit,
            "MemoryRequest": self.memory_request,
            "MemoryLimit": self.memory_limit,
            "OriginOwnerPoolName": self.origin_owner_pool_name,
            "RampUp": self.ramp_up,
            "OwnerPoolName": self.owner_pool_name,
            "TopologyAwareAssignments": _assignments_json(self.topology_aware_assignments),
            "OriginalTopologyAwareAssignments": _assignments_json(
                self.original_topology_aware_assignments
            ),
            "RegionNames": sorted(self.region_names),
            "Isolated": self.isolated,
            "ContainerID": self.container_id,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ContainerInfo:
        return cls(
            str(d.get("PodUID", "")),
            str(d.get("PodNamespace", "")),
            str(d.get("PodName", "")),
            str(d.get("ContainerName", "")),
            int(d.get("ContainerType", 0)),
            int(d.get("ContainerIndex", 0)),
            {str(k): str(v) for k, v in (d.get("Labels") or {}).items()},
            {str(k): str(v) for k, v in (d.get("Annotations") or {}).items()},
            str(d.get("QoSLevel", "")),
            _finite(d.get("CPURequest", 0)),
            _finite(d.get("CPULimit", 0)),
            _finite(d.get("MemoryRequest", 0)),
            _finite(d.get("MemoryLimit", 0)),
            str(d.get("OriginOwnerPoolName", "")),
            bool(d.get("RampUp", False)),
            str(d.get("OwnerPoolName", "")),
            _assignments_from(d.get("TopologyAwareAssignments")),
            _assignments_from(d.get("OriginalTopologyAwareAssignments")),
            {str(r) for r in d.get("RegionNames") or []},
            bool(d.get("Isolated", False)),
            str(d.get("ContainerID", "")),
        )


CONTAINER_FIELDS = tuple(f.name for f in fields(ContainerInfo) if not f.name.startswith("_"))


@dataclass(eq=True)
class PoolInfo(_Cached):
    pool_name: str = ""
    topology_aware_assignments: TopologyAwareAssignment = field(default_factory=dict)
    original_topology_aware_assignments: TopologyAwareAssignment = field(default_factory=dict)
    region_names: set[str] = field(default_factory=set)
    _fragment: str | None = field(default=None, init=False, repr=False, compare=False)

    def clone(self) -> PoolInfo:
        return PoolInfo(
            self.pool_name,
            dict(self.topology_aware_assignments),
            dict(self.original_topology_aware_assignments),
            set(self.region_names),
        )

    def size(self) -> int:
        """``GetPoolSize``: CPUs across the *current* assignments."""
        return sum(len(s) for s in self.topology_aware_assignments.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "PoolName": self.pool_name,
            "TopologyAwareAssignments": _assignments_json(self.topology_aware_assignments),
            "OriginalTopologyAwareAssignments": _assignments_json(
                self.original_topology_aware_assignments
            ),
            "RegionNames": sorted(self.region_names),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PoolInfo:
        return cls(
            str(d.get("PoolName", "")),
            _assignments_from(d.get("TopologyAwareAssignments")),
            _assignments_from(d.get("OriginalTopologyAwareAssignments")),
            {str(r) for r in d.get("RegionNames") or []},
        )


@dataclass(frozen=True)
class ControlKnobItem:
    value: float
    action: str = ""


@dataclass(eq=True)
class RegionStatus:
    overshoot_status: dict[str, str] = field(default_factory=dict)
    bound_type: str = ""

    def clone(self) -> RegionStatus:
        return RegionStatus(dict(self.overshoot_status), self.bound_type)


@dataclass(eq=True)
class RegionInfo(_Cached):
    region_name: str = ""
    region_type: str = ""
    owner_pool_name: str = ""
    binding_numas: CPUSet = field(default_factory=CPUSet)
    region_status: RegionStatus = field(default_factory=RegionStatus)
    pods: dict[str, set[str]] = field(default_factory=dict)
    control_knob_map: dict[str, ControlKnobItem] = field(default_factory=dict)
    provision_policy_top_priority: str = ""
    provision_policy_in_use: str = ""
    headroom: float = 0.0
    headroom_policy_top_priority: str = ""
    headroom_policy_in_use: str = ""
    _fragment: str | None = field(default=None, init=False, repr=False, compare=False)

    def clone(self) -> RegionInfo:
        return RegionInfo(
            self.region_name,
            self.region_type,
            self.owner_pool_name,
            self.binding_numas,
            self.region_status.clone(),
            {p: set(c) for p, c in self.pods.items()},
            dict(self.control_knob_map),
            self.provision_policy_top_priority,
            self.provision_policy_in_use,
            self.headroom,
            self.headroom_policy_top_priority,
            self.headroom_policy_in_use,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "region_name": self.region_name,
            "region_type": self.region_type,
            "owner_pool_name": self.owner_pool_name,
            "binding_numas": str(self.binding_numas),
            "region_status": {
                "overshoot_status": self.region_status.overshoot_status,
                "bound_type": self.region_status.bound_type,
            },
            "pods": {p: sorted(c) for p, c in self.pods.items()},
            "control_knob_map": {
                k: {"Value": v.value, "Action": v.action} for k, v in self.control_knob_map.items()
            },
            "provision_policy_top_priority": self.provision_policy_top_priority,
            "provision_policy_in_use": self.provision_policy_in_use,
            "headroom": self.headroom,
            "headroom_policy_top_priority": self.headroom_policy_top_priority,
            "headroom_policy_in_use": self.headroom_policy_in_use,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RegionInfo:
        status = d.get("region_status") or {}
        return cls(
            str(d.get("region_name", "")),
            str(d.get("region_type", "")),
            str(d.get("owner_pool_name", "")),
            _stored(str(d.get("binding_numas", "")), "NUMA node"),
            RegionStatus(
                {str(k): str(v) for k, v in (status.get("overshoot_status") or {}).items()},
                str(status.get("bound_type", "")),
            ),
            {str(p): {str(c) for c in cs} for p, cs in (d.get("pods") or {}).items()},
            {
                str(k): ControlKnobItem(_finite(v.get("Value", 0)), str(v.get("Action", "")))
                for k, v in (d.get("control_knob_map") or {}).items()
            },
            str(d.get("provision_policy_top_priority", "")),
            str(d.get("provision_policy_in_use", "")),
            _finite(d.get("headroom", 0)),
            str(d.get("headroom_policy_top_priority", "")),
            str(d.get("headroom_policy_in_use", "")),
        )
