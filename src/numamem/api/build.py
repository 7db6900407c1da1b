"""Building the memory manager from the configuration: the start-up's refusals.

:func:`build_manager` makes the policy, the topology manager policy and the manager for a
:class:`~numamem.config.model.Config` on a :class:`~numamem.topology.Machine`, and raises
ConfigError/ReservedMemoryError for a configuration no start may accept (reservations,
policy names, topology and policy options); :func:`state_store` is the kubelet-format store
the manager persists through. Used by the daemon's component
(:class:`~numamem.api.memorymanager.MemoryManagerComponent`) and by ``numamem state verify``
and ``numamem state diff``, which build the manager a start would build without serving it.
Building restores nothing: the caller loads the state (:meth:`Manager.load
<numamem.memorymanager.manager.writes.Manager.load>`).
"""

from __future__ import annotations

from pathlib import Path

from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.config.model import Config
from numamem.errors import AllocationError, TopologyError
from numamem.logging import get_logger
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy import options as mm_options
from numamem.memorymanager.policy.new import new_policy
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.state.drift import AUTO
from numamem.memorymanager.state.reserved import (
    node_allocatable_reservation,
    validate_reserved_memory_config,
)
from numamem.memorymanager.state.store import StateStore
from numamem.topology import Machine
from numamem.topology.iomem import auto_drift_bound, why_no_span
from numamem.topology.sysfs import read_free_hugepages
from numamem.topologymanager import policy as tm

_log = get_logger("memorymanager")


def build_manager(config: Config, machine: Machine, store: StateStore | None = None) -> Manager:
    """The manager for ``config`` on ``machine``; raises ConfigError/ReservedMemoryError (start-up refusal)."""
    validate_reserved_memory_config(config.reserved_memory)
    allocatable = node_allocatable_reservation(
        machine,
        dict(config.system_reserved),
        dict(config.kube_reserved),
        config.eviction_hard,
        machine.memory_capacity_bytes,
    )
    topology_policy, warnings = tm.new_policy(
        config.topology_manager_policy, machine, dict(config.topology_manager_policy_options)
    )
    restricted_to = (
        topology_policy.info.nodes if topology_policy.options.restrict_to_cpu_numa_nodes else None
    )
    parsed = mm_options.parse_options(dict(config.memory_manager_policy_options))
    auto_bound = auto_drift_bound(config.proc_root)
    tolerance = mm_options.tolerance(parsed, auto_bound)
    if parsed.drift == AUTO and auto_bound is None:
        _log.warning(
            "--memory-manager-policy-options memory-drift-tolerance=auto has no bound, so it "
            "acts as off (a restart after a reboot that moved MemTotal is refused): "
            f"{why_no_span(config.proc_root)}. Give an explicit tolerance instead, e.g. "
            "memory-drift-tolerance=256Mi (or fit, numamem's default)",
            path=str(Path(config.proc_root) / "iomem"),
        )
    if store is None:
        store = state_store(config)
    state_file = str(Path(config.state_dir) / STATE_FILE)
    sysfs_root = config.sysfs_root

    def free_hugepages(node: int, page_size_kb: int) -> int:
        try:
            return read_free_hugepages(sysfs_root, node, page_size_kb)
        except TopologyError as err:
            raise AllocationError(f"failed to read free hugepages: {err}") from err

    static_options = StaticOptions(
        tolerance,
        auto_bound,
        state_file,
        free_hugepages if parsed.verify_hugepages else None,
    )
    policy = new_policy(
        config.memory_manager_policy,
        machine,
        allocatable,
        config.reserved_memory,
        restricted_to,
        static_options,
        config.feature_gates,
    )
    for warning in warnings:
        _log.warning(warning)
    return Manager(
        policy,
        store,
        topology_policy,
        config.topology_manager_scope,
        max_pods=config.limits.max_pods,
        record_pod_names=config.podresources_socket is not None,
    )


def state_store(config: Config, fs: FileSystem = REAL) -> KubeletStateStore:
    """The memory manager's store for ``config`` (V3 and pod-level entries with the
    ``PodLevelResourceManagers`` gate)."""
    return KubeletStateStore(
        config.state_dir,
        fs=fs,
        pod_level=config.feature_gates.pod_level_resource_managers,
        journal=config.state_commit == "journal",
    )
