"""The memory manager (kubelet ``memory_manager.go``) with transactional, durable operations.

Every public method runs under one lock (linearizable). A mutating operation
works on a fork of the committed state; when it succeeds and changed
something, the whole new state goes to the :class:`StateStore` in **one**
write, and only then becomes the committed state. When the operation or the
write fails, the fork is dropped and the policy's private state (the Static
policy's init-container reuse table) is rolled back: memory and disk stay
equal, and nothing is half-applied. (The kubelet writes after every sub-step
and ignores write errors: kubernetes/kubernetes#141993.)

Committed states are never mutated, so readers that only need a consistent
view (``state_view``) take the current reference and need no lock.

Stale state (``removeStaleState``) is removed only after the sources are
ready. With an ``active_pods`` callable the manager asks it, as the kubelet
does; without one it tracks the active set itself: the pods of the last
:meth:`Manager.sync_active_pods` plus every pod admitted, allocated, added or
hinted since (the kubelet's "pending admission" pod). In that mode a stale
check can only find something right after a sync, which removes it at once, so
the check before Allocate/hints is skipped until the next sync.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from numamem.config.model import ReservedMemory
from numamem.errors import AllocationError, ConfigError, NotFoundError
from numamem.logging import get_logger
from numamem.memorymanager.containermap import ContainerMap
from numamem.memorymanager.policy import HintExplanation, NonePolicy, Policy
from numamem.memorymanager.policy_static import StaticPolicy
from numamem.memorymanager.reserved import get_system_reserved_memory
from numamem.memorymanager.state import MemoryState, State, StateReader
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

_log = get_logger("memorymanager")
T = TypeVar("T")


@dataclass
class AdmitOutcome:
    """The result of :meth:`Manager.admit`: the topology decision and the blocks allocated."""

    result: admission.AdmitResult
    blocks: dict[str, list[Block]] = field(default_factory=dict)


class _Rejected(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Aborts an admission transaction without persisting anything."""


class _TransactionProvider:
    """The memory manager as a topology-manager hint provider, bound to one transaction."""

    def __init__(self, policy: Policy, state: State) -> None:
        self._policy = policy
        self._state = state

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        return self._policy.get_topology_hints(self._state, pod, container)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self._policy.get_pod_topology_hints(self._state, pod)

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        self._policy.allocate(self._state, pod, container, affinity)


class _ExplainingProvider(_TransactionProvider):
    """A transaction provider that also records what the policy considered."""

    def __init__(self, policy: Policy, state: State) -> None:
        super().__init__(policy, state)
        self.explanations: dict[str, HintExplanation] = {}
        self.allocated: set[str] = set()

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        self.explanations[container.name] = self._policy.explain(self._state, pod, container)
        return super().get_topology_hints(pod, container)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        self.explanations[""] = self._policy.explain(self._state, pod, None)
        return super().get_pod_topology_hints(pod)

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        if affinity.affinity is None and container.name not in self.explanations:
            # No affinity (the none policy, or no preference): the policy picks
            # its own best hint, so explain that choice.
            self.explanations[container.name] = self._policy.explain(self._state, pod, container)
        super().allocate(pod, container, affinity)
        self.allocated.add(container.name)


@dataclass
class ContainerExplanation:
    """One hinting step of an explained admission ("" = the pod scope's single step)."""

    container_name: str
    explanation: HintExplanation
    hints: ProviderHints
    merged: TopologyHint
    admitted: bool


@dataclass
class Explanation:
    """The result of :meth:`Manager.explain`."""

    topology_policy: str
    topology_scope: str
    outcome: AdmitOutcome
    containers: list[ContainerExplanation]


