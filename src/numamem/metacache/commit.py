"""The metacache's group commit: writers queue, one of them writes for all.

Writers serialise on one mutation lock (:attr:`GroupCommit.writer_lock`), compute the
new state copy-on-write from the latest *pending* state (which includes writes not yet
durable), and then wait in :meth:`GroupCommit._wait_durable` until a checkpoint holding
their change is on disk: the first waiting writer becomes the committer of a *round*
and writes the newest pending state for every writer queued so far, so under load one
fsync covers many operations. Only then is the write acknowledged and visible to
readers. The round's disk write runs with no lock held; every later writer waits for it.

A failed round drops every pending change (memory goes back to the last durable
state) and each writer learns its own round's outcome (see
:mod:`numamem.metacache.cache` for what a failure or an unknown outcome means).

Liveness: :meth:`GroupCommit.commit_running_for` says how long the round in progress has
been writing, without a lock, so that the daemon's watchdog
(:mod:`numamem.api.watchdog`) stops pinging while a disk write hangs (a hung fsync
holds no lock the probe could wait for, yet every write waits for it).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from numamem.errors import DurabilityUnknownError, PersistenceError, quote
from numamem.metacache.state import NoPersistence, Persister, State


class GroupCommit:
    """The commit machinery of :class:`~numamem.metacache.cache.MetaCache` (see the module).

    ``monotonic`` times commit rounds (seconds). Attributes: ``_mutation`` guards
    ``_pending``, ``_seq`` and ``_dirty`` and is held only while computing a change;
    ``_commit`` guards ``_durable``, ``_failed_upto``, ``_committing`` and the
    publication of ``_committed``.
    """

    def __init__(
        self,
        persister: Persister | None,
        initial: State | None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._persister = persister or NoPersistence()
        self._monotonic = monotonic
        self._committed = initial or State()
        self._mutation = threading.Lock()
        self._pending = self._committed
        self._seq = 0
        self._dirty: set[str] = set()
        """Pods changed in the pending state since the last commit (what a journal writes)."""
        self._commit = threading.Condition()
        self._durable = 0
        self._failed_upto = 0
        self._committing = False
        self._round_started: float | None = None
        """When the round in progress began (``monotonic``), None between rounds."""
        self._unknown_rounds: collections.deque[tuple[int, int, str]] = collections.deque(
            maxlen=1024
        )
        """(first seq - 1, last seq, message) of recent rounds whose durability is unknown."""
        self._failed_rounds: collections.deque[tuple[int, int, str, bool]] = collections.deque(
            maxlen=1024
        )
        """(first seq - 1, last seq, message, outcome unknown) of recent failed rounds: each
        writer learns its own round's outcome, however many rounds failed since."""
        self.commits = 0

    @property
    def writer_lock(self) -> threading.Lock:
        """The lock a writer holds while it computes a change. Only for a liveness probe:
        acquire it with a timeout, release it at once, call nothing inside."""
        return self._mutation

    def commit_running_for(self) -> float:
        """Seconds the commit round in progress has been running (0.0 between rounds).

        Takes no lock and calls nothing but the clock: a liveness probe may call it while a
        round is wedged. A healthy round lasts one journal append and fsync (milliseconds)."""
        started = self._round_started
        return 0.0 if started is None else max(0.0, self._monotonic() - started)

    def _wait_durable(self, target: int) -> None:
        """Return once a checkpoint holds change ``target``; commit it ourselves if nobody is."""
        while True:
            with self._commit:
                while self._committing and self._durable < target and self._failed_upto < target:
                    self._commit.wait()
                if self._durable >= target:
                    for low, high, message in self._unknown_rounds:
                        if low < target <= high:
                            raise DurabilityUnknownError(message)
                    return
                if self._failed_upto >= target:
                    raise self._failure_of(target)
                self._committing = True
                self._round_started = self._monotonic()
            # This thread writes everything pending so far: one fsync for every queued writer.
            with self._mutation:
                state, seq, dirty = self._pending, self._seq, self._dirty
                self._dirty = set()
            error: PersistenceError | None = None
            saved = False
            try:
                try:
                    self._persister.save(state, dirty)
                except PersistenceError as err:
                    error = err
                except Exception as err:  # noqa: BLE001 - any failure ends the round
                    # Not the persister's contract: what reached the disk is unknown, so the
                    # change is not applied and its pods are written again with the next one.
                    error = DurabilityUnknownError(
                        f"the metacache persister failed unexpectedly: {quote(repr(err), style='bare')}; the outcome is "
                        "unknown",
                        applied=False,
                    )
                saved = True
            finally:
                # Whatever happened (even an interrupt), the round ends and its writers learn
                # it: nobody waits for a committer that is gone.
                self._finish_round(state, seq, dirty, error if saved else None, saved)

    def _finish_round(
        self,
        state: State,
        seq: int,
        dirty: set[str],
        error: PersistenceError | None,
        saved: bool,
    ) -> None:
        with self._mutation, self._commit:
            applied = saved and (
                error is None or (isinstance(error, DurabilityUnknownError) and error.applied)
            )
            if applied:
                # On disk (durably, or of unknown durability): a restart reads this state, so
                # memory follows it; the writers of this round learn the outcome.
                if error is not None:
                    self._unknown_rounds.append((self._durable, seq, str(error)))
                self._durable = seq
                self._committed = state
                self.commits += 1
            else:
                # Memory goes back to the last durable state: every pending change is dropped,
                # including those queued after this snapshot (they were built on top of it).
                if error is None:
                    error = DurabilityUnknownError(
                        "the metacache commit was interrupted; what reached the disk is unknown",
                        applied=False,
                    )
                unknown = isinstance(error, DurabilityUnknownError)
                message = f"{error}; pending metacache changes were dropped"
                low = max(self._durable, self._failed_upto)
                self._failed_rounds.append((low, self._seq, message, unknown))
                self._failed_upto = self._seq
                self._pending = self._committed
                self._dirty = dirty | self._dirty if unknown else set()
            self._committing = False
            self._round_started = None
            self._commit.notify_all()

    def _failure_of(self, target: int) -> PersistenceError:
        """What the writer of change ``target`` learns of the failed round that dropped it."""
        for low, high, message, unknown in reversed(self._failed_rounds):
            if low < target <= high:
                if unknown:
                    return DurabilityUnknownError(message, applied=False)
                return PersistenceError(message)
        return DurabilityUnknownError(
            "the metacache commit of this change failed; its outcome is no longer known",
            applied=False,
        )
