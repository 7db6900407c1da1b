"""Every RPC the daemon serves, read from the protobuf descriptors.

The main socket serves ``numamem.v1`` (Info, Topology, MemoryManager, MetaReader,
MetaWriter), ``grpc.health.v1.Health`` and server reflection
(``grpc.reflection.v1alpha.ServerReflection``); ``--podresources-socket`` serves the
kubelet's ``v1.PodResourcesLister`` and reflection too. A new RPC in a proto is in
the catalogue without any change here.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import message_factory
from google.protobuf.descriptor import FileDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from numamem.v1 import info_pb2, memorymanager_pb2, metacache_pb2, podresources_pb2, topology_pb2

MAIN = "main"
PODRESOURCES = "podresources"

MAIN_FILES: tuple[FileDescriptor, ...] = (
    info_pb2.DESCRIPTOR,
    topology_pb2.DESCRIPTOR,
    memorymanager_pb2.DESCRIPTOR,
    metacache_pb2.DESCRIPTOR,
    health_pb2.DESCRIPTOR,
    reflection_pb2.DESCRIPTOR,
)
PODRESOURCES_FILES: tuple[FileDescriptor, ...] = (
    podresources_pb2.DESCRIPTOR,
    reflection_pb2.DESCRIPTOR,
)

WRITES = frozenset(
    {
        "/numamem.v1.MemoryManager/Allocate",
        "/numamem.v1.MemoryManager/AllocatePod",
        "/numamem.v1.MemoryManager/AddContainer",
        "/numamem.v1.MemoryManager/RemoveContainer",
        "/numamem.v1.MemoryManager/ReleasePod",
        "/numamem.v1.MemoryManager/SyncActivePods",
        "/numamem.v1.MemoryManager/Admit",
        "/numamem.v1.MemoryManager/Resize",
        *(
            f"/numamem.v1.MetaWriter/{m.name}"
            for m in metacache_pb2.DESCRIPTOR.services_by_name["MetaWriter"].methods
        ),
    }
)
"""The RPCs that change state: a restart must bring back what they acknowledged."""


@dataclass(frozen=True)
class Rpc:
    path: str
    """``/package.Service/Method``"""
    socket: str
    """:data:`MAIN` or :data:`PODRESOURCES`"""
    method: MethodDescriptor
    request: type[Message]
    response: type[Message]
    short: str
    """``Service/Method`` without the package, for reports; ``@podresources`` added for an
    RPC both sockets serve (reflection), on the podresources socket."""

    @property
    def streaming(self) -> bool:
        return bool(self.method.server_streaming)

    @property
    def client_streaming(self) -> bool:
        """A stream of requests (reflection's ServerReflectionInfo): the fuzzer sends one
        request per stream."""
        return bool(self.method.client_streaming)

    @property
    def writes(self) -> bool:
        return self.path in WRITES


def _rpcs(files: tuple[FileDescriptor, ...], socket: str) -> list[Rpc]:
    out = []
    main = {f.name for f in MAIN_FILES}
    for file in files:
        for service in file.services_by_name.values():
            for method in service.methods:
                short = f"{service.name}/{method.name}"
                if socket != MAIN and file.name in main:
                    short += f"@{socket}"
                out.append(
                    Rpc(
                        f"/{service.full_name}/{method.name}",
                        socket,
                        method,
                        message_factory.GetMessageClass(method.input_type),
                        message_factory.GetMessageClass(method.output_type),
                        short,
                    )
                )
    return out


RPCS: tuple[Rpc, ...] = (*_rpcs(MAIN_FILES, MAIN), *_rpcs(PODRESOURCES_FILES, PODRESOURCES))
BY_PATH = {rpc.path: rpc for rpc in reversed(RPCS)}
"""Path -> RPC; the main socket's where both sockets serve a path."""
