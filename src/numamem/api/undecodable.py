"""Requests whose bytes do not decode: stood in for, so that the interceptor answers them.

grpcio itself would answer INTERNAL "Exception deserializing request!" and the handler
would never run; with :func:`tolerant` the deserializer hands the handler wrapper an
:class:`Undecodable` instead, which :mod:`numamem.api.interceptors` answers with
INVALID_ARGUMENT (reason ``UNDECODABLE_REQUEST``), of every kind of RPC: a client
stream's messages are checked as they arrive (:func:`checked_stream`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from numamem.errors import quote


class Undecodable:
    """Stands in for a request whose bytes do not parse; the handler wrapper rejects it."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


class UndecodableMessageError(Exception):
    """Raised into a client-streaming handler at a message that does not decode."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def checked_stream(
    behavior: Callable[[Iterator[Any], grpc.ServicerContext], Any],
) -> Callable[[Any, grpc.ServicerContext], Any]:
    """``behavior`` of a client stream, its messages checked as they arrive: the handler
    sees the decoded ones, and an undecodable one ends the RPC (INVALID_ARGUMENT)."""

    def checked(requests: Iterator[Any]) -> Iterator[Any]:
        for request in requests:
            if isinstance(request, Undecodable):
                raise UndecodableMessageError(request.error)
            yield request

    def run(requests: Any, context: grpc.ServicerContext) -> Any:
        return behavior(checked(requests), context)

    return run


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, answering an :class:`Undecodable` (the error, quoted) instead of
    raising."""
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as err:  # noqa: BLE001 - protobuf raises DecodeError and friends
            return Undecodable(quote(f"{type(err).__name__}: {err}", style="bare", limit=200))

    return deserialize
