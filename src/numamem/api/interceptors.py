"""The server interceptor: readiness gate, error mapping, one log line per RPC.

For every RPC it

* takes the request id from the ``x-request-id`` metadata or makes one, and
  binds it with the method in structlog's contextvars (grpcio runs the
  interceptor and the handler in the same per-RPC context);
* answers UNAVAILABLE for numamem services while the daemon is starting or
  shutting down (health and reflection are always served; a server built without
  a :class:`Readiness` has no such gate);
* answers RESOURCE_EXHAUSTED at once, without queueing, for a numamem RPC
  beyond ``max_in_flight`` running or queued ones (``--max-concurrent-rpcs``);
* runs health checks and ``Health/List`` on a pool of their own (``fast_pool``),
  so that they answer however busy the workers are (streams that live as long as
  their client, Watch and reflection's bidirectional stream, stay on the main pool);
* answers INVALID_ARGUMENT for a request that does not decode as its message
  type, of every kind of RPC, a stream's messages included (grpcio itself would
  answer INTERNAL "Exception deserializing request!"), and DEADLINE_EXCEEDED
  without doing any work when the client's deadline passed while the request waited;
* turns a :class:`~numamem.errors.NumamemError` into its status code and
  ErrorInfo reason through :func:`numamem.api.status.to_status`, and any other exception into INTERNAL
  with a short message and a logged traceback: a handler bug never takes the
  daemon down;
* serializes each reply itself and answers RESOURCE_EXHAUSTED (reason
  ``REPLY_TOO_LARGE``) instead of a reply larger than ``max_reply_bytes``
  (``--max-message-bytes``), which grpcio would fail to send after the handler
  returned, so that the log line says what the client got;
* counts each unary-unary RPC as running (``courtesy``, :class:`numamem.work.Courtesy`)
  while its handler runs, so that a courteous search gives way to it (streams, which can
  live as long as their client, are not counted);
* logs one line: method, code, duration in ms, request id. Payloads are never
  logged at info level. Health checks log at debug (probes would flood), and so
  does every RPC of a server built with ``log_rpcs=False``.

The main socket's server and the podresources socket's server both use it.
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, cast

import grpc
import structlog

from numamem.api import status
from numamem.errors import NumamemError, cut_message, quote
from numamem.logging import get_logger
from numamem.work import Courtesy

_log = get_logger("rpc")

HEALTH_PREFIX = "/grpc.health.v1.Health/"
FAST_EXCLUDED = frozenset({"/grpc.health.v1.Health/Watch"})
"""Watch streams hold a thread for their lifetime: they stay on the main pool."""
REFLECTION_PREFIX = "/grpc.reflection."
REQUEST_ID_KEY = "x-request-id"

RpcObserver = Callable[[str, str, float], None]
"""Called after each RPC with (method, status code name, seconds)."""


class Phase(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"


class Readiness:
    """The daemon's lifecycle phase, read by the interceptor on every RPC.

    Thread-safe: the phase is one reference assignment; ``wait_ready`` blocks on
    an event.
    """

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._ready = threading.Event()

    def set_ready(self) -> None:
        self.phase = Phase.READY
        self._ready.set()

    def set_stopping(self) -> None:
        self.phase = Phase.STOPPING

    def is_ready(self) -> bool:
        return self.phase is Phase.READY

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)


_PHASE_MESSAGES = {
    Phase.STARTING: ("numamem is starting (restoring checkpoints); retry shortly", status.STARTING),
    Phase.STOPPING: (
        "numamem is shutting down; retry against the next instance",
        status.STOPPING,
    ),
}


class ServerInterceptor(grpc.ServerInterceptor):
    """See the module docstring. One instance serves every RPC of a server."""

    def __init__(
        self,
        readiness: Readiness | None,
        observers: list[RpcObserver] | None = None,
        *,
        in_flight: Callable[[], int] | None = None,
        max_in_flight: int | None = None,
        fast_pool: futures.ThreadPoolExecutor | None = None,
        log_rpcs: bool = True,
        max_reply_bytes: int | None = None,
        courtesy: Courtesy | None = None,
    ) -> None:
        self._readiness = readiness
        self._courtesy = courtesy
        self._log_rpcs = log_rpcs
        self._observers = observers if observers is not None else []
        self._in_flight = in_flight
        self._max_in_flight = max_in_flight
        self._fast_pool = fast_pool
        self._max_reply_bytes = max_reply_bytes

    def add_observer(self, observer: RpcObserver) -> None:
        self._observers.append(observer)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        # The handler is grpc's RpcMethodHandler namedtuple; its stubs do not know _replace.
        handler: Any = continuation(details)
        if handler is None:
            return None
        method: str = details.method
        request_id = ""
        for key, value in details.invocation_metadata or ():
            if key == REQUEST_ID_KEY:
                request_id = quote(str(value), style="bare", limit=128)
                break
        if not request_id:
            request_id = uuid.uuid4().hex[:16]
        structlog.contextvars.bind_contextvars(request_id=request_id, method=method)
        probe = method.startswith(HEALTH_PREFIX) or method.startswith(REFLECTION_PREFIX)
        quiet = probe or not self._log_rpcs
        gated = not probe and self._readiness is not None
        fast = probe and method not in FAST_EXCLUDED
        overloaded = (
            gated
            and self._in_flight is not None
            and self._max_in_flight is not None
            and self._in_flight() >= self._max_in_flight
        )
        deserializer = _tolerant(handler.request_deserializer)
        serialize: Callable[[Any], bytes] | None = handler.response_serializer
        if handler.unary_unary is not None:
            behavior = self._wrap_unary(
                handler.unary_unary, method, request_id, gated, quiet, serialize, counted=True
            )
            if overloaded:
                behavior = self._wrap_unary(
                    self._refuse, method, request_id, False, False, serialize, counted=True
                )
            return handler._replace(
                request_deserializer=deserializer,
                response_serializer=_passthrough if serialize is not None else None,
                unary_unary=self._on_pool(behavior, fast or overloaded),
            )
        if handler.unary_stream is not None:
            stream = self._wrap_stream(
                handler.unary_stream, method, request_id, gated, quiet, serialize
            )
            if overloaded:
                stream = self._wrap_stream(
                    self._refuse_stream, method, request_id, False, False, serialize
                )
            return handler._replace(
                request_deserializer=deserializer,
                response_serializer=_passthrough if serialize is not None else None,
                unary_stream=self._on_pool(stream, fast or overloaded),
            )
        # Client streams (reflection's ServerReflectionInfo): each message may not decode.
        if handler.stream_unary is not None:
            unary = self._wrap_unary(
                _checked_stream(handler.stream_unary), method, request_id, gated, quiet
            )
            if overloaded:
                unary = self._wrap_unary(self._refuse, method, request_id, False, False)
            return handler._replace(request_deserializer=deserializer, stream_unary=unary)
        if handler.stream_stream is not None:
            stream = self._wrap_stream(
                _checked_stream(handler.stream_stream), method, request_id, gated, quiet
            )
            if overloaded:
                stream = self._wrap_stream(self._refuse_stream, method, request_id, False, False)
            return handler._replace(request_deserializer=deserializer, stream_stream=stream)
        return handler

    def _on_pool(self, behavior: Callable[..., Any], fast: bool) -> Callable[..., Any]:
        """Route ``behavior`` to the fast pool (grpcio's per-method thread pool hook)."""
        if fast and self._fast_pool is not None:
            cast(Any, behavior).experimental_thread_pool = self._fast_pool
        return behavior

    def _refuse(self, request: Any, context: grpc.ServicerContext) -> Any:
        _abort(
            context,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"numamem already has {self._max_in_flight} requests running or queued "
            "(--max-concurrent-rpcs); retry with backoff",
            status.OVERLOADED,
        )

    def _refuse_stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._refuse(request, context)
        yield None

    def _gate(self, request: Any, context: grpc.ServicerContext, gated: bool) -> None:
        if isinstance(request, _Undecodable):
            _abort_undecodable(context, request.error)
        if gated and self._readiness is not None:
            phase = self._readiness.phase
            if phase is not Phase.READY:
                message, reason = _PHASE_MESSAGES[phase]
                _abort(context, grpc.StatusCode.UNAVAILABLE, message, reason)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            _abort(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the deadline expired before the request was handled",
                status.DEADLINE_EXPIRED_IN_QUEUE,
            )

    def _serialized(
        self, response: Any, serialize: Callable[[Any], bytes] | None, context: grpc.ServicerContext
    ) -> Any:
        """The reply's bytes, or RESOURCE_EXHAUSTED when they exceed what grpcio would send."""
        if serialize is None:
            return response
        data = serialize(response)
        limit = self._max_reply_bytes
        if limit is not None and len(data) > limit:
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the reply would take {len(data):,} bytes, more than --max-message-bytes "
                f"{limit:,}",
                status.REPLY_TOO_LARGE,
            )
        return data

    def _wrap_unary(
        self,
        behavior: Callable[[Any, grpc.ServicerContext], Any],
        method: str,
        request_id: str,
        gated: bool,
        quiet: bool,
        serialize: Callable[[Any], bytes] | None = None,
        *,
        counted: bool = False,
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        """``behavior`` gated, mapped, serialized and logged; ``counted``: a unary-unary
        call, counted as running while it runs (not a client stream, which lives as long as
        its client)."""
        courtesy = self._courtesy if counted else None

        def wrapper(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            if courtesy is not None:
                courtesy.begin()
            try:
                self._gate(request, context, gated)
                return self._serialized(behavior(request, context), serialize, context)
            except _UndecodableMessageError as err:
                _abort_undecodable(context, err.error)
            except NumamemError as err:
                _abort(context, *status.to_status(err))
            except Exception as err:  # noqa: BLE001 - the one place that catches handler bugs
                _abort_unexpected(err, context, request_id)
            finally:
                if courtesy is not None:
                    courtesy.end()
                self._finish(context, method, request_id, start, quiet)

        return wrapper

    def _wrap_stream(
        self,
        behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]],
        method: str,
        request_id: str,
        gated: bool,
        quiet: bool,
        serialize: Callable[[Any], bytes] | None = None,
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        def wrapper(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            start = time.perf_counter()
            try:
                self._gate(request, context, gated)
                for response in behavior(request, context):
                    yield self._serialized(response, serialize, context)
            except _UndecodableMessageError as err:
                _abort_undecodable(context, err.error)
            except NumamemError as err:
                _abort(context, *status.to_status(err))
            except Exception as err:  # noqa: BLE001 - the one place that catches handler bugs
                _abort_unexpected(err, context, request_id)
            finally:
                self._finish(context, method, request_id, start, quiet)

        return wrapper

    def _finish(
        self, context: grpc.ServicerContext, method: str, request_id: str, start: float, quiet: bool
    ) -> None:
        seconds = time.perf_counter() - start
        code = _code(context)
        name = code.name if code is not None else "OK"
        (_log.debug if quiet else _log.info)(
            "rpc", code=name, ms=round(seconds * 1000, 3), request_id=request_id, method=method
        )
        for observer in self._observers:
            observer(method, name, seconds)


class _Undecodable:
    """Stands in for a request whose bytes do not parse; the handler wrapper rejects it."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


class _UndecodableMessageError(Exception):
    """Raised into a client-streaming handler at a message that does not decode."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _checked_stream(
    behavior: Callable[[Iterator[Any], grpc.ServicerContext], Any],
) -> Callable[[Any, grpc.ServicerContext], Any]:
    """``behavior`` of a client stream, its messages checked as they arrive: the handler
    sees the decoded ones, and an undecodable one ends the RPC (INVALID_ARGUMENT)."""

    def checked(requests: Iterator[Any]) -> Iterator[Any]:
        for request in requests:
            if isinstance(request, _Undecodable):
                raise _UndecodableMessageError(request.error)
            yield request

    def run(requests: Any, context: grpc.ServicerContext) -> Any:
        return behavior(checked(requests), context)

    return run


def _abort_undecodable(context: grpc.ServicerContext, error: str) -> None:
    _abort(
        context,
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request does not decode: {error}",
        status.UNDECODABLE_REQUEST,
    )


def _passthrough(data: bytes) -> bytes:
    """The response serializer once the wrapper has serialized the reply itself."""
    return data


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as err:  # noqa: BLE001 - protobuf raises DecodeError and friends
            return _Undecodable(quote(f"{type(err).__name__}: {err}", style="bare", limit=200))

    return deserialize


def _code(context: grpc.ServicerContext) -> grpc.StatusCode | None:
    """The status a handler (or grpc) already set; the stubs lack ``code()``."""
    code: grpc.StatusCode | None = cast(Any, context).code()
    return code


def _abort_unexpected(err: Exception, context: grpc.ServicerContext, request_id: str) -> None:
    """INTERNAL for a handler bug; keep a status the handler or grpc already chose."""
    code = _code(context)
    if code is not None:
        # context.abort() from grpc itself, or a generated base servicer's
        # set_code(UNIMPLEMENTED) + NotImplementedError: keep that status.
        details = cast(Any, context).details()
        text = details.decode() if isinstance(details, bytes) else (details or "")
        context.abort(code, cut_message(text))
    _log.error("unexpected error in handler", request_id=request_id, exc_info=err)
    _abort(
        context,
        grpc.StatusCode.INTERNAL,
        f"internal error (request id {request_id}); see daemon log",
        status.INTERNAL,
    )


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, reason: str) -> None:
    """End the RPC with ``code`` and ``message`` plus an ErrorInfo carrying ``reason``."""
    context.abort_with_status(status.status_with_reason(code, message, reason))
