"""structlog configuration: JSON lines on stderr (or a console renderer for humans).

Every event carries an ISO-8601 UTC timestamp and its level. Per-RPC fields
(``request_id``, ``method``) are bound in contextvars by the server
interceptor; grpcio runs the interceptor and the handler in the same
per-RPC context, so handler log lines carry them too.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, TextIO, cast

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("json", "console")


class HeldStream:
    """Holds what is written until :meth:`release` (then writes it and passes through) or
    :meth:`discard` (then drops it and passes through).

    The daemon holds its log lines until it serves: a start that is refused
    prints only its one-line refusal, and the held lines are dropped.
    Thread-safe.
    """

    def __init__(self, target: TextIO) -> None:
        self._target = target
        self._held: list[str] | None = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if self._held is not None:
                self._held.append(text)
                return len(text)
        return self._target.write(text)

    def flush(self) -> None:
        self._target.flush()

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
            for text in held:
                self._target.write(text)
        self._target.flush()

    def discard(self) -> None:
        with self._lock:
            self._held = None


def configure(
    level: str = "info",
    fmt: str = "json",
    stream: TextIO | HeldStream | None = None,
    *,
    cache: bool = True,
) -> None:
    """Configure structlog process-wide. Idempotent; the last call wins.

    ``cache=False`` keeps loggers reconfigurable (tests use ``structlog.testing.capture_logs``).
    ``stream`` may be a :class:`HeldStream`.
    """
    level_no = logging.getLevelNamesMapping()[level.upper()]
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        exc_processors: list[Any] = []
    else:
        renderer = structlog.processors.JSONRenderer()
        exc_processors = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            *exc_processors,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, stream or sys.stderr)),
        cache_logger_on_first_use=cache,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger that names its component in every event."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
