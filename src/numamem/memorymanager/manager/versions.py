"""The committed versions of the memory manager's state: how a change becomes one.

A change is made on a fork of the committed :class:`MemoryState` (a private
copy), and becomes the next :class:`Committed` version in three steps under
one lock: the ``max_pods`` limit is checked, the whole new state goes to the
:class:`~numamem.memorymanager.state.store.StateStore` in **one** write, and the new
version is published in one assignment. A change that changes nothing writes
and publishes nothing. When the operation or the write fails, the fork is
dropped: memory and disk stay equal, and nothing is half-applied. (The kubelet
writes after every sub-step and ignores write errors:
kubernetes/kubernetes#141993.) When the write put the new state in place but
could not sync its directory (:class:`~numamem.errors.DurabilityUnknownError`),
the new state is published, since it is what a restart reads, and the error
still reaches the caller: the outcome is unknown.

Two ways to make a change:

* :meth:`Versions.transaction`: the caller holds the lock for the whole change
  (RemoveContainer, ReleasePod, SyncActivePods, AddContainer: no searches);
* :meth:`Versions.optimistic`: the change is computed on a fork of the current
  version *outside* the lock, and the lock is taken only to commit it, if that
  version is still the current one (Admit and Allocate, which search). After a
  conflict the change is computed again on the new version: at once under the
  lock when the first computation was cheap (at most :data:`LOCKED_STEPS` search
  steps, as nearly every admission is; a recomputation that turns out costlier
  stops at that many and goes back outside), else outside it, at most
  :data:`ATTEMPTS` times in all, after which it is refused with
  :class:`~numamem.errors.ConflictError` (ABORTED, reason ``CONCURRENT_CHANGES``,
  nothing changed; retrying is safe). So an expensive admission holds the lock
  only to write, and never delays the other writers by more than
  :data:`LOCKED_STEPS` steps. Each computation is charged to its own
  :class:`~numamem.work.Work` (the search budget, and the caller's deadline: past
  it the change raises DeadlineExceededError and is not committed; the deadline
  is checked once more just before the write).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from numamem.errors import (
    ConflictError,
    DurabilityUnknownError,
    LimitExceededError,
    SearchBudgetError,
    quote,
)
from numamem.memorymanager.manager.containermap import ContainerMap
from numamem.memorymanager.state.model import MemoryState, StateView
from numamem.memorymanager.state.store import StateStore
from numamem.memtypes import Snapshot
from numamem.pod import Pod
from numamem.work import Work

T = TypeVar("T")

ATTEMPTS = 4
"""Computations of one optimistic change (the first included) before ConflictError."""
LOCKED_STEPS = 10_000
"""Search steps a recomputation may take under the lock after a conflict (about 1 ms, without
pauses): an admission of pods that fit one node takes 20 steps on 2 nodes to 400 on 64, the
40-node prefer-closest pod of issue 25 about 5,000. Costlier ones always compute outside."""

Names = Mapping[str, tuple[str, str]]


@dataclass(frozen=True, eq=False)
class Committed:
    """One committed version of the manager, published as a whole: readers take it once and
    see a state, its container map and its pod names from the same commit (never a mix).

    Nothing inside is mutated after publication. ``version`` grows by one per commit.
    """

    state: MemoryState
    view: StateView
    containers: ContainerMap
    names: Names
    """Pod uid -> (namespace, name) of pods with state, oldest recording first (a pod
    re-created under a name another uid still holds is the last of that name)."""
    version: int


class Versions:
    """The current :class:`Committed` version and the lock its writers commit under."""

    def __init__(
        self,
        store: StateStore,
        policy_name: str,
        max_pods: int | None = None,
        record_pod_names: bool = False,
    ) -> None:
        self.store = store
        self.lock = threading.Lock()
        """Serialises writers; held across the store's write."""
        self._policy_name = policy_name
        self._max_pods = max_pods
        self._record_names = record_pod_names
        empty = MemoryState()
        self.current = Committed(empty, StateView(empty), ContainerMap(), {}, 0)
        """The committed version (read without the lock: it is replaced, never changed)."""

    def snapshot(self, state: MemoryState, containers: ContainerMap, names: Names) -> Snapshot:
        return Snapshot(
            self._policy_name,
            state.machine_view(),
            state.pods_view(),
            containers.as_dict(),
            names,
            state.pod_entries_view(),
            state.exclusive_view(),
        )

    def publish(self, state: MemoryState, containers: ContainerMap, names: Names) -> None:
        """Publish the next version in one assignment (readers never see half of it)."""
        self.current = Committed(
            state, StateView(state), containers, names, self.current.version + 1
        )

    @contextlib.contextmanager
    def transaction(self, pod: Pod | None = None) -> Iterator[tuple[MemoryState, ContainerMap]]:
        """Fork, run the body, then :meth:`commit`. The caller holds the lock.

        An exception from the body drops the fork. With ``record_pod_names``, ``pod``'s
        namespace and name are kept while it has state.
        """
        work = self.current.state.fork()
        containers = self.current.containers.copy()
        yield work, containers
        self.commit(work, containers, pod)

    def commit(self, work: MemoryState, containers: ContainerMap, pod: Pod | None) -> None:
        """Check the pod limit, then write and publish ``work`` (a fork of the current
        version) when it changed something. The caller holds the lock. ``containers`` is
        published as it is and never changed here: a committed map itself when the change
        leaves the map alone (an optimistic change, which changes only its fork)."""
        self._check_pod_limit(work)
        current = self.current
        names = self._names_after(work, pod)
        if (
            work.same_as(current.state)
            and containers == current.containers
            and names == current.names
        ):
            return  # nothing changed: nothing to write, no new version
        try:
            self.store.save(self.snapshot(work, containers, names))
        except DurabilityUnknownError as err:
            if err.applied:  # a restart reads the new state: memory follows it
                self.publish(work, containers, names)
            raise
        self.publish(work, containers, names)

    def optimistic(
        self,
        pod: Pod,
        compute: Callable[[MemoryState, Work], tuple[bool, T]],
        deadline: float | None,
        budget: int | None,
        finish: Callable[[MemoryState, ContainerMap], None] | None = None,
    ) -> T:
        """Run ``compute`` on a fork of the current version outside the lock and commit the
        fork (when it returns True with its value) if that version is still current; see
        the module docstring for the retries. ``compute`` may only change its fork.

        ``finish`` (no search: it runs under the lock) completes a change ``compute``
        returned True for, on the fork and a copy of the current container map, in the
        same commit (Admit's container ids); an exception from it drops the change."""
        limit = Work(budget).limit
        cheap = False
        for _ in range(ATTEMPTS):
            if cheap:
                with self.lock:
                    # No pauses: the writers wait for this lock, not for the interpreter.
                    locked = Work(min(LOCKED_STEPS, limit), deadline, pause=False)
                    fork = self.current.state.fork()
                    try:
                        changed, value = compute(fork, locked)
                    except SearchBudgetError:
                        if limit <= LOCKED_STEPS:
                            raise  # the change's own budget, not the lock's
                        cheap = False  # costlier on this version: back outside the lock
                    else:
                        locked.check_deadline()
                        if changed:
                            self._finish_and_commit(fork, pod, finish)
                        return value
            base = self.current
            work = Work(limit, deadline, courteous=True)  # no lock held: give way to calls
            fork = base.state.fork()
            changed, value = compute(fork, work)
            work.check_deadline()
            if not changed:
                return value  # nothing to commit: the answer of version ``base``
            with self.lock:
                if self.current.version == base.version:
                    work.check_deadline()
                    self._finish_and_commit(fork, pod, finish)
                    return value
            cheap = work.spent <= LOCKED_STEPS
        raise ConflictError(
            f"pod.uid {quote(pod.uid)}: the state changed under {ATTEMPTS} computations in a row "
            "(other writes committed first); nothing was changed, retry"
        )

    def _finish_and_commit(
        self,
        fork: MemoryState,
        pod: Pod,
        finish: Callable[[MemoryState, ContainerMap], None] | None,
    ) -> None:
        """Commit an optimistic change (the caller holds the lock); with ``finish``, on a
        copy of the container map it may change."""
        containers = self.current.containers
        if finish is not None:
            containers = containers.copy()
            finish(fork, containers)
        self.commit(fork, containers, pod)

    def _names_after(self, work: MemoryState, pod: Pod | None) -> Names:
        current = self.current
        names = current.names
        pods = work.pods_view()
        if (
            self._record_names
            and pod is not None
            and (pod.namespace or pod.name)
            and pod.uid in pods
            and pod.uid not in names
            and pod.uid not in current.state.pods_view()
        ):
            # Recorded last: the newest holder of a name is the last one (podresources Get).
            # A pod is named by the commit that gives it state, and keeps that name while it
            # has state (a pod's namespace and name never change in Kubernetes; a pod that got
            # state without them, or from a kubelet's file, stays unnamed): so a name is only
            # ever written for a uid without state, durable before the state that holds it and
            # inert without it, and no restart pairs a state with another commit's names
            # (numamem.checkpoint.namesfile).
            names = dict(names)
            names[pod.uid] = (pod.namespace, pod.name)
        if names and (work.pod_count() < current.state.pod_count() or len(names) > len(pods)):
            # A pod lost its state (a scan only then): its name goes with it.
            kept = {uid: n for uid, n in names.items() if uid in pods}
            names = names if len(kept) == len(names) else kept
        return names

    def _check_pod_limit(self, work: MemoryState) -> None:
        if self._max_pods is None or work.pod_count() <= self._max_pods:
            return
        state = self.current.state
        committed = state.pods_view()
        new = sorted(uid for uid in work.pods_view() if uid not in committed)
        if not new:
            return  # only pods that already had state (a limit lowered since): not refused
        raise LimitExceededError(
            f"pod.uid {quote(new[0])}: the memory manager holds {state.pod_count()} pods, its "
            f"limit (--max-pods {self._max_pods}); release pods (SyncActivePods, ReleasePod) first"
        )
