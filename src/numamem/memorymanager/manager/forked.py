"""Admission and Explain computed on a fork of a committed state, outside the manager's lock.

The memory manager takes part in the topology manager's admission
(:func:`numamem.topologymanager.admission.admit`) as a hint provider bound to
one fork: hints come from the fork, allocations go into it, and every search
is charged to the one :class:`~numamem.work.Work` of the operation. The fork
is private to the operation, so none of this needs the manager's lock; the
manager commits the fork afterwards if the version it was taken from is still
the current one (:meth:`~numamem.memorymanager.manager.writes.Manager.admit`), and
Explain always drops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from numamem.errors import AllocationError
from numamem.memorymanager.policy.interface import HintExplanation, Policy
from numamem.memorymanager.policy.unpinned import NotPinned, why_not_pinned
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.requests.resources import (
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.state.model import MemoryState, State
from numamem.memtypes import Block
from numamem.pod import GUARANTEED, Container, Pod, pod_qos
from numamem.topologymanager import admission
from numamem.topologymanager.policy import NO_AFFINITY, ProviderHints, TopologyHint, TopologyPolicy
from numamem.work import Work


@dataclass
class AdmitOutcome:
    """The result of an admission: the topology decision and the blocks allocated."""

    result: admission.AdmitResult
    blocks: dict[str, list[Block]] = field(default_factory=dict)
    pod_blocks: list[Block] | None = None
    """The pod-level blocks of a pod allocated as a whole (KEP-5526), when admitted."""
    steps: int = 0
    """Search steps the admission took (its :class:`~numamem.work.Work`), for budgets' sake."""
    unpinned: dict[str, NotPinned] = field(default_factory=dict)
    """When admitted: why each container without blocks has none
    (:mod:`numamem.memorymanager.policy.unpinned`)."""


class ForkProvider:
    """Hints from, and allocations into, one fork."""

    def __init__(self, policy: Policy, state: State, work: Work) -> None:
        self._policy = policy
        self._state = state
        self._work = work

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        return self._policy.get_topology_hints(self._state, pod, container, self._work)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self._policy.get_pod_topology_hints(self._state, pod, self._work)

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        self._policy.allocate(self._state, pod, container, affinity, self._work)

    def allocate_pod(self, pod: Pod, affinity: TopologyHint) -> None:
        self._policy.allocate_pod(self._state, pod, affinity, self._work)


@dataclass(frozen=True)
class Admission:
    """What one admission decides with, besides the fork and the work: the memory manager's
    policy, the topology manager's policy and scope, the pod and the other providers' hints."""

    policy: Policy
    topology_policy: TopologyPolicy
    scope: str
    pod: Pod
    others: Sequence[admission.GivenHints] = ()


def admit_on_fork(
    fork: MemoryState, asked: Admission, work: Work, provider: ForkProvider | None = None
) -> AdmitOutcome:
    """Admit ``asked.pod`` into ``fork`` (changed only when admitted: then it holds the blocks),
    the memory manager first among the providers: ``provider`` when given (one on ``fork``
    with ``asked.policy`` and ``work``: Explain's records what it did), else a plain one."""
    policy, pod = asked.policy, asked.pod
    if provider is None:
        provider = ForkProvider(policy, fork, work)
    result = admission.admit(
        pod,
        asked.topology_policy,
        asked.scope,
        [provider, *asked.others],
        work,
        podlevel.allocated_as_pod(policy.gates, pod),
    )
    return _outcome(result, fork, policy, pod, work)


def _outcome(
    result: admission.AdmitResult, fork: MemoryState, policy: Policy, pod: Pod, work: Work
) -> AdmitOutcome:
    """The outcome of an admission into ``fork``, with the blocks when admitted, and why a
    container has none."""
    outcome = AdmitOutcome(result, steps=work.spent)
    if result.admitted:
        for ctr in pod.all_containers():
            blocks = fork.get_memory_blocks(pod.uid, ctr.name) or []
            outcome.blocks[ctr.name] = blocks
            if not blocks:
                outcome.unpinned[ctr.name] = why_not_pinned(policy, pod, ctr)
        outcome.pod_blocks = fork.get_pod_memory_blocks(pod.uid)
    return outcome


