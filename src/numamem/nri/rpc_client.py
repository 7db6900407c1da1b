"""The ttrpc client half of an :class:`~numamem.nri.rpc.Endpoint`: calls and their replies.

A call allocates the next odd stream id and sends under one lock (upstream's
server refuses ids that do not increase), then waits for the reply the reader
thread matches by stream id; the connection closing fails every waiting call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from google.protobuf.message import DecodeError

from numamem.errors import NriConnectionError, NriStatusError
from numamem.nri import problems as kinds
from numamem.nri import status
from numamem.nri.framing import (
    MAX_MESSAGE,
    REQUEST,
    RESPONSE,
    Message,
    OversizedMessage,
    encode_message,
)
from numamem.nri.problems import ProblemLog
from numamem.nriapi import ttrpc_pb2

DECODE_ERRORS = (DecodeError, RecursionError, ValueError)
"""What decoding untrusted protobuf bytes raises (DecodeError; the others as a precaution)."""


class Calls:
    """Calls in flight on one mux connection. Thread-safe."""

    def __init__(self, peer: str, send: Callable[[bytes], None], problems: ProblemLog) -> None:
        self._peer = peer
        self._send = send
        self._problems = problems
        self._send_lock = threading.Lock()
        self._next_stream = 1
        self._pending: dict[int, Future[ttrpc_pb2.Response]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """The reply payload of ``service/method``; :class:`NriStatusError` for an error status
        (DEADLINE_EXCEEDED after ``timeout`` seconds), :class:`NriConnectionError` when closed."""
        envelope = ttrpc_pb2.Request(
            service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9)
        )
        future: Future[ttrpc_pb2.Response] = Future()
        with self._send_lock:
            stream_id = self._next_stream
            self._next_stream += 2
            with self._lock:
                if self._closed:
                    raise NriConnectionError(f"the NRI connection to {self._peer} is closed")
                self._pending[stream_id] = future
            try:
                self._send(encode_message(stream_id, REQUEST, 0, envelope.SerializeToString()))
            except (NriConnectionError, ValueError):
                self._forget(stream_id)
                raise
        try:
            response = future.result(timeout)
        except TimeoutError:
            self._forget(stream_id)
            raise NriStatusError(
                status.DEADLINE_EXCEEDED, f"no reply to {method} within {timeout:g}s"
            ) from None
        if response.status.code != status.OK:
            raise NriStatusError(response.status.code, response.status.message)
        return response.payload

    def _forget(self, stream_id: int) -> None:
        with self._lock:
            self._pending.pop(stream_id, None)

    def close(self) -> None:
        """Fail every waiting call and refuse new ones (the connection closed)."""
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(NriConnectionError(f"the NRI connection to {self._peer} closed"))

    def on_reply(self, message: Message | OversizedMessage) -> None:
        """A message on the calling connection (reader thread): complete its call."""
        with self._lock:
            future = self._pending.pop(message.stream_id, None)
        if isinstance(message, OversizedMessage):
            self._problems.report(
                kinds.OVERSIZED_MESSAGE,
                "NRI reply over the ttrpc message limit skipped",
                stream_id=message.stream_id,
                length=message.length,
                limit=MAX_MESSAGE,
            )
            if future is not None:
                text = f"reply of {message.length} bytes over the ttrpc limit of {MAX_MESSAGE}"
                future.set_exception(NriStatusError(status.RESOURCE_EXHAUSTED, text))
            return
        if message.type != RESPONSE or future is None:
            self._problems.report(
                kinds.UNEXPECTED_MESSAGE if message.type != RESPONSE else kinds.INACTIVE_STREAM,
                "NRI message on the calling connection dropped: not a reply, or no call waits",
                stream_id=message.stream_id,
                type=message.type,
            )
            if future is not None:
                text = f"unexpected ttrpc message of type {message.type} instead of a reply"
                future.set_exception(NriStatusError(status.INTERNAL, text))
            return
        try:
            response = ttrpc_pb2.Response.FromString(message.payload)
        except DECODE_ERRORS as e:
            self._problems.report(
                kinds.UNDECODABLE_RESPONSE, "NRI reply envelope does not decode", error=str(e)
            )
            future.set_exception(NriStatusError(status.INTERNAL, f"undecodable reply: {e}"))
            return
        future.set_result(response)
