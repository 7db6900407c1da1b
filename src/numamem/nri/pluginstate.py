"""What the NRI plugin knows between calls, shared by its event handlers and its reconciler.

One lock serializes every change of the view, the records and the daemon's state made for
the runtime (an admission, a release, a reconciliation step), so that a reconciliation never
declares the pods of a view an admission is changing. A runtime call waits for it no longer
than its budget; the plugin's own work takes it one pod at a time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from numamem.errors import UnavailableError, UnusableInputError
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
    """What the plugin did (the counter names above); changed under :attr:`lock`."""
    problems: ProblemLog = field(default_factory=lambda: ProblemLog("numamem nri"))
    lock: threading.Lock = field(default_factory=threading.Lock)
    synchronized: bool = False
    """A Synchronize came (the view is the runtime's, not only what events told)."""
    dirty: threading.Event = field(default_factory=threading.Event)
    """Set when the daemon may differ from the view (a release or an id it did not get):
    the reconciler reconciles once the daemon answers."""

    @contextmanager
    def locked(self, budget: Budget) -> Iterator[None]:
        """The lock, waited for within ``budget``; ``UnavailableError`` when it is not free
        in time (a reconciliation or a slow daemon holds it)."""
        if not self.lock.acquire(timeout=max(budget.timeout("the plugin's lock") - 0.01, 0.0)):
            raise UnavailableError(
                "numamem nri is busy (a reconciliation or a slow daemon call holds it past "
                "the runtime's request timeout); the runtime retries"
            )
        try:
            yield
        finally:
            self.lock.release()

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
        """Add one to a counter (the caller holds :attr:`lock`); its new value."""
        self.counts[name] += 1
        return self.counts[name]
