"""Wiring: which components the daemon runs, built from the configuration."""

from __future__ import annotations

from collections.abc import Sequence

from numamem.api.component import Component
from numamem.api.info import InfoComponent
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.metrics import MetricsComponent
from numamem.api.podresources import PodResourcesComponent
from numamem.api.residency import ResidencyView
from numamem.api.topology import TopologyComponent
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.config.model import Config
from numamem.logging import get_logger
from numamem.topology.sysfs import discover

_log = get_logger("topology")


def build_components(config: Config, fs: FileSystem = REAL) -> Sequence[Component]:
    """The daemon's components for ``config``, persisting through ``fs``. Raises start-up
    errors (topology, config)."""
    machine = discover(config.sysfs_root)
    for warning in machine.warnings:
        _log.warning("suspicious NUMA topology", problem=warning)
    memory = MemoryManagerComponent(config, machine, fs)

    def memory_manager_ids() -> list[tuple[str, str, str]]:
        """Containers whose runtime id the memory manager learned through AddContainer (D8)."""
        return [(pod, name, cid) for cid, (pod, name) in memory.manager.container_map().items()]

    metacache = MetaCacheComponent(config, memory_manager_ids, fs)
    residency = ResidencyView(
        lambda: memory.manager,
        lambda: metacache.cache,
        config.cgroup_root,
        enforce=config.enforce_cpuset_mems,
    )
    metacache.collector.rounds.append(residency.sample)
    memory.servicer.residency = residency
    components: list[Component] = [
        TopologyComponent(machine, config.sysfs_root),
        memory,
        metacache,
        InfoComponent(),  # nothing to restore: after the components systemd is told about
    ]
    if config.metrics_port is not None or config.metrics_socket is not None:
        components.append(
            MetricsComponent(
                config.metrics_address,
                config.metrics_port,
                config.metrics_socket,
                memory,
                metacache,
                residency,
            )
        )
    if config.podresources_socket is not None:
        components.append(
            PodResourcesComponent(
                config.podresources_socket,
                lambda: memory.manager,
                config.kubelet_podresources_socket,
                allow_shared_dirs=config.allow_shared_dirs,
            )
        )
    return components
