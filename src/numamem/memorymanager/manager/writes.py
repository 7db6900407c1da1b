"""The memory manager (kubelet ``memory_manager.go``) with transactional, durable operations.

Writers (Allocate, AddContainer, RemoveContainer, ReleasePod, SyncActivePods,
Admit, start) are linearizable: each makes its change on a fork of the
committed state and commits it under one lock, as **one** write of the whole
state, before it is acknowledged (:mod:`numamem.memorymanager.manager.versions`, which
also explains failed and unknown-durability writes). The ``max_pods`` limit
is checked in the same commit, so concurrent admissions cannot overshoot it.

The class is built in layers, each its own module: the readers
(:mod:`.reads`), active pods and stale state (:mod:`.stale`),
resizes (:mod:`.resizes`) and, here, the lifecycle and the writers.

No search runs under the lock: Admit and Allocate, which search (hints, the
merge, the Static policy's extension to a superset), compute their change
outside it and commit it only if the state they computed on is still the
committed one (:meth:`Versions.optimistic
<numamem.memorymanager.manager.versions.Versions.optimistic>`). Every search is
charged to a :class:`~numamem.work.Work`: the search budget, and the caller's
deadline (past it the operation raises DeadlineExceededError and changes
nothing).

Readers never wait for a writer's disk write. Committed states are never
mutated; every reader takes the current one (the last acknowledged change)
without the lock: GetState, GetMemory, GetMemoryNUMANodes and
GetAllocatableMemory, and also hints and Explain, which compute on that state
(the Static policy keeps no state of its own; its init-container reuse is
derived from the stored blocks). Consistency: a reader sees every change acknowledged
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

import threading
from collections.abc import Callable, Mapping, Sequence

from numamem.errors import (
    AllocationError,
    FailedPreconditionError,
    quote,
)
from numamem.memorymanager.manager.containermap import ContainerMap
from numamem.memorymanager.manager.forked import (
    Admission,
    AdmitOutcome,
    Explanation,
    admit_on_fork,
    explain_on_fork,
)
from numamem.memorymanager.manager.reads import container_of
from numamem.memorymanager.manager.resizes import Resizes
from numamem.memorymanager.manager.versions import Versions
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.state.model import MemoryState
from numamem.memorymanager.state.store import StateStore
from numamem.memtypes import Block, ContainerRef
from numamem.pod import Pod
from numamem.topologymanager import admission
from numamem.topologymanager.policy import (
    NO_AFFINITY,
    SCOPE_CONTAINER,
    ProviderHints,
    TopologyHint,
    TopologyPolicy,
)
from numamem.work import Work


class Manager(Resizes):
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
        self._versions = Versions(store, policy.name, max_pods, record_pod_names)
        self._lock = self._versions.lock  # serialises writers, held across the store's write
        self._topology_policy = topology_policy
        self._topology_scope = topology_scope
        self._active_pods_fn = active_pods
        self._active_lock = threading.Lock()  # guards _tracked_active (readers touch it too)
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
                snapshot.pod_entries if snapshot else None,
                snapshot.exclusive if snapshot else None,
            )
            work = restored.fork()
            names = dict(snapshot.pod_names) if snapshot else {}
            if validate:
                self.policy.start(work, names)
            containers = ContainerMap(snapshot.container_map if snapshot else None)
            needs_write = validate and (snapshot is None or not work.same_as(restored))
            self._loaded = (work, containers, names, needs_write)

    def finish_start(self) -> None:
        """Write the validated state if it differs from the file (or there was none) and serve it."""
        with self._lock:
            if self._loaded is None:
                raise RuntimeError("finish_start() before load()")
            work, containers, names, needs_write = self._loaded
            if needs_write:
                self._store.save(self._versions.snapshot(work, containers, names))
            self._store.restored()
            self._loaded = None
            self._versions.publish(work, containers, names)
            self._allocatable = self.policy.get_allocatable_memory(work)
            self.started = True

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
        container = container_of(pod, container_name)
        self._touch(pod)
        self._settle_stale_state()

        def compute(fork: MemoryState, work: Work) -> tuple[bool, list[Block]]:
            with work.stage(
                lambda: f"pod {quote(pod.uid)}, container {quote(container_name)}: the allocation"
            ):
                self.policy.allocate(fork, pod, container, affinity or NO_AFFINITY, work)
            return True, fork.get_memory_blocks(pod.uid, container_name) or []

        return self._versions.optimistic(pod, compute, deadline, budget)

    def allocate_pod(
        self,
        pod: Pod,
        affinity: TopologyHint | None = None,
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> tuple[list[Block] | None, dict[str, list[Block]]]:
        """``AllocatePod`` (KEP-5526): pin a pod that sets pod-level resources as a whole, with
        ``affinity`` as its hint (the topology manager's for its first container), as the
        topology manager's pod scope does. Stale-state cleanup first, computed outside the
        lock, idempotent (an allocated pod keeps its blocks), like :meth:`allocate`.

        Returns the pod-level blocks (None when nothing was pinned: a pod that is not
        Guaranteed) and every container's blocks. Raises FailedPreconditionError for a pod
        that does not set pod-level resources or with a feature gate off (such a pod is
        allocated container by container), EmptyPodSharedPoolError and Allocate's errors.
        """
        if not podlevel.allocated_as_pod(self.policy.gates, pod):
            gates = self.policy.gates
            why = (
                "the pod sets no pod-level resources (spec.resources): allocate its containers "
                "one by one (Allocate)"
                if not pod.pod_level_resources_set
                else "it needs --feature-gates PodLevelResources=true,PodLevelResourceManagers=true"
                f" (on now: {', '.join(gates.enabled()) or 'none'})"
            )
            raise FailedPreconditionError(f"pod.uid {quote(pod.uid)}: AllocatePod: {why}")
        self._touch(pod)
        self._settle_stale_state()

        def compute(
            fork: MemoryState, work: Work
        ) -> tuple[bool, tuple[list[Block] | None, dict[str, list[Block]]]]:
            with work.stage(lambda: f"pod {quote(pod.uid)}: the pod-level allocation"):
                self.policy.allocate_pod(fork, pod, affinity or NO_AFFINITY, work)
            blocks = {
                c.name: fork.get_memory_blocks(pod.uid, c.name) or [] for c in pod.all_containers()
            }
            return True, (fork.get_pod_memory_blocks(pod.uid), blocks)

        return self._versions.optimistic(pod, compute, deadline, budget)

    def add_container(self, pod: Pod, container_name: str, container_id: str) -> None:
        """``AddContainer``: record the id; free the memory of earlier regular init containers."""
        container_of(pod, container_name)
        with self._lock:
            self._touch(pod)
            with self._versions.transaction(pod) as (work, containers):
                self._record_ids(work, containers, pod, {container_name: container_id})

    def _record_ids(
        self, work: MemoryState, containers: ContainerMap, pod: Pod, ids: Mapping[str, str]
    ) -> None:
        """AddContainer of each named container, in the pod's order (the caller checked the
        names): record its id, free the memory of the regular init containers before it."""
        for container in pod.all_containers():
            if container.name not in ids:
                continue
            containers.add(pod.uid, container.name, ids[container.name])
            for init in pod.init_containers:
                if init.name == container.name:
                    break
                if not init.restartable:
                    self._remove_by_ref(work, containers, pod.uid, init.name)

    def remove_container(self, container_id: str) -> ContainerRef | None:
        """``RemoveContainer``: release by runtime id; an unknown id changes nothing (idempotent).

        Returns the container the id referred to, or None when it was unknown.
        """
        with self._lock:
            ref = self._containers.get_container_ref(container_id)
            if ref is None:
                return None  # the RPC's log line says it (result not_found)
            with self._versions.transaction() as (work, containers):
                self._remove_by_ref(work, containers, *ref)
            return ref

    def release_pod(self, pod_uid: str) -> list[ContainerRef]:
        """Release every container of ``pod_uid`` (blocks and runtime ids) in one write.

        An extension of the kubelet's API for pods whose ids were never recorded.
        Idempotent; returns the containers released.
        """
        with self._lock:
            with self._versions.transaction() as (work, containers):
                names = set(work.pods_view().get(pod_uid, {}))
                names |= {ctr for _, (uid, ctr) in containers.items() if uid == pod_uid}
                for name in sorted(names):
                    self._remove_by_ref(work, containers, pod_uid, name)
            return [(pod_uid, name) for name in sorted(names)]

    def get_topology_hints(
        self, pod: Pod, container_name: str, *, deadline: float | None = None
    ) -> ProviderHints:
        """Container-scope hints on the committed state; no lock unless stale state may exist.

        The Static policy's hints are lazy: whoever reads them runs the search, charged to
        a Work with ``deadline``."""
        container = container_of(pod, container_name)
        self._touch(pod)
        self._settle_stale_state()
        return self.policy.get_topology_hints(
            self._state, pod, container, Work(deadline=deadline, courteous=True)
        )

    def get_pod_topology_hints(self, pod: Pod, *, deadline: float | None = None) -> ProviderHints:
        self._touch(pod)
        self._settle_stale_state()
        return self.policy.get_pod_topology_hints(
            self._state, pod, Work(deadline=deadline, courteous=True)
        )

    def admit(
        self,
        pod: Pod,
        others: Sequence[admission.GivenHints] = (),
        *,
        deadline: float | None = None,
        budget: int | None = None,
        container_ids: Mapping[str, str] | None = None,
    ) -> AdmitOutcome:
        """Topology-manager admission of the whole pod, all-or-nothing in one write; an
        admitted pod's ``container_ids`` (name -> runtime id, names of the pod's containers)
        are recorded in that write as :meth:`add_container` of each would record them.

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

        asked = Admission(self.policy, topology_policy, self._topology_scope, pod, others)

        def compute(fork: MemoryState, work: Work) -> tuple[bool, AdmitOutcome]:
            outcome = admit_on_fork(fork, asked, work)
            return outcome.result.admitted, outcome

        def record(fork: MemoryState, containers: ContainerMap) -> None:
            self._record_ids(fork, containers, pod, container_ids or {})

        finish = record if container_ids else None
        return self._versions.optimistic(pod, compute, deadline, budget, finish)

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
        asked = Admission(self.policy, self._topology_policy, self._topology_scope, pod, others)
        return explain_on_fork(self._state.fork(), asked, Work(deadline=deadline, courteous=True))
