"""How the memory manager persists: the :class:`StateStore` protocol and an in-memory store.

The manager hands the store one :class:`~numamem.memtypes.Snapshot` per logical operation, before
the operation is acknowledged and before the new state becomes visible; a
store that raises :class:`~numamem.errors.PersistenceError` makes the manager
drop the operation (memory and disk stay equal). The kubelet-compatible file
store lives in :mod:`numamem.checkpoint`.
"""

from __future__ import annotations

from typing import Protocol

from numamem.errors import PersistenceError
from numamem.memtypes import Snapshot, clone_machine_state


class StateStore(Protocol):
    def restore(self, policy_name: str) -> Snapshot | None:
        """The persisted state, or None when there is none yet. Raises CheckpointError
        (or StateMismatchError for a policy-name mismatch) when it cannot be used."""

    def save(self, snapshot: Snapshot) -> None:
        """Persist atomically; raise PersistenceError (nothing changed) on failure, or
        DurabilityUnknownError when the new state is in place but may not be durable."""

    def restored(self) -> None:
        """The restored state was accepted; the store may clean up (temp files and such)."""

    def close(self) -> None:
        """The daemon stops: release open descriptors (idempotent; a later save reopens)."""


class InMemoryStore:
    """A store that keeps the last snapshot in memory (persistence off, and tests).

    ``fail_next`` makes the next ``save`` raise, to test rollback.
    """

    def __init__(self, initial: Snapshot | None = None) -> None:
        self.saved: Snapshot | None = initial
        self.writes = 0
        self.fail_next: str | None = None

    def restore(self, policy_name: str) -> Snapshot | None:
        return self.saved

    def restored(self) -> None:
        return None

    def close(self) -> None:
        return None

    def save(self, snapshot: Snapshot) -> None:
        if self.fail_next is not None:
            message, self.fail_next = self.fail_next, None
            raise PersistenceError(message)
        self.writes += 1
        self.saved = Snapshot(
            snapshot.policy_name,
            clone_machine_state(snapshot.machine_state),
            {pod: dict(ctrs) for pod, ctrs in snapshot.assignments.items()},
            dict(snapshot.container_map),
            dict(snapshot.pod_names),
            dict(snapshot.pod_entries),
            dict(snapshot.exclusive),
        )
