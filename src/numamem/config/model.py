"""The daemon's configuration as values: what the core and the edge both read.

Pure data, no parsing libraries: the core (memory manager, reservations)
imports these types; :mod:`numamem.config.flags` and
:mod:`numamem.config.yamlfile` build them from flags and files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from numamem.quantity import Quantity, parse_quantity

MEMORY_MANAGER_POLICIES = ("None", "Static")
TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_MANAGER_SCOPES = ("container", "pod")
RESERVABLE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNALS = (
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
)
DEFAULT_SOCKET = "/run/numamem/numamem.sock"
DEFAULT_STATE_DIR = "/var/lib/numamem"
STATE_COMMITS = ("replace", "journal")
"""The values of ``--state-commit`` (:mod:`numamem.checkpoint.mmjournal`)."""
DEFAULT_EVICTION_HARD = "memory.available<100Mi"
POD_LEVEL_RESOURCES = "PodLevelResources"
POD_LEVEL_RESOURCE_MANAGERS = "PodLevelResourceManagers"
FEATURE_GATES = (POD_LEVEL_RESOURCE_MANAGERS, POD_LEVEL_RESOURCES)
"""The kubelet feature gates numamem knows (``--feature-gates``, ``featureGates``)."""


@dataclass(frozen=True, slots=True)
class ReservedMemory:
    """One ``reservedMemory`` entry: limits reserved on one NUMA node, in input order."""

    numa_node: int
    limits: tuple[tuple[str, Quantity], ...]


@dataclass(frozen=True, slots=True)
class EvictionThreshold:
    """A hard eviction threshold ``signal<value``; exactly one of quantity/percentage is set."""

    signal: str
    quantity: Quantity | None = None
    percentage: Fraction | None = None


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The kubelet feature gates numamem honours, both off by default (as in the kubelet 1.37).

    ``PodLevelResources`` (KEP-2837) lets a pod's ``spec.resources`` decide its QoS class;
    ``PodLevelResourceManagers`` (KEP-5526) makes the memory manager allocate for it. A pod
    that sets pod-level resources is left alone by the memory manager unless both are on.
    """

    pod_level_resources: bool = False
    pod_level_resource_managers: bool = False

    @property
    def pod_level(self) -> bool:
        """Both gates: the memory manager allocates pods by their pod-level resources."""
        return self.pod_level_resources and self.pod_level_resource_managers

    def enabled(self) -> tuple[str, ...]:
        """The names of the gates that are on, as the kubelet spells them."""
        on = {
            POD_LEVEL_RESOURCE_MANAGERS: self.pod_level_resource_managers,
            POD_LEVEL_RESOURCES: self.pod_level_resources,
        }
        return tuple(name for name in FEATURE_GATES if on[name])


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep one client from exhausting the daemon (RESOURCE_EXHAUSTED past them)."""

    max_pods: int = 10000
    max_containers_per_pod: int = 256
    max_metacache_entries: int = 100000
    max_metacache_entry_bytes: int = 256 * 1024
    max_metacache_bytes: int = 256 * 1024 * 1024
    max_concurrent_rpcs: int = 128
    max_topology_hints: int = 4096
    max_message_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    """The merged configuration. Immutable; build a changed copy with :func:`dataclasses.replace`."""

    socket: str = DEFAULT_SOCKET
    state_dir: str = DEFAULT_STATE_DIR
    state_commit: str = "replace"
    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    enforce_cpuset_mems: bool = False
    memory_manager_policy: str = "None"
    reserved_memory: tuple[ReservedMemory, ...] = ()
    system_reserved: tuple[tuple[str, Quantity], ...] = ()
    kube_reserved: tuple[tuple[str, Quantity], ...] = ()
    eviction_hard: tuple[EvictionThreshold, ...] = field(
        default_factory=lambda: (
            EvictionThreshold("memory.available", quantity=parse_quantity("100Mi")),
        )
    )
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: tuple[tuple[str, str], ...] = ()
    memory_manager_policy_options: tuple[tuple[str, str], ...] = ()
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    proc_root: str = "/proc"
    health_port: int | None = None
    health_address: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    metrics_socket: str | None = None
    podresources_socket: str | None = None
    kubelet_podresources_socket: str | None = None
    log_level: str = "info"
    log_format: str = "json"
    shutdown_grace_seconds: float = 5.0
    workers: int = 16
    metric_interval_seconds: float = 10.0
    metric_insurance_period_seconds: float = 0.0
    metacache_discard_corrupt_state: bool = False
    metacache_persist: bool = True
    metacache_compact_bytes: int = 256 * 1024
    allow_shared_dirs: bool = False
    limits: Limits = field(default_factory=Limits)
    ignored_kubelet_fields: tuple[str, ...] = ()
    """The fields of a ``--config`` KubeletConfiguration numamem does not use (``numamem
    serve`` lists them at debug level once logging is configured)."""