class Manager:
    """See the module docstring. Construct, then :meth:`start` once."""

    def __init__(
        self,
        policy: Policy,
        store: StateStore,
        topology_policy: TopologyPolicy | None = None,
        topology_scope: str = SCOPE_CONTAINER,
        active_pods: Callable[[], Sequence[Pod] | None] | None = None,
    ) -> None:
        self.policy = policy
        self._store = store
        self._topology_policy = topology_policy
        self._topology_scope = topology_scope
        self._active_pods_fn = active_pods
        self._lock = threading.Lock()  # guards every field below; held for each whole operation
        self._state = MemoryState()
        self._containers = ContainerMap()
        self._allocatable: list[Block] = []
        self._tracked_active: dict[str, frozenset[str]] | None = None
        self._stale_possible = active_pods is not None
        self.started = False

    # --- lifecycle -------------------------------------------------------------

    def start(self, *, validate: bool = True) -> None:
        """Restore from the store, validate with the policy, write the result if it changed.

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
            if validate and (snapshot is None or not work.same_as(restored)):
                self._store.save(self._snapshot(work, containers))
            self._state = work
            self._containers = containers
            self._allocatable = self.policy.get_allocatable_memory(work)
            self.started = True

    def _snapshot(self, state: MemoryState, containers: ContainerMap) -> Snapshot:
        return Snapshot(
            self.policy.name, state.machine_view(), state.pods_view(), containers.as_dict()
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[tuple[MemoryState, ContainerMap]]:
        """Fork, run the body, persist once if anything changed, commit. Caller holds the lock."""
        work = self._state.fork()
        containers = self._containers.copy()
        policy_snapshot = self.policy.snapshot()
        try:
            yield work, containers
            state_changed = not work.same_as(self._state)
            if state_changed or containers != self._containers:
                self._store.save(self._snapshot(work, containers))
        except BaseException:
            self.policy.restore(policy_snapshot)
            raise
        self._state = work
        self._containers = containers

    # --- active pods and stale state ---------------------------------------

    def _touch(self, pod: Pod) -> None:
        if self._active_pods_fn is None and self._tracked_active is not None:
            self._tracked_active[pod.uid] = pod.container_names()

    def _active_containers(self) -> dict[str, frozenset[str]] | None:
        if self._active_pods_fn is not None:
            pods = self._active_pods_fn()
            return None if pods is None else {p.uid: p.container_names() for p in pods}
        return self._tracked_active

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

    def sync_active_pods(self, pods: Sequence[Pod]) -> list[ContainerRef]:
        """Make ``pods`` the active set (sources ready) and remove every other container's state."""
        with self._lock:
            self._tracked_active = {p.uid: p.container_names() for p in pods}
            self._stale_possible = True
            return self._remove_stale_state_locked()

    # --- operations ---------------------------------------------------------------

    def allocate(
        self, pod: Pod, container_name: str, affinity: TopologyHint | None = None
    ) -> list[Block]:
        """``Allocate``: stale-state cleanup first (its own write), then pin the container.

        Idempotent: an allocated container keeps its blocks. Returns the
        container's blocks ([] when nothing was pinned).
        """
        container = _container(pod, container_name)
        with self._lock:
            self._touch(pod)
            self._remove_stale_state_locked()
            with self._transaction() as (work, _):
                self.policy.allocate(work, pod, container, affinity or NO_AFFINITY)
            return self._state.get_memory_blocks(pod.uid, container_name) or []

    def add_container(self, pod: Pod, container_name: str, container_id: str) -> None:
        """``AddContainer``: record the id; free the memory of earlier regular init containers."""
        _container(pod, container_name)
        with self._lock:
            self._touch(pod)
            with self._transaction() as (work, containers):
                containers.add(pod.uid, container_name, container_id)
                for init in pod.init_containers:
                    if init.name == container_name:
                        break
                    if init.restartable:
                        continue
                    self._remove_by_ref(work, containers, pod.uid, init.name)

    def remove_container(self, container_id: str) -> ContainerRef | None:
        """``RemoveContainer``: release by runtime id; an unknown id changes nothing (idempotent)."""
        with self._lock:
            ref = self._containers.get_container_ref(container_id)
            if ref is None:
                _log.info("RemoveContainer of an unknown container id", container_id=container_id)
                return None
            with self._transaction() as (work, containers):
                self._remove_by_ref(work, containers, *ref)
            return ref

    def get_topology_hints(self, pod: Pod, container_name: str) -> ProviderHints:
        container = _container(pod, container_name)
        with self._lock:
            self._touch(pod)
            self._remove_stale_state_locked()
            return self.policy.get_topology_hints(self._state, pod, container)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        with self._lock:
            self._touch(pod)
            self._remove_stale_state_locked()
            return self.policy.get_pod_topology_hints(self._state, pod)

    def admit(self, pod: Pod) -> AdmitOutcome:
        """Topology-manager admission of the whole pod, all-or-nothing in one write.

        A rejected pod (TopologyAffinityError, or a provider's Allocate error as
        UnexpectedAdmissionError) leaves no allocation behind; the kubelet would
        keep the containers allocated before the failing one.
        """
        if self._topology_policy is None:
            raise AllocationError("admission needs a topology manager policy")
        with self._lock:
            self._touch(pod)
            self._remove_stale_state_locked()
            outcome = AdmitOutcome(admission.AdmitResult(admitted=False))
            try:
                with self._transaction() as (work, _):
                    provider = _TransactionProvider(self.policy, work)
                    outcome.result = admission.admit(
                        pod, self._topology_policy, self._topology_scope, [provider]
                    )
                    if not outcome.result.admitted:
                        raise _Rejected
            except _Rejected:
                return outcome
            for ctr in pod.all_containers():
                outcome.blocks[ctr.name] = self._state.get_memory_blocks(pod.uid, ctr.name) or []
            return outcome

    def explain(self, pod: Pod) -> Explanation:
        """What :meth:`admit` would decide now, and why; changes nothing.

        Admission runs on a fork that is always dropped (the policy's private
        state is restored), so nothing is written. Unlike Admit, stale state is
        not removed first. Only the steps admission reached are explained: each
        hint request, and each Allocate without an affinity (where the policy
        picks its own hint).
        """
        if self._topology_policy is None:
            raise AllocationError("explain needs a topology manager policy")
        with self._lock:
            work = self._state.fork()
            policy_snapshot = self.policy.snapshot()
            provider = _ExplainingProvider(self.policy, work)
            try:
                result = admission.admit(
                    pod, self._topology_policy, self._topology_scope, [provider]
                )
            finally:
                self.policy.restore(policy_snapshot)
        outcome = AdmitOutcome(result)
        if result.admitted:
            for ctr in pod.all_containers():
                outcome.blocks[ctr.name] = work.get_memory_blocks(pod.uid, ctr.name) or []
        containers = [
            ContainerExplanation(
                name,
                explanation,
                (result.hints.get(name) or [None])[0],
                result.merged.get(name, NO_AFFINITY),
                result.admitted if name == "" else name in provider.allocated,
            )
            for name, explanation in provider.explanations.items()
        ]
        return Explanation(self._topology_policy.name, self._topology_scope, outcome, containers)

    # --- readers ---------------------------------------------------------------

    def state_view(self) -> StateReader:
        """The committed state; never mutated afterwards, safe to read without the lock."""
        return self._state

    def committed(self) -> MemoryState:
        return self._state

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


def new_policy(
    name: str,
    machine: Machine,
    node_allocatable: Mapping[str, Quantity],
    reserved_memory: Sequence[ReservedMemory],
) -> Policy:
    """``NewManager``'s policy selection: ``None`` or ``Static`` (case-sensitive)."""
    if name == NonePolicy.name:
        return NonePolicy()
    if name == StaticPolicy.name:
        reserved = get_system_reserved_memory(machine, node_allocatable, reserved_memory)
        return StaticPolicy(machine, reserved)
    if name == "BestEffort":
        raise ConfigError(f'policy "{name}" is not available for platform "linux"')
    raise ConfigError(f'unknown policy: "{name}"')


def _container(pod: Pod, name: str) -> Container:
    container = pod.container(name)
    if container is None:
        raise NotFoundError(f"container {name!r} is not in pod {pod.uid!r}")
    return container
