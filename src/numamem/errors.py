"""The one exception hierarchy of numamem.

Every error the daemon raises on purpose derives from :class:`NumamemError`.
The class says *what kind* of failure it is; the single mapping to gRPC status
codes lives in :mod:`numamem.api.status`, nothing else chooses a status code.

Messages name the field and the bad value and, where an operator has to act,
what to do. Upstream (kubelet, katalyst) texts are kept verbatim where clients
or operators match on them; the message is then the upstream text, optionally
followed by context after a colon.

Every value a message quotes (and every request value a log line carries) goes
through :func:`quote`, which escapes control characters and keeps at most
:data:`QUOTE_BYTES` of it; so no message exceeds :data:`MAX_MESSAGE_BYTES`,
which :mod:`numamem.api.status` enforces once more on the way out.
"""

from __future__ import annotations

import os
from typing import Literal

QUOTE_BYTES = 96
"""A quoted value keeps at most this many bytes (UTF-8, after escaping) of the value."""

PATH_QUOTE_BYTES = 512
"""The limit for the operator's own file and socket paths: a real path is never shortened."""

MAX_MESSAGE_BYTES = 1024
"""The most UTF-8 bytes of any status message numamem sends.

On the wire the message travels twice in the trailers: percent-encoded in
``grpc-message`` (at most 3 bytes per byte: 3 KiB) and base64-encoded inside the
``google.rpc.Status`` of ``grpc-status-details-bin`` (about 1.4 KiB with the
ErrorInfo), so an error's trailers stay under 5 KiB, well under the 8 KiB soft
and 16 KiB hard limits of a client with gRPC's default settings. The source of a
message keeps it short by quoting with :func:`quote`; :func:`cut_message` is the
last line of defence.
"""

CUT_MARK = " ... (message cut)"
"""What :func:`cut_message` appends: a message that carries it quoted a value without
:func:`quote` (a defect to fix where the message is made)."""

