"""The one mapping from numamem errors to gRPC status codes.

Handlers raise :mod:`numamem.errors` exceptions and never choose a status code
themselves; the server interceptor calls :func:`to_status` for every error that
escapes a handler.
"""

from __future__ import annotations

import grpc

from numamem import errors

# Most specific classes first: the first isinstance match wins.
_MAPPING: tuple[tuple[type[errors.NumamemError], grpc.StatusCode], ...] = (
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (errors.AllocationError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.LimitExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.PersistenceError, grpc.StatusCode.UNAVAILABLE),
    (errors.MemoryManagerError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
)


def to_status(err: errors.NumamemError) -> tuple[grpc.StatusCode, str]:
    """The status code and message for a numamem error (INTERNAL if unmapped)."""
    for cls, code in _MAPPING:
        if isinstance(err, cls):
            return code, str(err)
    return grpc.StatusCode.INTERNAL, str(err)
