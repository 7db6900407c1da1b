"""The ttrpc server half of an :class:`~numamem.nri.rpc.Endpoint`: requests and their answers.

The reader thread checks each request as upstream's ttrpc server does (odd,
increasing stream ids; a decodable envelope; a known service and method: else
INVALID_ARGUMENT or UNIMPLEMENTED with upstream's texts; RESOURCE_EXHAUSTED
for a message over the limit) and hands it to a bounded pool of worker
threads; the worker decodes the payload, calls the method and writes the
answer. A request beyond ``max_in_flight`` is answered RESOURCE_EXHAUSTED at
once rather than queued without bound. Every answer carries a status (Go's
client refuses one without).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message as ProtoMessage

from numamem.errors import NriConnectionError, NriStatusError, cut_message, quote
from numamem.logging import get_logger
from numamem.nri import problems as kinds
from numamem.nri import status
from numamem.nri.framing import (
    DATA,
    MAX_MESSAGE,
    REQUEST,
    RESPONSE,
    Message,
    OversizedMessage,
    encode_message,
)
from numamem.nri.problems import ProblemLog
from numamem.nri.rpc_client import DECODE_ERRORS
from numamem.nriapi import ttrpc_pb2

_log = get_logger("nri")


REFUSALS: dict[str, tuple[int, str]] = {
    kinds.OVERSIZED_MESSAGE: (
        status.RESOURCE_EXHAUSTED,
        "NRI request over the ttrpc message limit skipped and refused",
    ),
    kinds.BAD_STREAM_ID: (
        status.INVALID_ARGUMENT,
        "NRI request with an even or reused stream id refused",
    ),
    kinds.UNDECODABLE_REQUEST: (status.INVALID_ARGUMENT, "NRI request envelope does not decode"),
    kinds.OVERLOADED: (
        status.RESOURCE_EXHAUSTED,
        "NRI request refused: too many requests in flight",
    ),
    kinds.UNDECODABLE_PAYLOAD: (status.INTERNAL, "NRI request payload does not decode"),
    kinds.OVERSIZED_REPLY: (
        status.RESOURCE_EXHAUSTED,
        "NRI reply over the ttrpc message limit replaced by an error",
    ),
}
"""A problem that refuses a request -> the status it is answered with, and what the log
says of it (what was wrong and what the server did)."""


@dataclass(frozen=True)
class CallInfo:
    """What the server knows of one request besides its payload."""

    service: str
    method: str
    stream_id: int
    received: float
    """``time.monotonic()`` when the reader had the whole request."""
    timeout: float | None
    """The caller's deadline in seconds after ``received`` (ttrpc's ``timeout_nano``), if any."""


@dataclass(frozen=True)
class Method:
    """One served method: its request message type and the function answering it (run on a
    worker thread; raising :class:`NriStatusError` answers with that status)."""

    request_type: type[ProtoMessage]
    call: Callable[[Any, CallInfo], ProtoMessage]


class Server:
    """Requests of one mux connection. ``on_request`` runs in the reader thread only."""

    def __init__(
        self,
        peer: str,
        send: Callable[[bytes], None],
        problems: ProblemLog,
        *,
        workers: int,
        max_in_flight: int,
    ) -> None:
        self._peer = peer
        self._send = send
        self._problems = problems
        self.services: dict[str, Mapping[str, Method]] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"nri-{peer}")
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._lock = threading.Lock()
        self._last_request = 0

    @property
    def busy(self) -> bool:
        """Whether handler calls are queued or running."""
        with self._lock:
            return self._in_flight > 0

    def shutdown(self, wait: bool) -> None:
        """Stop taking requests; with ``wait``, wait for the running ones."""
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def on_request(self, message: Message | OversizedMessage) -> None:
        sid = message.stream_id
        if isinstance(message, OversizedMessage):
            text = f"message length {message.length} exceed maximum message size of {MAX_MESSAGE}"
            fields = {"stream_id": sid, "length": message.length, "limit": MAX_MESSAGE}
            self._refuse(sid, kinds.OVERSIZED_MESSAGE, text, **fields)
            return
        if message.type != REQUEST:
            self._problems.report(
                kinds.UNEXPECTED_MESSAGE,
                "NRI message of a type this side does not serve dropped",
                stream_id=sid,
                type=message.type,
            )
            if message.type == DATA:
                self.answer(sid, status.INVALID_ARGUMENT, "StreamID is no longer active")
            return
        if sid % 2 != 1 or sid <= self._last_request:
            text = (
                "StreamID must be odd for client initiated streams"
                if sid % 2 != 1
                else "StreamID cannot be re-used and must increment"
            )
            self._refuse(sid, kinds.BAD_STREAM_ID, text, stream_id=sid, last=self._last_request)
            return
        self._last_request = sid
        try:
            request = ttrpc_pb2.Request.FromString(message.payload)
        except DECODE_ERRORS as e:
            text = f"unmarshal request error: {e}"
            self._refuse(sid, kinds.UNDECODABLE_REQUEST, text, error=str(e))
            return
        self._dispatch(sid, request)

    def _dispatch(self, sid: int, request: ttrpc_pb2.Request) -> None:
        methods = self.services.get(request.service)
        method = methods.get(request.method) if methods is not None else None
        if method is None:
            if methods is None:
                self._problems.report(
                    kinds.UNKNOWN_METHOD,
                    "NRI request for a service this side does not serve",
                    service=quote(request.service),
                )
            else:
                _log.debug("NRI method not served", method=quote(request.method), peer=self._peer)
            text = f"service {request.service}" if methods is None else f"method {request.method}"
            self.answer(sid, status.UNIMPLEMENTED, text)
            return
        info = CallInfo(
            service=request.service,
            method=request.method,
            stream_id=sid,
            received=time.monotonic(),
            timeout=request.timeout_nano / 1e9 if request.timeout_nano > 0 else None,
        )
        if not self._slots.acquire(blocking=False):
            text = f"{self._max_in_flight} requests in flight already"
            fields = {"method": quote(request.method), "limit": self._max_in_flight}
            self._refuse(sid, kinds.OVERLOADED, text, **fields)
            return
        with self._lock:
            self._in_flight += 1
        try:
            self._pool.submit(self._serve, method, request.payload, info)
        except RuntimeError:  # shutting down
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self._slots.release()

    def _serve(self, method: Method, payload: bytes, info: CallInfo) -> None:
        try:
            try:
                request = method.request_type.FromString(payload)
            except DECODE_ERRORS as e:
                text = f"ttrpc: error unmarshalling payload: {e}"
                fields: dict[str, Any] = {"method": info.method, "error": str(e)}
                self._refuse(info.stream_id, kinds.UNDECODABLE_PAYLOAD, text, **fields)
                return
            try:
                reply = method.call(request, info).SerializeToString()
            except NriStatusError as e:
                self.answer(info.stream_id, e.code, e.message)
                return
            except Exception as e:  # noqa: BLE001 - every failure is answered, never raised
                _log.exception("NRI method failed", method=info.method, peer=self._peer)
                self.answer(info.stream_id, status.UNKNOWN, str(e) or type(e).__name__)
                return
            if len(reply) > MAX_MESSAGE - 64:  # the envelope adds a few bytes
                text = f"reply of {len(reply)} bytes exceeds the ttrpc limit of {MAX_MESSAGE}"
                fields = {"method": info.method, "length": len(reply)}
                self._refuse(info.stream_id, kinds.OVERSIZED_REPLY, text, **fields)
                return
            self.answer(info.stream_id, status.OK, "", reply)
        finally:
            self._release()

    def _refuse(self, sid: int, kind: str, text: str, /, **fields: Any) -> None:
        """Report the problem ``kind`` (with what :data:`REFUSALS` says of it, and ``fields``)
        and answer stream ``sid`` with its status and upstream's ``text``."""
        code, problem = REFUSALS[kind]
        self._problems.report(kind, problem, **fields)
        self.answer(sid, code, text)

    def answer(self, stream_id: int, code: int, message: str, payload: bytes = b"") -> None:
        """Write the response of ``stream_id`` (dropped if the connection is closed)."""
        response = ttrpc_pb2.Response(payload=payload)
        response.status.SetInParent()  # present even when OK
        response.status.code = code
        response.status.message = cut_message(message)
        try:
            self._send(encode_message(stream_id, RESPONSE, 0, response.SerializeToString()))
        except NriConnectionError:
            _log.debug("NRI reply not sent: connection closed", peer=self._peer, stream=stream_id)