QuoteStyle = Literal["python", "go", "bare"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_GO_NAMED = {**_NAMED, "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def quote(value: object, *, style: QuoteStyle = "python", limit: int = QUOTE_BYTES) -> str:
    """``value`` quoted for a message or a log line: a string (or a path) in ``style``,
    anything else as its ``repr()`` (``42``, ``None``, ``{'a': 1}``), escaped and bounded alike.

    * ``python``: as ``repr()`` of a string (``'pod-1'``), for numamem's own messages;
    * ``go``: as Go's ``%q`` (``"pod-1"``), for upstream texts and field paths with keys
      (``requests["memory"]``);
    * ``bare``: the escaped text without quotes, for upstream texts that print a value
      with ``%s`` and for log fields.

    Backslashes, the quote mark and every non-printable character are escaped
    (``\\n``, ``\\x00``, ``\\u200b``). A value whose escaped form has more than ``limit``
    UTF-8 bytes is shortened to a prefix of at most ``limit`` bytes, an ellipsis and
    its length in characters: ``'aaaa'... (65536 characters)``; a quoted value is
    therefore at most ``limit`` + 40 bytes. Pure; costs O(``limit``) however long the
    value. A short printable string without backslashes quotes exactly as ``repr()``
    (``python``) or as itself (``bare``).
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        value, style = repr(value), "bare"
    text = value
    if len(text) <= limit and text.isascii() and text.isprintable() and "\\" not in text:
        # The common case, in C: nothing to escape, nothing to cut (one byte per character).
        if style == "bare":
            return text
        if style == "go":
            if '"' not in text:
                return f'"{text}"'
        elif "'" not in text:
            return f"'{text}'"
    head = text[: limit + 1]  # every character escapes to at least one byte
    if style == "python":
        mark = '"' if "'" in head and '"' not in head else "'"
    else:
        mark = '"' if style == "go" else ""
    named = _GO_NAMED if style == "go" else _NAMED
    pieces: list[str] = []
    used = 0
    for ch in head:
        piece = _escape(ch, mark, named)
        used += len(piece.encode())
        if used > limit:
            return f"{mark}{''.join(pieces)}{mark}... ({len(text)} characters)"
        pieces.append(piece)
    return f"{mark}{''.join(pieces)}{mark}"


def _escape(ch: str, mark: str, named: dict[str, str]) -> str:
    if ch in ("\\", mark):
        return "\\" + ch
    if ch.isprintable():
        return ch
    if ch in named:
        return named[ch]
    n = ord(ch)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def cut_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` if it has at most ``limit`` UTF-8 bytes, else its longest prefix that
    fits with :data:`CUT_MARK` appended (cut at a character boundary). Pure."""
    encoded = message.encode()
    if len(encoded) <= limit:
        return message
    head = encoded[: limit - len(CUT_MARK)].decode(errors="ignore")
    return head + CUT_MARK


ERROR_DOMAIN = "numamem.v1"
"""The ``google.rpc.ErrorInfo`` domain of numamem's error statuses (:mod:`numamem.api.status`
sends it; :func:`numamem.client.error_reason` reads it): here, below both, so that a client
needs nothing of the server to read a reason."""


class NumamemError(Exception):
    """Base of every deliberate numamem error."""


# --- input and configuration -------------------------------------------------


class InvalidArgumentError(NumamemError):
    """A request or value is malformed (bad quantity, unknown field, ...)."""


class QuantityError(InvalidArgumentError):
    """A Kubernetes quantity string does not parse or does not fit."""


class ConfigError(NumamemError):
    """Configuration is invalid; the daemon refuses to start."""


class StartupError(NumamemError):
    """The daemon cannot start: lock held, socket path occupied, bad permissions."""


class TopologyError(NumamemError):
    """The sysfs NUMA description cannot be parsed; the daemon refuses to start."""


# --- lookups and limits --------------------------------------------------------


class NotFoundError(NumamemError):
    """The addressed entry (pod, container, pool, region, metric) does not exist."""


class LimitExceededError(NumamemError):
    """A configured limit (pods, containers, entries) would be exceeded."""


class SearchBudgetError(LimitExceededError):
    """A search would exceed its documented work budget (:data:`numamem.work.SEARCH_BUDGET`).

    Refused rather than approximated or left running; the message names the
    budget and the input that reached it. Nothing was changed.
    """


class DeadlineExceededError(NumamemError):
    """The caller's deadline passed while the operation searched; nothing was changed."""


class ConflictError(NumamemError):
    """Concurrent changes kept invalidating an optimistic operation; nothing was changed.

    Retrying is safe (the operation is idempotent or was not applied).
    """


class FailedPreconditionError(NumamemError):
    """The request is well-formed but the system is not in a state to answer it."""


class UnavailableError(NumamemError):
    """The daemon is starting, shutting down, or cannot persist right now."""


class CgroupFormatError(FailedPreconditionError):
    """A kernel cgroup file does not have the kernel's format; the message names the file
    and the line. Reported per container (the collector goes on), never an RPC failure."""


class CgroupPathError(FailedPreconditionError):
    """A cgroup file numamem was to write is not inside the containers' part of the tree
    (``kubepods``, ``kubepods.slice``) once symlinks are resolved: nothing was written.
    Reported per container as a failed write, never an RPC failure."""


# --- memory manager ------------------------------------------------------------


class MemoryManagerError(NumamemError):
    """A memory manager rule refused the operation (kubelet error text)."""


class AllocationError(MemoryManagerError):
    """Memory cannot be allocated as requested (kubelet Allocate error text)."""


class UnsupportedResourceError(AllocationError):
    """A container requests a memory type (hugepage size) the machine does not have."""


class EmptyPodSharedPoolError(AllocationError):
    """A pod's pod-level budget leaves nothing for the containers that share it (the kubelet's
    ``validatePodScopeResources``, KEP-5526). Admission refuses the pod with the kubelet's
    reason :attr:`admission_reason` and this text."""

    admission_reason = "EmptyPodSharedPoolError"


class ResizeError(MemoryManagerError):
    """An in-place resize of a container's pinned memory was refused; nothing was changed.

    The message starts with the kubelet's resize vocabulary (:attr:`verdict`, the reason
    of its ``PodResizePending`` condition) and says why and what would let it proceed."""

    verdict = ""


class ResizeInfeasibleError(ResizeError):
    """The resize cannot be done on this machine even if every other pod left (or the API
    server forbids it: a QoS or hugepage change). FAILED_PRECONDITION: do not retry as is."""

    verdict = "Infeasible"


class ResizeDeferredError(ResizeError):
    """The resize would fit once other pods free memory. RESOURCE_EXHAUSTED: retry later,
    as the kubelet retries a deferred resize."""

    verdict = "Deferred"


class ReservedMemoryError(ConfigError):
    """The reserved-memory configuration contradicts the machine or node allocatable."""


class StateMismatchError(MemoryManagerError):
    """A restored memory manager state does not match the machine (validateState)."""


# --- checkpoints ----------------------------------------------------------------


class CheckpointError(NumamemError):
    """A checkpoint cannot be read, decoded or verified."""


class CheckpointNotFoundError(CheckpointError):
    """The checkpoint file does not exist (kubelet: "checkpoint is not found")."""

    def __init__(self, message: str = "checkpoint is not found") -> None:
        super().__init__(message)


class CorruptCheckpointError(CheckpointError):
    """The checksum does not match (kubelet: "checkpoint is corrupted")."""

    def __init__(self, expected: int | None = None, actual: int | None = None) -> None:
        super().__init__("checkpoint is corrupted")
        self.expected = expected
        self.actual = actual


class PersistenceError(NumamemError):
    """A checkpoint write failed; the operation was not applied."""


class DurabilityUnknownError(PersistenceError):
    """Whether the change survives a power loss is unknown, so it is not acknowledged.

    Usually the new checkpoint replaced the old one but syncing its directory failed:
    the files hold the change, a restart would read it, and memory follows it
    (``applied``). Where what a restart reads is the state *before* the change (an
    append whose fsync failed was cut off again, but the cut could not be synced),
    ``applied`` is False and memory stays as it was. Either way memory equals what
    a restart reads, and the daemon reports NOT_SERVING until a later write succeeds.
    """

    def __init__(self, message: str, *, applied: bool = True) -> None:
        super().__init__(message)
        self.applied = applied


# --- the NRI plugin ----------------------------------------------------------------


class NriStatusError(NumamemError):
    """An NRI (ttrpc) call answered with an error status: raised by a call the peer refused,
    and raised by a plugin handler to answer with that status.

    ``code`` is a gRPC status code number (ttrpc carries a google.rpc.Status): a handler
    raises it to choose the code (12, Unimplemented, makes containerd 2.x deliver that
    lifecycle event through StateChange); any other exception of a handler is answered
    2 (Unknown) with its message, as ttrpc answers a Go error.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class UnusableInputError(InvalidArgumentError):
    """The runtime sent something the NRI plugin cannot use (a cgroup layout it does not
    know, a Guaranteed pod's container without limits, ...): the plugin logs it once and
    leaves the container alone. ``problem`` is a stable identifier of the kind."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class DaemonRefusedError(NumamemError):
    """The daemon answered an RPC of a client (the NRI plugin) with an error status other
    than unavailability: ``code`` is the gRPC status code's name, ``reason`` its ErrorInfo
    reason ("" when it has none), the message the daemon's."""

    def __init__(self, code: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class NriConnectionError(UnavailableError):
    """The NRI connection to the runtime is not established or was closed; a call sent
    before the close may or may not have been applied."""
