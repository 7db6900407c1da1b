"""The one exception hierarchy of numamem.

Every error the daemon raises on purpose derives from :class:`NumamemError`.
The class says *what kind* of failure it is; the single mapping to gRPC status
codes lives in :mod:`numamem.api.status`, nothing else chooses a status code.

Messages name the field and the bad value and, where an operator has to act,
what to do. Upstream (kubelet, katalyst) texts are kept verbatim where clients
or operators match on them; the message is then the upstream text, optionally
followed by context after a colon.
"""

from __future__ import annotations


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


# --- memory manager ------------------------------------------------------------


class MemoryManagerError(NumamemError):
    """A memory manager rule refused the operation (kubelet error text)."""


class AllocationError(MemoryManagerError):
    """Memory cannot be allocated as requested (kubelet Allocate error text)."""


class UnsupportedResourceError(AllocationError):
    """A container requests a memory type (hugepage size) the machine does not have."""


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
    """The new checkpoint replaced the old one, but syncing its directory failed.

    The file holds the change (memory follows it: a restart would read it), but
    whether it survives a power loss is unknown, so the operation is not
    acknowledged. The daemon reports NOT_SERVING until a later write succeeds.
    """
