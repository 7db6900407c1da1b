"""TCP ports numamem's gRPC servers listen on (``--health-port``): exclusively.

grpcio sets ``SO_REUSEPORT`` on the sockets it binds unless told ``grpc.so_reuseport=0``:
a second daemon (another state dir and socket, the same user) started with the same port
would then start as if the port were its own, and the kernel would spread the probes'
connections over both (review 38b). With :data:`TCP_EXCLUSIVE` the second bind fails;
grpcio then says only ``Failed to bind``, so :func:`listen_problem` asks the kernel why
(``Address already in use``) for the refusal to name it.
"""

from __future__ import annotations

import socket

TCP_EXCLUSIVE = ("grpc.so_reuseport", 0)
"""The gRPC server option every TCP server numamem starts is given."""


def listen_problem(address: str, port: int) -> str:
    """Why ``address:port`` cannot be bound now, as the kernel says it (``[Errno 98]
    Address already in use``), or "" when a plain bind succeeds (the socket is closed at
    once; it never listens)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, port))
    except OSError as err:
        return str(err)
    return ""
