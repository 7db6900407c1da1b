"""The gRPC health service: the standard servicer with ``List``, and its TCP server.

The daemon sets the status of the server ("") and of each numamem service
(:mod:`numamem.api.servingstatus`); the same servicer answers on the main socket and, with
``--health-port``, on a TCP listener that carries only ``grpc.health.v1`` (kubelet native
gRPC probes) and its reflection.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from numamem.api.interceptors import ServerInterceptor
from numamem.errors import StartupError

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class HealthService(health.HealthServicer):  # type: ignore[misc]  # grpc_health has no stubs
    """The standard health servicer plus ``List`` (every known service and its status).

    grpcio-health-checking defines ``List`` in its proto but does not implement
    it; this reads the servicer's own status table under its own lock.
    """

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(
            statuses={k: health_pb2.HealthCheckResponse(status=v) for k, v in statuses.items()}
        )


def start_health_server(
    servicer: HealthService, address: str, port: int, interceptor: ServerInterceptor
) -> grpc.Server:
    """A TCP server that carries only grpc.health.v1 (kubelet native gRPC probes), with
    reflection of that one service so that grpcurl can call it by name."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health-tcp"),
        interceptors=[interceptor],
    )
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((HEALTH_SERVICE, reflection.SERVICE_NAME), server)
    host = f"[{address}]" if ":" in address else address
    try:
        server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as err:
        raise StartupError(
            f"--health-address {address} --health-port {port}: cannot listen: {err}"
        ) from err
    server.start()
    return server
