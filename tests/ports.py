"""TCP ports for tests, under pytest-xdist: pick a free one, and pick again when it was taken.

A test asks the kernel for a free port (bind port 0, read it, close) and passes it to a
daemon; between the close and the daemon's bind another worker's daemon, or any client's
outgoing connection, may take it. numamem refuses a port in use (``cannot listen: [Errno 98]
Address already in use``: grpcio's ``SO_REUSEPORT`` is off, api/tcpports.py), so such a
start fails loudly instead of sharing the port: :func:`on_free_ports` then starts again on
new ports, at most :data:`ATTEMPTS` times.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 5
IN_USE = "Address already in use"
"""What a start refused for a port in use says (the kernel's strerror, EADDRINUSE)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (it may be taken before it is used)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def on_free_ports(start: Callable[[list[int]], T], count: int = 1) -> T:
    """``start(ports)`` with ``count`` free ports; again with new ones while it raises an
    error that names :data:`IN_USE` (at most :data:`ATTEMPTS` times; the last error is
    raised). ``start`` must leave nothing behind when it raises."""
    for attempt in range(ATTEMPTS):
        try:
            return start([free_port() for _ in range(count)])
        except Exception as err:
            if IN_USE not in str(err) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