# --- Explain ------------------------------------------------------------------------------


class ExplainingProvider(ForkProvider):
    """A fork provider that also records what the policy considered."""

    def __init__(self, policy: Policy, state: State, work: Work) -> None:
        super().__init__(policy, state, work)
        self.explanations: dict[str, HintExplanation] = {}
        self.allocated: set[str] = set()

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        self.explanations[container.name] = self._policy.explain(
            self._state, pod, container, self._work
        )
        return super().get_topology_hints(pod, container)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        self.explanations[""] = self._policy.explain(self._state, pod, None, self._work)
        return super().get_pod_topology_hints(pod)

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        if affinity.affinity is None and container.name not in self.explanations:
            # No affinity (the none policy, or no preference): the policy picks
            # its own best hint, so explain that choice.
            self.explanations[container.name] = self._policy.explain(
                self._state, pod, container, self._work
            )
        super().allocate(pod, container, affinity)
        self.allocated.add(container.name)

    def allocate_pod(self, pod: Pod, affinity: TopologyHint) -> None:
        if affinity.affinity is None and "" not in self.explanations:
            self.explanations[""] = self._policy.explain(self._state, pod, None, self._work)
        super().allocate_pod(pod, affinity)
        self.allocated.add("")


@dataclass
class ContainerExplanation:
    """One hinting step of an explained admission ("" = the pod scope's single step)."""

    container_name: str
    explanation: HintExplanation
    hints: ProviderHints
    merged: TopologyHint
    admitted: bool
    others: list[tuple[str, ProviderHints]] = field(default_factory=list)
    """The other providers' answers (name, hints) for this step; empty when it did not merge."""


@dataclass
class Explanation:
    """What an admission would decide, and why."""

    topology_policy: str
    topology_scope: str
    outcome: AdmitOutcome
    containers: list[ContainerExplanation]
    pod_level: podlevel.Plan | None = None
    """How the pod's pod-level budget divides (a Guaranteed pod that sets pod-level resources,
    with the gates on, under the Static policy); None otherwise."""


def pod_level_plan(policy: Policy, pod: Pod) -> podlevel.Plan | None:
    """The :class:`~numamem.memorymanager.requests.podlevel.Plan` of ``pod``, when it has one."""
    if not policy.can_allocate_exclusively() or not podlevel.allocated_as_pod(policy.gates, pod):
        return None
    if pod_qos(pod) != GUARANTEED:
        return None
    try:
        budget = pod_requested_resources(pod, pod_level=True)
    except AllocationError:
        return None
    return podlevel.plan(pod, budget, lambda c: container_requested_resources(c, pod, True))


def explain_on_fork(fork: MemoryState, asked: Admission, work: Work) -> Explanation:
    """The admission of ``asked.pod`` on ``fork`` (which the caller drops), step by step.

    Only the steps admission reached are explained: each hint request, and each
    Allocate without an affinity (where the policy picks its own hint).
    """
    provider = ExplainingProvider(asked.policy, fork, work)
    outcome = admit_on_fork(fork, asked, work, provider)
    result = outcome.result
    containers = []
    for name, explanation in provider.explanations.items():
        answers = result.hints.get(name) or [None]  # no entry: allocated without a merge
        containers.append(
            ContainerExplanation(
                name,
                explanation,
                answers[0],
                result.merged.get(name, NO_AFFINITY),
                result.admitted if name == "" else name in provider.allocated,
                [(o.provider, a) for o, a in zip(asked.others, answers[1:], strict=False)],
            )
        )
    return Explanation(
        asked.topology_policy.name,
        asked.scope,
        outcome,
        containers,
        pod_level_plan(asked.policy, asked.pod),
    )
