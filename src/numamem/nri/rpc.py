"""ttrpc over one NRI trunk: a server on one mux connection, a client on the other.

The plugin serves on connection 1 and calls on connection 2; the runtime the
other way round (:mod:`numamem.testing.nri_runtime`), with the same code. The
server half is :mod:`numamem.nri.rpc_server`, the client half
:mod:`numamem.nri.rpc_client`; the reader thread of the
:class:`~numamem.nri.transport.Connection` feeds both.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TypeVar

from google.protobuf.message import Message as ProtoMessage

from numamem.errors import NriStatusError
from numamem.nri import problems as kinds
from numamem.nri import status
from numamem.nri.framing import Message, OversizedMessage
from numamem.nri.problems import ProblemLog
from numamem.nri.rpc_client import DECODE_ERRORS, Calls
from numamem.nri.rpc_server import CallInfo, Method, Server
from numamem.nri.transport import Connection

__all__ = ["CallInfo", "Endpoint", "Method"]

M = TypeVar("M", bound=ProtoMessage)


class Endpoint:
    """One side of an NRI trunk; see the module docstring. Thread-safe."""

    def __init__(
        self,
        conn: socket.socket,
        *,
        peer: str,
        serve_conn: int,
        call_conn: int,
        services: Mapping[str, Mapping[str, Method]] | None = None,
        workers: int = 4,
        max_in_flight: int = 64,
    ) -> None:
        self.problems = ProblemLog(peer)
        self.peer = peer
        self._serve_conn = serve_conn
        self._conn = Connection(
            conn,
            peer=peer,
            conn_ids=(serve_conn, call_conn),
            on_message=self._on_message,
            on_close=self._on_close,
            problems=self.problems,
        )
        self._server = Server(
            peer,
            lambda data: self._conn.send(serve_conn, data),
            self.problems,
            workers=workers,
            max_in_flight=max_in_flight,
        )
        self._server.services.update(services or {})
        self._calls = Calls(peer, lambda data: self._conn.send(call_conn, data), self.problems)

    def serve(self, service: str, methods: Mapping[str, Method]) -> None:
        """Serve ``service`` with ``methods`` (before :meth:`start`)."""
        self._server.services[service] = methods

    def start(self) -> None:
        self._conn.start()

    def close(self) -> None:
        """Close the trunk (any thread, handlers included); waiting calls fail."""
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed.is_set()

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._conn.closed.wait(timeout)

    def shutdown(self, *, wait_handlers: bool = True) -> None:
        """Close and wait for the reader; with ``wait_handlers``, for the running handler calls
        too (no thread of this endpoint is left), else see :meth:`join_handlers`. Not from a
        handler of this endpoint (it would wait for itself)."""
        self.close()
        self._conn.join()
        self._server.shutdown(wait=wait_handlers)

    @property
    def busy(self) -> bool:
        """Whether handler calls are queued or running."""
        return self._server.busy

    def join_handlers(self) -> None:
        """Wait for the handler calls still running after ``shutdown(wait_handlers=False)``."""
        self._server.shutdown(wait=True)

    def send_raw(self, data: bytes) -> None:
        """Write bytes on the trunk as they are (tests: malformed input)."""
        self._conn.send_raw(data)

    def call(
        self,
        service: str,
        method: str,
        request: ProtoMessage,
        response_type: type[M],
        timeout: float,
    ) -> M:
        """Call ``service/method`` on the peer and wait at most ``timeout`` seconds.

        Raises :class:`NriStatusError` for an error status (DEADLINE_EXCEEDED when no
        reply came in time; INTERNAL for an undecodable reply) and
        :class:`~numamem.errors.NriConnectionError` when the trunk is or gets closed.
        """
        payload = self.call_raw(service, method, request.SerializeToString(), timeout)
        try:
            return response_type.FromString(payload)
        except DECODE_ERRORS as e:
            self.problems.report(
                kinds.UNDECODABLE_RESPONSE,
                "NRI reply payload does not decode",
                method=f"{service}/{method}",
                error=str(e),
            )
            raise NriStatusError(
                status.INTERNAL, f"reply to {method} does not decode as {response_type.__name__}"
            ) from e

    def call_raw(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """:meth:`call` with the request and reply payloads as bytes."""
        return self._calls.call(service, method, payload, timeout)

    def _on_close(self) -> None:
        self._calls.close()

    def _on_message(self, conn_id: int, message: Message | OversizedMessage) -> None:
        if conn_id == self._serve_conn:
            self._server.on_request(message)
        else:
            self._calls.on_reply(message)
