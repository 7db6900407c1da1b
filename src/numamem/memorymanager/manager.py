"""The memory manager (kubelet ``memory_manager.go``) with transactional, durable operations.

Writers (Allocate, AddContainer, RemoveContainer, ReleasePod, SyncActivePods,
Admit, start) commit under one lock and are linearizable. A mutating operation
works on a fork of the committed state; when it succeeds and changed something,
the whole new state goes to the :class:`StateStore` in **one** write, and only
then becomes the committed state (a new :class:`Committed` version; an operation
that changes nothing commits nothing).

No search runs under the lock. Admit and Allocate, the operations that search
(hints, the merge, the Static policy's extension to a superset), compute on a
fork of the committed version *outside* the lock, then take the lock only to
commit, and only if that version is still the current one. Otherwise they
compute again on the new version: at once under the lock when the first
computation was cheap (at most :data:`LOCKED_STEPS` search steps, as nearly
every admission is; a recomputation that turns out costlier stops at that many
and goes back outside), else outside it, at most :data:`ATTEMPTS` times in all,
after which the operation is refused with :class:`~numamem.errors.ConflictError`
(ABORTED, reason ``CONCURRENT_CHANGES``, nothing changed; retrying is safe). So
an expensive admission never delays ReleasePod, RemoveContainer, SyncActivePods
or a cheap admission by more than :data:`LOCKED_STEPS` steps. Every search is
charged to a :class:`~numamem.work.Work` per attempt (the search budget, and the
caller's deadline: past it the operation raises DeadlineExceededError and
commits nothing; the deadline is checked once more just before the commit).

When the operation or the write fails, the fork is dropped: memory and disk
stay equal, and nothing is half-applied. (The
kubelet writes after every sub-step and ignores write errors:
kubernetes/kubernetes#141993.) When the write put the new state in place but
could not sync its directory (:class:`~numamem.errors.DurabilityUnknownError`),
the new state is committed, since it is what a restart reads, and the error
still reaches the caller: the outcome is unknown. The ``max_pods`` limit is
checked inside the same transaction, so concurrent admissions cannot
overshoot it.

Readers never wait for a writer's disk write. Committed states are never
mutated; every reader takes the current one (the last acknowledged change)
without the lock: GetState, GetMemory, GetMemoryNUMANodes and
GetAllocatableMemory, and also hints and Explain, which compute on that state
(the Static policy keeps no state of its own; its init-container reuse table
is part of the state). Consistency: a reader sees every change acknowledged
before it started, and no change not yet durable. A rejected admission is such
a reader too: it decided on one committed version and commits nothing.

Stale state (``removeStaleState``) is removed only after the sources are
ready. With an ``active_pods`` callable the manager asks it, as the kubelet
does; without one it tracks the active set itself: the pods of the last
:meth:`Manager.sync_active_pods` plus every pod admitted, allocated, added or
hinted since (the kubelet's "pending admission" pod). In that mode a stale
check can only find something right after a sync, which removes it at once, so
the check before Allocate and hints is skipped until the next sync (and hints
then take no lock at all).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from numamem.config.model import ReservedMemory
from numamem.errors import (
    AllocationError,
    ConfigError,
    ConflictError,
    DurabilityUnknownError,
    LimitExceededError,
    NotFoundError,
    SearchBudgetError,
)
from numamem.logging import get_logger
from numamem.memorymanager.containermap import ContainerMap
from numamem.memorymanager.forked import AdmitOutcome, Explanation, admit_on_fork, explain_on_fork
from numamem.memorymanager.options import StaticOptions
from numamem.memorymanager.policy import NonePolicy, Policy
from numamem.memorymanager.policy_static import StaticPolicy
from numamem.memorymanager.reserved import get_system_reserved_memory
from numamem.memorymanager.state import MemoryState, State, StateView
from numamem.memorymanager.store import StateStore
from numamem.memtypes import Block, ContainerRef, Snapshot
from numamem.pod import Container, Pod
from numamem.quantity import Quantity
from numamem.topology import Machine
from numamem.topologymanager import admission
from numamem.topologymanager.policy import (
    NO_AFFINITY,
    SCOPE_CONTAINER,
    ProviderHints,
    TopologyHint,
    TopologyPolicy,
)
from numamem.work import Work

_log = get_logger("memorymanager")
T = TypeVar("T")

ATTEMPTS = 4
"""Computations of one Admit or Allocate (the first included) before ConflictError."""
LOCKED_STEPS = 20_000
"""Search steps a recomputation may take under the lock after a conflict (a few ms at most;
admissions of realistic pods take hundreds to a few thousand)."""

__all__ = ["ATTEMPTS", "LOCKED_STEPS", "AdmitOutcome", "Committed", "Explanation", "Manager"]


@dataclass(frozen=True, eq=False)
class Committed:
    """One committed version of the manager, published as a whole: readers take it once and
    see a state, its container map and its pod names from the same commit (never a mix).

    Nothing inside is mutated after publication. ``version`` grows by one per commit.
    """

    state: MemoryState
    view: StateView
    containers: ContainerMap
    names: Mapping[str, tuple[str, str]]
    """Pod uid -> (namespace, name) of pods with state, oldest recording first (a pod
    re-created under a name another uid still holds is the last of that name)."""
    version: int


class Manager:
    """See the module docstring. Construct, then :meth:`start` once (or :meth:`load`, then
    :meth:`finish_start`, to refuse a start before writing anything)."""

    def __init__(
        self,
        policy: Policy,
        store: StateStore,
        topology_policy: TopologyPolicy | None = None,
        topology_scope: str = SCOPE_CONTAINER,
        active_pods: Callable[[], Sequence[Pod] | None] | None = None,
        max_pods: int | None = None,
        record_pod_names: bool = False,
    ) -> None:
        self.policy = policy
        self._store = store
        self._topology_policy = topology_policy
        self._topology_scope = topology_scope
        self._active_pods_fn = active_pods
        self._max_pods = max_pods
        self._lock = threading.Lock()  # serialises writers, held across the store's write
        self._active_lock = threading.Lock()  # guards _tracked_active (readers touch it too)
        empty = MemoryState()
        self._committed = Committed(empty, StateView(empty), ContainerMap(), {}, 0)
        self._record_names = record_pod_names
        self._allocatable: list[Block] = []
        self._tracked_active: dict[str, frozenset[str]] | None = None
        self._stale_possible = active_pods is not None
        self._loaded: (
            tuple[MemoryState, ContainerMap, Mapping[str, tuple[str, str]], bool] | None
        ) = None
        self.started = False

    # --- lifecycle -------------------------------------------------------------

    def start(self, *, validate: bool = True) -> None:
        """:meth:`load`, then :meth:`finish_start`."""
        self.load(validate=validate)
        self.finish_start()

    def load(self, *, validate: bool = True) -> None:
        """Restore from the store and validate with the policy; reads only, writes nothing.

        Raises the store's CheckpointError/StateMismatchError or the policy's
        StateMismatchError/ReservedMemoryError; the daemon refuses to start on them.
        ``validate=False`` adopts the stored state as it is, without the policy's
        Start (the kubelet's unit tests build managers around seeded states this way).
        """
        with self._lock:
            snapshot = self._store.restore(self.policy.name)
            restored = MemoryState(
                snapshot.machine_state if snapshot else None,
                {p: dict(c) for p, c in snapshot.assignments.items()} if snapshot else None,
            )
            work = restored.fork()
            if validate:
                self.policy.start(work)
            containers = ContainerMap(snapshot.container_map if snapshot else None)
            names = dict(snapshot.pod_names) if snapshot else {}
            needs_write = validate and (snapshot is None or not work.same_as(restored))
            self._loaded = (work, containers, names, needs_write)

    def finish_start(self) -> None:
        """Write the validated state if it differs from the file (or there was none) and serve it."""
        with self._lock:
            if self._loaded is None:
                raise RuntimeError("finish_start() before load()")
            work, containers, names, needs_write = self._loaded
            if needs_write:
                self._store.save(self._snapshot(work, containers, names))
            self._store.restored()
            self._loaded = None
            self._commit(work, containers, names)
            self._allocatable = self.policy.get_allocatable_memory(work)
            self.started = True

    def _snapshot(
        self, state: MemoryState, containers: ContainerMap, names: Mapping[str, tuple[str, str]]
    ) -> Snapshot:
        return Snapshot(
            self.policy.name, state.machine_view(), state.pods_view(), containers.as_dict(), names
        )

    def _commit(
        self, state: MemoryState, containers: ContainerMap, names: Mapping[str, tuple[str, str]]
    ) -> None:
        """Publish the new version in one assignment (readers never see half of it)."""
        self._committed = Committed(
            state, StateView(state), containers, names, self._committed.version + 1
        )

    @property
    def _state(self) -> MemoryState:
        return self._committed.state

    @property
    def _containers(self) -> ContainerMap:
        return self._committed.containers

    @property
    def _names(self) -> Mapping[str, tuple[str, str]]:
        return self._committed.names

    @contextlib.contextmanager
    def _transaction(self, pod: Pod | None = None) -> Iterator[tuple[MemoryState, ContainerMap]]:
        """Fork, run the body, check the pod limit, persist once if anything changed, commit.

        The caller holds the lock. An exception from the body or the store drops
        the fork; :class:`DurabilityUnknownError` commits it first (see the module
        docstring). With ``record_pod_names``, ``pod``'s namespace and name are kept
        while it has state (names of pods without state are dropped).
        """
        work = self._state.fork()
        containers = self._containers.copy()
        yield work, containers
        self._persist(work, containers, pod)

    def _persist(self, work: MemoryState, containers: ContainerMap, pod: Pod | None) -> None:
        """Check the pod limit, write and commit ``work`` when it changed something (under
        the lock, on a fork of the current version)."""
        self._check_pod_limit(work)
        names = self._names_after(work, pod)
        if work.same_as(self._state) and containers == self._containers and names == self._names:
            if not work.same_reuse(self._state):
                self._commit(work, containers, names)  # the reuse table is not persisted
            return  # else nothing changed: nothing to write, no new version
        try:
            self._store.save(self._snapshot(work, containers, names))
        except DurabilityUnknownError:
            self._commit(work, containers, names)
            raise
        self._commit(work, containers, names)

    def _optimistic(
        self,
        pod: Pod,
        compute: Callable[[MemoryState, Work], tuple[bool, T]],
        deadline: float | None,
        budget: int | None,
    ) -> T:
        """Run ``compute`` on a fork of the committed version outside the lock and commit
        the fork (when it returns True with its value) if that version is still current;
        see the module docstring for the retries. ``compute`` must only change its fork."""
        limit = Work(budget).limit
        cheap = False
        for _ in range(ATTEMPTS):
            if cheap:
                with self._lock:
                    locked = Work(min(LOCKED_STEPS, limit), deadline)
                    fork = self._state.fork()
                    try:
                        changed, value = compute(fork, locked)
                    except SearchBudgetError:
                        if limit <= LOCKED_STEPS:
                            raise  # the operation's own budget, not the lock's
                        cheap = False  # costlier on this version: back outside the lock
                    else:
                        locked.check_deadline()
                        if changed:
                            self._persist(fork, self._containers.copy(), pod)
                        return value
            base = self._committed
            work = Work(limit, deadline)
            fork = base.state.fork()
            changed, value = compute(fork, work)
            work.check_deadline()
            if not changed:
                return value  # nothing to commit: the answer of version ``base``
            with self._lock:
                if self._committed.version == base.version:
                    work.check_deadline()
                    self._persist(fork, self._containers.copy(), pod)
                    return value
            cheap = work.spent <= LOCKED_STEPS
        raise ConflictError(
            f"pod.uid {pod.uid!r}: the state changed under {ATTEMPTS} computations in a row "
            "(other writes committed first); nothing was changed, retry"
        )

    def _names_after(self, work: MemoryState, pod: Pod | None) -> Mapping[str, tuple[str, str]]:
        names = self._names
        pods = work.pods_view()
        if (
            self._record_names
            and pod is not None
            and (pod.namespace or pod.name)
            and pod.uid in pods
            and names.get(pod.uid) != (pod.namespace, pod.name)
        ):
            # Recorded last: the newest holder of a name is the last one (podresources Get).
            names = {u: n for u, n in names.items() if u != pod.uid}
            names[pod.uid] = (pod.namespace, pod.name)
        if names and (work.pod_count() < self._state.pod_count() or len(names) > len(pods)):
            # A pod lost its state (a scan only then): its name goes with it.
            kept = {uid: n for uid, n in names.items() if uid in pods}
            names = names if len(kept) == len(names) else kept
        return names

    def _check_pod_limit(self, work: MemoryState) -> None:
        if self._max_pods is None or work.pod_count() <= self._max_pods:
            return
        committed = self._state.pods_view()
        new = sorted(uid for uid in work.pods_view() if uid not in committed)
        if not new:
            return  # only pods that already had state (a limit lowered since): not refused
        raise LimitExceededError(
            f"pod.uid {new[0]!r}: the memory manager holds {self._state.pod_count()} pods, its "
            f"limit (--max-pods {self._max_pods}); release pods (SyncActivePods, ReleasePod) first"
        )

    # --- active pods and stale state ---------------------------------------

    def _touch(self, pod: Pod) -> None:
        if self._active_pods_fn is None:
            with self._active_lock:
                if self._tracked_active is not None:
                    self._tracked_active[pod.uid] = pod.container_names()

    def _active_containers(self) -> dict[str, frozenset[str]] | None:
        if self._active_pods_fn is not None:
            pods = self._active_pods_fn()
            return None if pods is None else {p.uid: p.container_names() for p in pods}
        with self._active_lock:
            return None if self._tracked_active is None else dict(self._tracked_active)

    def remove_stale_state(self) -> list[ContainerRef]:
        """``removeStaleState`` as its own operation (one write). Returns what was removed."""
        with self._lock:
            return self._remove_stale_state_locked()

    def _remove_stale_state_locked(self) -> list[ContainerRef]:
        if not self._stale_possible:
            return []
        active = self._active_containers()
        if active is None:
            return []
        removed: list[ContainerRef] = []
        with self._transaction() as (work, containers):
            for pod_uid, ctr, _ in list(work.iter_containers()):
                if ctr not in active.get(pod_uid, ()):
                    self._remove_by_ref(work, containers, pod_uid, ctr)
                    removed.append((pod_uid, ctr))
            for _, (pod_uid, ctr) in containers.items():
                if ctr not in active.get(pod_uid, ()):
                    self._remove_by_ref(work, containers, pod_uid, ctr)
                    if (pod_uid, ctr) not in removed:
                        removed.append((pod_uid, ctr))
        if self._active_pods_fn is None:
            self._stale_possible = False
        for pod_uid, ctr in removed:
            _log.info("removed stale state", pod_uid=pod_uid, container=ctr)
        return removed

    def _remove_by_ref(
        self, state: State, containers: ContainerMap, pod_uid: str, ctr: str
    ) -> None:
        """``policyRemoveContainerByRef``."""
        self.policy.remove_container(state, pod_uid, ctr)
        containers.remove_by_container_ref(pod_uid, ctr)

    def _settle_stale_state(self) -> None:
        """Remove stale state before a hint or allocation, when there can be any."""
        if self._stale_possible:
            with self._lock:
                self._remove_stale_state_locked()

    def sync_active_pods(self, pods: Sequence[Pod]) -> list[ContainerRef]:
        """Make ``pods`` the active set (sources ready) and remove every other container's state."""
        with self._lock:
            with self._active_lock:
                self._tracked_active = {p.uid: p.container_names() for p in pods}
            self._stale_possible = True
            return self._remove_stale_state_locked()

    # --- operations ---------------------------------------------------------------

    def allocate(
        self,
        pod: Pod,
        container_name: str,
        affinity: TopologyHint | None = None,
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> list[Block]:
        """``Allocate``: stale-state cleanup first (its own write), then pin the container,
        computed outside the lock (see the module docstring).

        Idempotent: an allocated container keeps its blocks. Returns the
        container's blocks ([] when nothing was pinned).
        """
        container = _container(pod, container_name)
        self._touch(pod)
        self._settle_stale_state()

        def compute(fork: MemoryState, work: Work) -> tuple[bool, list[Block]]:
            with work.stage(
                lambda: f"pod {pod.uid!r}, container {container_name!r}: the allocation"
            ):
                self.policy.allocate(fork, pod, container, affinity or NO_AFFINITY, work)
            return True, fork.get_memory_blocks(pod.uid, container_name) or []

        return self._optimistic(pod, compute, deadline, budget)

    def add_container(self, pod: Pod, container_name: str, container_id: str) -> None:
        """``AddContainer``: record the id; free the memory of earlier regular init containers."""
        _container(pod, container_name)
        with self._lock:
            self._touch(pod)
            with self._transaction(pod) as (work, containers):
                containers.add(pod.uid, container_name, container_id)
                for init in pod.init_containers:
                    if init.name == container_name:
                        break
                    if init.restartable:
                        continue
                    self._remove_by_ref(work, containers, pod.uid, init.name)

    def remove_container(self, container_id: str) -> ContainerRef | None:
        """``RemoveContainer``: release by runtime id; an unknown id changes nothing (idempotent).

        Returns the container the id referred to, or None when it was unknown.
        """
        with self._lock:
            ref = self._containers.get_container_ref(container_id)
            if ref is None:
                _log.info("RemoveContainer of an unknown container id", container_id=container_id)
                return None
            with self._transaction() as (work, containers):
                self._remove_by_ref(work, containers, *ref)
            return ref

    def release_pod(self, pod_uid: str) -> list[ContainerRef]:
        """Release every container of ``pod_uid`` (blocks and runtime ids) in one write.

        An extension of the kubelet's API for pods whose ids were never recorded.
        Idempotent; returns the containers released.
        """
        with self._lock:
            with self._transaction() as (work, containers):
                names = set(work.pods_view().get(pod_uid, {}))
                names |= {ctr for _, (uid, ctr) in containers.items() if uid == pod_uid}
                for name in sorted(names):
                    self._remove_by_ref(work, containers, pod_uid, name)
            released = [(pod_uid, name) for name in sorted(names)]
        for ref in released:
            _log.info("released", pod_uid=ref[0], container=ref[1])
        return released

    def get_topology_hints(
        self, pod: Pod, container_name: str, *, deadline: float | None = None
    ) -> ProviderHints:
        """Container-scope hints on the committed state; no lock unless stale state may exist.

        The Static policy's hints are lazy: whoever reads them runs the search, charged to
        a Work with ``deadline``."""
        container = _container(pod, container_name)
        self._touch(pod)
        self._settle_stale_state()
        return self.policy.get_topology_hints(self._state, pod, container, Work(deadline=deadline))

    def get_pod_topology_hints(self, pod: Pod, *, deadline: float | None = None) -> ProviderHints:
        self._touch(pod)
        self._settle_stale_state()
        return self.policy.get_pod_topology_hints(self._state, pod, Work(deadline=deadline))

    def admit(
        self,
        pod: Pod,
        others: Sequence[admission.GivenHints] = (),
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> AdmitOutcome:
        """Topology-manager admission of the whole pod, all-or-nothing in one write.

        ``others`` are other providers' hints, merged after the memory manager's
        (the merge does not depend on the order). A rejected pod
        (TopologyAffinityError, or a provider's Allocate error as
        UnexpectedAdmissionError) leaves no allocation behind; the kubelet would
        keep the containers allocated before the failing one. Hints, merges and
        allocations are computed outside the lock (see the module docstring);
        ``budget`` overrides :data:`~numamem.work.SEARCH_BUDGET`.
        """
        topology_policy = self._topology_policy
        if topology_policy is None:
            raise AllocationError("admission needs a topology manager policy")
        self._touch(pod)
        self._settle_stale_state()

        def compute(fork: MemoryState, work: Work) -> tuple[bool, AdmitOutcome]:
            outcome = admit_on_fork(
                fork, self.policy, topology_policy, self._topology_scope, pod, others, work
            )
            return outcome.result.admitted, outcome

        return self._optimistic(pod, compute, deadline, budget)

    def explain(
        self,
        pod: Pod,
        others: Sequence[admission.GivenHints] = (),
        *,
        deadline: float | None = None,
    ) -> Explanation:
        """What :meth:`admit` would decide now, and why; changes nothing, takes no lock.

        Admission runs on a fork of the committed state that is always dropped,
        so nothing is written. Unlike Admit, stale state is not removed first.
        """
        if self._topology_policy is None:
            raise AllocationError("explain needs a topology manager policy")
        return explain_on_fork(
            self._state.fork(),
            self.policy,
            self._topology_policy,
            self._topology_scope,
            pod,
            others,
            Work(deadline=deadline),
        )

    # --- readers: the committed state, no lock ------------------------------------

    def committed(self) -> Committed:
        """The committed version (state, container map, names) as one immutable object."""
        return self._committed

    def reader(self) -> StateView:
        """The committed state, read-only; the same object until the next commit."""
        return self._committed.view

    def get_memory(self, pod_uid: str, container_name: str) -> list[Block]:
        return self._state.get_memory_blocks(pod_uid, container_name) or []

    def get_memory_numa_nodes(self, pod_uid: str, container_name: str) -> list[int] | None:
        """NUMA ids for ``cpuset.mems``; None (leave unset) when the container has no blocks."""
        nodes = {n for b in self.get_memory(pod_uid, container_name) for n in b.numa_affinity or ()}
        return sorted(nodes) or None

    def get_allocatable_memory(self) -> list[Block]:
        """Cached at start; never refreshed (as in the kubelet)."""
        return list(self._allocatable)

    def container_map(self) -> Mapping[str, ContainerRef]:
        return self._containers.as_dict()

    def pod_names(self) -> Mapping[str, tuple[str, str]]:
        """Pod uid -> (namespace, name), for pods with state whose Pod message named them
        (with ``record_pod_names``); the committed mapping, not a copy: do not mutate."""
        return self._names


def new_policy(
    name: str,
    machine: Machine,
    node_allocatable: Mapping[str, Quantity],
    reserved_memory: Sequence[ReservedMemory],
    numa_nodes: Sequence[int] | None = None,
    options: StaticOptions | None = None,
) -> Policy:
    """``NewManager``'s policy selection: ``None`` or ``Static`` (case-sensitive).

    ``numa_nodes`` limits the Static policy's hints and allocations (the CPU nodes, under
    ``restrict-to-cpu-numa-nodes``); None is every node.
    """
    if name == NonePolicy.name:
        return NonePolicy()
    if name == StaticPolicy.name:
        reserved = get_system_reserved_memory(machine, node_allocatable, reserved_memory)
        return StaticPolicy(machine, reserved, numa_nodes, options)
    if name == "BestEffort":
        raise ConfigError(f'policy "{name}" is not available for platform "linux"')
    raise ConfigError(f'unknown policy: "{name}"')


def _container(pod: Pod, name: str) -> Container:
    container = pod.container(name)
    if container is None:
        raise NotFoundError(f"container {name!r} is not in pod {pod.uid!r}")
    return container
