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
* logs one line: method, code, duration in ms, request id and what
  :mod:`numamem.api.rpclog` reads from the request, the reply and the status (the pod
  and containers, the decision and its NUMA nodes, an error's ErrorInfo reason and
  message). Payloads are never logged beyond that. Health checks log at debug (probes
  would flood) with no more than the code, and so does every RPC of a server built with
  ``log_rpcs=False``.

The main socket's server and the podresources socket's server both use it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, cast

import grpc
import structlog

from numamem.api import rpclog, status
from numamem.api.readiness import PHASE_MESSAGES, Phase, Readiness
from numamem.api.undecodable import Undecodable, UndecodableMessageError, checked_stream
from numamem.api.undecodable import tolerant as _tolerant
from numamem.errors import NumamemError, cut_message, quote
from numamem.logging import get_logger
from numamem.work import Courtesy

__all__ = ["Phase", "Readiness", "RpcObserver", "ServerInterceptor"]
"""Readiness and Phase live in :mod:`numamem.api.readiness`; their users import them here."""

_log = get_logger("rpc")

HEALTH_PREFIX = "/grpc.health.v1.Health/"
FAST_EXCLUDED = frozenset({"/grpc.health.v1.Health/Watch"})
"""Watch streams hold a thread for their lifetime: they stay on the main pool."""
REFLECTION_PREFIX = "/grpc.reflection."
REQUEST_ID_KEY = "x-request-id"

RpcObserver = Callable[[str, str, float], None]
"""Called after each RPC with (method, status code name, seconds)."""


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
                checked_stream(handler.stream_unary), method, request_id, gated, quiet
            )
            if overloaded:
                unary = self._wrap_unary(self._refuse, method, request_id, False, False)
            return handler._replace(request_deserializer=deserializer, stream_unary=unary)
        if handler.stream_stream is not None:
            stream = self._wrap_stream(
                checked_stream(handler.stream_stream), method, request_id, gated, quiet
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
        _answer(
            context,
            f"numamem already has {self._max_in_flight} requests running or queued "
            "(--max-concurrent-rpcs); retry with backoff",
            status.OVERLOADED,
        )

    def _refuse_stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._refuse(request, context)
        yield None

    def _gate(self, request: Any, context: grpc.ServicerContext, gated: bool) -> None:
        if isinstance(request, Undecodable):
            _abort_undecodable(context, request.error)
        if gated and self._readiness is not None:
            phase = self._readiness.phase
            if phase is not Phase.READY:
                message, reason = PHASE_MESSAGES[phase]
                _answer(context, message, reason)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            _answer(
                context,
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
            _answer(
                context,
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
            response = None
            if courtesy is not None:
                courtesy.begin()
            with rpclog.recording() as attached:
                try:
                    with _Answering(context, request_id):
                        self._gate(request, context, gated)
                        response = behavior(request, context)
                        return self._serialized(response, serialize, context)
                finally:
                    if courtesy is not None:
                        courtesy.end()
                    self._finish(
                        context, method, request_id, start, quiet, (request, response, attached)
                    )

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
                with _Answering(context, request_id):
                    self._gate(request, context, gated)
                    for response in behavior(request, context):
                        yield self._serialized(response, serialize, context)
            finally:
                self._finish(context, method, request_id, start, quiet, (request, None, None))

        return wrapper

    def _finish(
        self,
        context: grpc.ServicerContext,
        method: str,
        request_id: str,
        start: float,
        quiet: bool,
        call: tuple[Any, Any, dict[str, Any] | None],
    ) -> None:
        """Log the call's one line and tell the observers. ``call``: the request, the reply
        (None when there was none) and what the servicer attached (:mod:`numamem.api.rpclog`:
        whom the call was about, what was decided, an error's reason and message)."""
        seconds = time.perf_counter() - start
        code = _code(context)
        name = code.name if code is not None else "OK"
        extra: dict[str, Any] = {}
        if not quiet:
            error = None
            if code is not None and code is not grpc.StatusCode.OK:
                error = (status.reason_in(_trailers(context)), _details(context))
            extra = rpclog.fields(*call, error=error)
        (_log.debug if quiet else _log.info)(
            "rpc",
            code=name,
            ms=round(seconds * 1000, 3),
            request_id=request_id,
            method=method,
            **extra,
        )
        for observer in self._observers:
            observer(method, name, seconds)


class _Answering:
    """Ends the RPC with the status of the exception that leaves the block: INVALID_ARGUMENT
    for a message that does not decode, a :class:`~numamem.errors.NumamemError`'s own status
    and reason (:func:`numamem.api.status.to_status`), INTERNAL for anything else (a handler
    bug: logged with its traceback, never taking the daemon down). The one place a handler's
    exceptions become statuses, for unary and streaming RPCs alike. ``BaseException`` s that
    are not ``Exception`` s (a closed stream's ``GeneratorExit``) pass through."""

    __slots__ = ("_context", "_request_id")

    def __init__(self, context: grpc.ServicerContext, request_id: str) -> None:
        self._context = context
        self._request_id = request_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, err: BaseException | None, trace: object) -> bool:
        if not isinstance(err, Exception):
            return False
        if isinstance(err, UndecodableMessageError):
            _abort_undecodable(self._context, err.error)
        elif isinstance(err, NumamemError):
            _abort(self._context, *status.to_status(err))
        else:
            _abort_unexpected(err, self._context, self._request_id)
        return True


def _abort_undecodable(context: grpc.ServicerContext, error: str) -> None:
    _answer(
        context,
        f"the request does not decode: {error}",
        status.UNDECODABLE_REQUEST,
    )


def _passthrough(data: bytes) -> bytes:
    """The response serializer once the wrapper has serialized the reply itself."""
    return data


def _code(context: grpc.ServicerContext) -> grpc.StatusCode | None:
    """The status a handler (or grpc) already set; the stubs lack ``code()``."""
    code: grpc.StatusCode | None = cast(Any, context).code()
    return code


def _details(context: grpc.ServicerContext) -> str:
    """The status message a handler (or grpc) already set ("" when none)."""
    details = cast(Any, context).details()
    return details.decode(errors="replace") if isinstance(details, bytes) else (details or "")


def _trailers(context: grpc.ServicerContext) -> object:
    """The trailing metadata set so far (the ErrorInfo of an abort is in it)."""
    return cast(Any, context).trailing_metadata()


def _abort_unexpected(err: Exception, context: grpc.ServicerContext, request_id: str) -> None:
    """INTERNAL for a handler bug; keep a status the handler or grpc already chose."""
    code = _code(context)
    if code is not None:
        # context.abort() from grpc itself, or a generated base servicer's
        # set_code(UNIMPLEMENTED) + NotImplementedError: keep that status.
        context.abort(code, cut_message(_details(context)))
    _log.error("unexpected error in handler", request_id=request_id, exc_info=err)
    _answer(
        context,
        f"internal error (request id {request_id}); see daemon log",
        status.INTERNAL,
    )


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, reason: str) -> None:
    """End the RPC with ``code`` and ``message`` plus an ErrorInfo carrying ``reason``."""
    context.abort_with_status(status.status_with_reason(code, message, reason))


def _answer(context: grpc.ServicerContext, message: str, reason: str) -> None:
    """End the RPC with one of the interceptor's own answers: ``reason``'s code
    (:data:`numamem.api.status.OWN_CODES`), ``message`` and an ErrorInfo carrying ``reason``."""
    _abort(context, status.OWN_CODES[reason], message, reason)
