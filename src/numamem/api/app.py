"""Wiring: which components the daemon runs, built from the configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.server import Component
from numamem.api.topology import TopologyComponent
from numamem.config import Config
from numamem.topology.sysfs import discover
from numamem.v1 import (
    memorymanager_pb2,
    metacache_pb2,
    metacache_pb2_grpc,
    topology_pb2,
)

TOPOLOGY_SERVICE = topology_pb2.DESCRIPTOR.services_by_name["Topology"].full_name
MEMORY_MANAGER_SERVICE = memorymanager_pb2.DESCRIPTOR.services_by_name["MemoryManager"].full_name
META_READER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaReader"].full_name
META_WRITER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaWriter"].full_name
SERVICE_NAMES = (TOPOLOGY_SERVICE, MEMORY_MANAGER_SERVICE, META_READER_SERVICE, META_WRITER_SERVICE)


class _Unimplemented:
    """Registers the generated base servicers: every RPC answers UNIMPLEMENTED."""

    service_names: Sequence[str] = (META_READER_SERVICE, META_WRITER_SERVICE)

    def register(self, server: grpc.Server) -> None:
        base: Any = (
            metacache_pb2_grpc.MetaReaderServicer,
            metacache_pb2_grpc.MetaWriterServicer,
        )
        metacache_pb2_grpc.add_MetaReaderServicer_to_server(base[0](), server)
        metacache_pb2_grpc.add_MetaWriterServicer_to_server(base[1](), server)

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None


def build_components(config: Config) -> Sequence[Component]:
    """The daemon's components for ``config``. Raises start-up errors (topology, config)."""
    machine = discover(config.sysfs_root)
    return [
        TopologyComponent(machine, config.sysfs_root),
        MemoryManagerComponent(config, machine),
        _Unimplemented(),
    ]
