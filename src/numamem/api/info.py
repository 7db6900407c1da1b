"""``numamem.v1.Info``: what the running daemon is (:mod:`numamem.version`)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from numamem.api.component import StatelessComponent
from numamem.v1 import info_pb2, info_pb2_grpc
from numamem.version import build_info

SERVICE_NAME = info_pb2.DESCRIPTOR.services_by_name["Info"].full_name


class InfoServicer(info_pb2_grpc.InfoServicer):
    """Answers from values read once at construction; safe for concurrent calls."""

    def __init__(self) -> None:
        self._info = info_pb2.BuildInfo(**build_info())

    def GetBuildInfo(
        self, request: info_pb2.GetBuildInfoRequest, context: grpc.ServicerContext
    ) -> info_pb2.BuildInfo:
        reply = info_pb2.BuildInfo()
        reply.CopyFrom(self._info)
        return reply


class InfoComponent(StatelessComponent):
    """Serves the Info service; owns no state."""

    service_names: Sequence[str] = (SERVICE_NAME,)

    def __init__(self) -> None:
        self.servicer = InfoServicer()

    def register(self, server: grpc.Server) -> None:
        info_pb2_grpc.add_InfoServicer_to_server(self.servicer, server)
