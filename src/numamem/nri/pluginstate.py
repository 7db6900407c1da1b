"""What the NRI plugin knows between calls, shared by its event handlers and its reconciler.

One lock serializes every change of the view and the records. A runtime call holds it for its
own work, daemon RPCs included (the runtime calls a plugin one event at a time, and each RPC
ends within the call's budget); the reconciler holds it only for pure steps, never across a
daemon RPC: it takes a snapshot under the lock (with :attr:`PluginState.version`), calls the
daemon without it, and applies the result under the lock again after checking that nothing it
depends on changed. An event that cannot have the lock within its budget is not lost: its
change to the view and records is queued (:meth:`PluginState.apply_or_defer`), applied by
the next holder of the lock, and what the daemon was not told is made by the reconciliation
it asks for. Admissions and ``SyncActivePods`` never interleave
(:attr:`~numamem.nri.daemonlink.DaemonLink.gate`): a declaration of the runtime's pods made
from a snapshot never releases a container admitted after it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from numamem.errors import DeadlineExceededError, UnavailableError, UnusableInputError
from numamem.logging import get_logger
from numamem.nri.daemonlink import Budget, DaemonLink
from numamem.nri.kube import PodIdentity
from numamem.nri.options import PluginOptions
from numamem.nri.podrecord import PodRecord
from numamem.nri.problems import ProblemLog
from numamem.nri.view import RuntimeView

_log = get_logger("nri")

# Counter names (PluginState.counts).
ADMITTED = "admitted"
"""Containers created pinned."""
UNPINNED = "unpinned"
"""Containers numamem did not admit (or could not reach the daemon for) that started
unpinned (``--on-reject=unpinned``)."""
FAILED = "failed"
"""Container creations failed with numamem's reason."""
LEFT_ALONE = "left_alone"
"""Containers of Guaranteed pods left alone for what the runtime sent (logged once a kind)."""
ADOPTED = "adopted"
"""Running containers admitted by a reconciliation."""
NOT_ADOPTED = "not_adopted"
"""Running containers a reconciliation could not admit (reported; they run unpinned)."""
RESIZED = "resized"
REFUSED_RESIZES = "refused_resizes"
RELEASED = "released"
"""Containers and pods whose memory the plugin released."""


@dataclass
class PluginState:
    """See the module docstring."""

    daemon: DaemonLink
    options: PluginOptions
    view: RuntimeView = field(default_factory=RuntimeView)
    records: dict[str, PodRecord] = field(default_factory=dict)
    """Guaranteed pods by uid."""
    counts: Counter[str] = field(default_factory=Counter)
    """What the plugin did (the counter names above); changed under :attr:`counts_lock`."""
    counts_lock: threading.Lock = field(default_factory=threading.Lock)
    problems: ProblemLog = field(default_factory=lambda: ProblemLog("numamem nri"))
    lock: threading.Lock = field(default_factory=threading.Lock)
    synchronized: bool = False
    """A Synchronize came (the view is the runtime's, not only what events told)."""
    resynchronized: bool = False
    """A Synchronize replaced the view and no reconciliation has rebuilt the records from it
    yet (the names numamem holds that it does not list are to be kept)."""
    dirty: threading.Event = field(default_factory=threading.Event)
    """Set when the daemon may differ from the view (a release or an id it did not get):
    the reconciler reconciles once the daemon answers."""
    version: int = 0
    """Bumped (under :attr:`lock`) by every change the runtime's events make to the view or
    the records: a reconciliation step computed at an older version checks before it
    applies."""
    deferred: deque[Callable[[], None]] = field(default_factory=deque)
    """Changes of events that could not have the lock in time (appended and popped
    atomically); applied, in order, by the next holder of the lock."""

    @contextmanager
    def locked(self, budget: Budget) -> Iterator[None]:
        """The lock, waited for within ``budget`` (deferred changes applied first);
        ``UnavailableError`` when it is not free in time."""
        if not self.lock.acquire(timeout=max(budget.timeout("the plugin's lock") - 0.01, 0.0)):
            raise UnavailableError(
                "numamem nri's state was held by another call past the runtime's request "
                "timeout (a daemon RPC that did not answer in time)"
            )
        try:
            self._apply_deferred()
            yield
        finally:
            self.lock.release()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The lock, waited for as long as it takes (the reconciler's pure steps; deferred
        changes applied first)."""
        with self.lock:
            self._apply_deferred()
            yield

    def apply_or_defer(self, change: Callable[[], None], budget: Budget) -> bool:
        """Run ``change`` (a pure change of the view and records) under the lock within
        ``budget``; else queue it for the next holder of the lock and ask for a
        reconciliation (:attr:`dirty`). Whether it ran now."""
        try:
            with self.locked(budget):
                change()
                self.version += 1
                return True
        except (UnavailableError, DeadlineExceededError):
            self.deferred.append(change)
            self.dirty.set()
            _log.warning("NRI event applied later: the plugin's state was held past its budget")
            return False

    def changed(self) -> None:
        """The view or the records changed for an event (the caller holds :attr:`lock`)."""
        self.version += 1

    def _apply_deferred(self) -> None:
        while self.deferred:
            change = self.deferred.popleft()
            change()
            self.version += 1

    def record_for(self, identity: PodIdentity) -> PodRecord:
        """The pod's record, made on first sight; a new sandbox of a known pod (the kubelet
        re-creating it) is noted on the record."""
        record = self.records.get(identity.uid)
        if record is None:
            record = self.records[identity.uid] = PodRecord(identity)
        elif record.identity.sandbox_id != identity.sandbox_id:
            _log.info(
                "new sandbox for a known pod: its containers will be re-created",
                pod=identity.describe(),
                sandbox=identity.sandbox_id,
                previous_sandbox=record.identity.sandbox_id,
            )
            record.new_sandbox(identity)
        return record

    def left_alone(self, err: UnusableInputError, **fields: Any) -> None:
        """A container left alone for what the runtime sent: counted, logged once a kind."""
        self.count(LEFT_ALONE)
        self.problems.report(err.problem, f"NRI container left alone (not pinned): {err}", **fields)

    def count(self, name: str) -> int:
        """Add one to a counter; its new value. Any thread (a lock of its own, never waited
        for long: a runtime call counts without the plugin's lock)."""
        with self.counts_lock:
            self.counts[name] += 1
            return self.counts[name]

    def counted(self) -> dict[str, int]:
        """A copy of the counters."""
        with self.counts_lock:
            return dict(self.counts)
