"""Wiring: which components the daemon runs, built from the configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from numamem.api.server import Component
from numamem.config import Config
from numamem.v1 import (
    memorymanager_pb2,
    memorymanager_pb2_grpc,
    metacache_pb2,
    metacache_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

TOPOLOGY_SERVICE = topology_pb2.DESCRIPTOR.services_by_name["Topology"].full_name
MEMORY_MANAGER_SERVICE = memorymanager_pb2.DESCRIPTOR.services_by_name["MemoryManager"].full_name
META_READER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaReader"].full_name
META_WRITER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaWriter"].full_name
SERVICE_NAMES = (TOPOLOGY_SERVICE, MEMORY_MANAGER_SERVICE, META_READER_SERVICE, META_WRITER_SERVICE)


class _Unimplemented:
    """Registers the generated base servicers: every RPC answers UNIMPLEMENTED."""

    service_names: Sequence[str] = SERVICE_NAMES

    def register(self, server: grpc.Server) -> None:
        base: Any = (
            topology_pb2_grpc.TopologyServicer,
            memorymanager_pb2_grpc.MemoryManagerServicer,
            metacache_pb2_grpc.MetaReaderServicer,
            metacache_pb2_grpc.MetaWriterServicer,
        )
        topology_pb2_grpc.add_TopologyServicer_to_server(base[0](), server)
        memorymanager_pb2_grpc.add_MemoryManagerServicer_to_server(base[1](), server)
        metacache_pb2_grpc.add_MetaReaderServicer_to_server(base[2](), server)
        metacache_pb2_grpc.add_MetaWriterServicer_to_server(base[3](), server)

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None


def build_components(config: Config) -> Sequence[Component]:
    """The daemon's components for ``config``."""
    del config
    return [_Unimplemented()]
