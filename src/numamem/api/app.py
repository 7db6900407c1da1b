"""Wiring: which components the daemon runs, built from the configuration."""

from __future__ import annotations

from collections.abc import Sequence

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.server import Component
from numamem.api.topology import TopologyComponent
from numamem.config import Config
from numamem.topology.sysfs import discover


def build_components(config: Config) -> Sequence[Component]:
    """The daemon's components for ``config``. Raises start-up errors (topology, config)."""
    machine = discover(config.sysfs_root)
    return [
        TopologyComponent(machine, config.sysfs_root),
        MemoryManagerComponent(config, machine),
        MetaCacheComponent(config),
    ]
