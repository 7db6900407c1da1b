"""Whether a new client reaches the daemon: one ``Health/Check`` over the socket's path.

The watchdog's probe (:mod:`numamem.api.watchdog`) ends with it: the path (not an open
descriptor, so a removed or replaced socket file fails it, as it fails every client), the
gRPC server's accept loop and poller, its interceptors and the health servicer. Each call
opens a new connection (a channel of its own with a local subchannel pool: gRPC shares
connections between a process's channels otherwise) and closes it.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.errors import PATH_QUOTE_BYTES, quote

Reach = Callable[[float], str]
"""Given the seconds left, "" when the daemon answered, else why not, in words."""


def health_check_over(socket_path: str) -> Reach:
    """A :data:`Reach` that sends ``Health/Check`` to ``socket_path``. Any answer counts
    (NOT_SERVING too: the request was served); an error or the deadline does not."""
    target = f"unix:{socket_path}"
    shown = quote(socket_path, limit=PATH_QUOTE_BYTES)

    def reach(timeout: float) -> str:
        if timeout <= 0:
            return f"no time was left to reach --socket {shown}"
        options = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(target, options=options) as channel:
            try:
                health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=timeout
                )
            except grpc.RpcError as err:
                code = err.code() if callable(getattr(err, "code", None)) else None
                name = code.name if code is not None else "error"
                return (
                    f"a Health/Check over --socket {shown} failed ({name}): new clients "
                    "cannot reach the daemon"
                )
        return ""

    return reach
