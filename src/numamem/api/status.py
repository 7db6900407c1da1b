"""The one mapping from numamem errors to gRPC status codes and machine-readable reasons.

Handlers raise :mod:`numamem.errors` exceptions and never choose a status code
themselves; the server interceptor calls :func:`to_status` for every error that
escapes a handler, and :func:`status_with_reason` for the answers it gives
itself (starting, overloaded, ...).

Every error status carries a ``google.rpc.ErrorInfo`` detail (in the
``grpc-status-details-bin`` trailer, grpcio-status) with ``domain``
:data:`DOMAIN` and a stable ``reason``, so that clients need not match message
texts: :data:`REASONS` lists them; ``numamem.client.error_reason`` reads one.

Every message leaves here at most :data:`numamem.errors.MAX_MESSAGE_BYTES` long
(:func:`numamem.errors.cut_message`), so a client with gRPC's default metadata
limits always receives the real status; the messages are kept short where they
are made (:func:`numamem.errors.quote`), the cut is the last line of defence.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from numamem import errors

DOMAIN = errors.ERROR_DOMAIN

# Most specific classes first: the first isinstance match wins.
_MAPPING: tuple[tuple[type[errors.NumamemError], grpc.StatusCode, str], ...] = (
    (errors.QuantityError, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_QUANTITY"),
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
    (errors.UnsupportedResourceError, grpc.StatusCode.RESOURCE_EXHAUSTED, "UNSUPPORTED_RESOURCE"),
    (errors.ResizeInfeasibleError, grpc.StatusCode.FAILED_PRECONDITION, "RESIZE_INFEASIBLE"),
    (errors.ResizeDeferredError, grpc.StatusCode.RESOURCE_EXHAUSTED, "RESIZE_DEFERRED"),
    (errors.EmptyPodSharedPoolError, grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_POD_SHARED_POOL"),
    (errors.AllocationError, grpc.StatusCode.RESOURCE_EXHAUSTED, "ALLOCATION_FAILED"),
    (errors.SearchBudgetError, grpc.StatusCode.RESOURCE_EXHAUSTED, "SEARCH_BUDGET_EXCEEDED"),
    (errors.LimitExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED"),
    (errors.DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"),
    (errors.ConflictError, grpc.StatusCode.ABORTED, "CONCURRENT_CHANGES"),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION"),
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE"),
    (errors.DurabilityUnknownError, grpc.StatusCode.UNAVAILABLE, "DURABILITY_UNKNOWN"),
    (errors.PersistenceError, grpc.StatusCode.UNAVAILABLE, "CHECKPOINT_WRITE_FAILED"),
    (errors.StateMismatchError, grpc.StatusCode.FAILED_PRECONDITION, "STATE_MISMATCH"),
    (errors.MemoryManagerError, grpc.StatusCode.FAILED_PRECONDITION, "MEMORY_MANAGER_RULE"),
    (errors.ConfigError, grpc.StatusCode.FAILED_PRECONDITION, "CONFIGURATION"),
)

# Answers the interceptor gives itself.
STARTING = "STARTING"
STOPPING = "STOPPING"
OVERLOADED = "OVERLOADED"
DEADLINE_EXPIRED_IN_QUEUE = "DEADLINE_EXPIRED_IN_QUEUE"
UNDECODABLE_REQUEST = "UNDECODABLE_REQUEST"
INTERNAL = "INTERNAL"
REPLY_TOO_LARGE = "REPLY_TOO_LARGE"

OWN_CODES: dict[str, grpc.StatusCode] = {
    STARTING: grpc.StatusCode.UNAVAILABLE,
    STOPPING: grpc.StatusCode.UNAVAILABLE,
    OVERLOADED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DEADLINE_EXPIRED_IN_QUEUE: grpc.StatusCode.DEADLINE_EXCEEDED,
    UNDECODABLE_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    INTERNAL: grpc.StatusCode.INTERNAL,
    REPLY_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
"""The status code of each answer the interceptor gives itself (the errors' codes are in
``_MAPPING``)."""

REASONS: dict[str, str] = {
    "INVALID_QUANTITY": "a quantity does not parse or does not fit (INVALID_ARGUMENT)",
    "INVALID_ARGUMENT": "a field of the request is malformed; the message names it",
    "NOT_FOUND": "the pod, container, pool, region or metric does not exist",
    "UNSUPPORTED_RESOURCE": "a memory type (hugepage size) this machine does not have",
    "ALLOCATION_FAILED": "the memory manager cannot satisfy the request (the kubelet's text)",
    "EMPTY_POD_SHARED_POOL": (
        "AllocatePod: the pod's pod-level budget leaves nothing for its shared containers "
        "(the kubelet's EmptyPodSharedPoolError text; Admit answers it as that reason)"
    ),
    "RESIZE_INFEASIBLE": (
        "Resize: the new size cannot fit on this machine even if every other pod left, or the "
        "API server forbids the change (QoS class, hugepages); nothing was changed "
        "(FAILED_PRECONDITION: do not retry as is)"
    ),
    "RESIZE_DEFERRED": (
        "Resize: the new size would fit once other pods free memory; nothing was changed "
        "(RESOURCE_EXHAUSTED: retry later, as the kubelet retries a deferred resize)"
    ),
    "LIMIT_EXCEEDED": "a --max-* limit would be exceeded",
    "SEARCH_BUDGET_EXCEEDED": (
        "the admission's hint search or merge would exceed its work budget (docs/large-machines.md "
        "in the numamem source); the message names the budget and the input; nothing was changed"
    ),
    "DEADLINE_EXCEEDED": "the client's deadline passed during the search; nothing was changed",
    "CONCURRENT_CHANGES": (
        "other writes kept changing the state the admission was computed on; nothing was "
        "changed, retry (ABORTED)"
    ),
    "FAILED_PRECONDITION": "the system cannot answer in its state (e.g. an expired metric)",
    "UNAVAILABLE": "numamem cannot serve the request right now",
    "DURABILITY_UNKNOWN": (
        "the outcome is unknown: whether the change survives a power loss is not known (a "
        "directory sync, or the cut-off of a failed append, failed); memory equals what a "
        "restart reads, and health is NOT_SERVING until a later write succeeds"
    ),
    "CHECKPOINT_WRITE_FAILED": "the checkpoint write failed; nothing was applied",
    "STATE_MISMATCH": "the stored memory manager state does not match the machine",
    "MEMORY_MANAGER_RULE": "a memory manager rule refused the operation",
    "CONFIGURATION": "the configuration does not allow the operation",
    STARTING: "numamem is restoring its checkpoints; retry shortly (UNAVAILABLE)",
    STOPPING: "numamem is shutting down; retry against the next instance (UNAVAILABLE)",
    OVERLOADED: "--max-concurrent-rpcs requests are in flight; retry with backoff",
    DEADLINE_EXPIRED_IN_QUEUE: "the deadline passed while the request waited for a worker",
    UNDECODABLE_REQUEST: "the request bytes do not decode as the method's message",
    INTERNAL: "a bug; the message has the request id to find it in the daemon log",
    REPLY_TOO_LARGE: "the reply would exceed --max-message-bytes (RESOURCE_EXHAUSTED)",
}
"""Every ErrorInfo reason numamem sends, and what it means."""


def reason_codes() -> dict[str, grpc.StatusCode]:
    """The status code every reason of :data:`REASONS` is sent with, in that order (the
    documented reasons table is made from it and :data:`REASONS`)."""
    codes = {reason: code for _, code, reason in _MAPPING} | OWN_CODES
    return {reason: codes[reason] for reason in REASONS}


def to_status(err: errors.NumamemError) -> tuple[grpc.StatusCode, str, str]:
    """The status code, message (cut to the bound) and ErrorInfo reason for a numamem error."""
    message = errors.cut_message(str(err))
    for cls, code, reason in _MAPPING:
        if isinstance(err, cls):
            return code, message, reason
    return grpc.StatusCode.INTERNAL, message, INTERNAL


def status_with_reason(code: grpc.StatusCode, message: str, reason: str) -> grpc.Status:
    """A status for ``context.abort_with_status`` carrying an ErrorInfo with ``reason``;
    ``message`` is cut to the bound."""
    message = errors.cut_message(message)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN))
    result: grpc.Status = rpc_status.to_status(
        status_pb2.Status(code=_code_number(code), message=message, details=[detail])
    )
    return result


GRPC_DETAILS_KEY = "grpc-status-details-bin"
"""The trailer that carries the ``google.rpc.Status`` with the ErrorInfo."""


def reason_in(trailing_metadata: object) -> str:
    """The ErrorInfo reason (of :data:`DOMAIN`) in an error's trailing metadata, as
    :func:`status_with_reason` put it there; "" when there is none or it does not decode."""
    for key, value in trailing_metadata if isinstance(trailing_metadata, tuple | list) else ():
        if key != GRPC_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            details = status_pb2.Status.FromString(value)
        except DecodeError:
            return ""
        for detail in details.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == DOMAIN:
                reason: str = info.reason
                return reason
    return ""


def _code_number(code: grpc.StatusCode) -> int:
    """google.rpc.Code and grpc.StatusCode number the codes alike."""
    number: int = code_pb2.Code.Value(code.name)
    return number
