"""Pod admission with the container and pod scopes (kubelet ``scope_*.go``).

:func:`admit` gathers hints from every provider, merges them under the
policy, rejects with ``TopologyAffinityError`` when the policy says no, and
otherwise records the affinity of each container and asks every provider to
allocate it; a provider error becomes ``UnexpectedAdmissionError`` (except a
search stopped by its budget or deadline, which fails the whole operation: it
decides nothing).

A pod allocated as a whole (``pod_level``: pod-level resource managers, KEP-5526, in
the pod scope) is merged once as usual (a merge that says no rejects it with the kubelet's
pod-level text, :data:`POD_LEVEL_TOPOLOGY_AFFINITY_MESSAGE`); its hint is then stored for
every container and each provider allocates the pod in one call (``AllocatePod``) instead of
container by container. A provider error that names its own admission reason
(``EmptyPodSharedPoolError``) keeps it; any other is ``UnexpectedAdmissionError``.

It changes nothing itself: providers allocate into whatever state they were
given, so a caller that wants all-or-nothing admission hands in providers bound
to a transaction and discards it when :attr:`AdmitResult.admitted` is false.
The merges are charged to ``work`` (the providers charge theirs to the same
one), each step named (:meth:`~numamem.work.Work.stage`) so that a refusal
says which container's hints or merge reached the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from numamem.errors import DeadlineExceededError, NumamemError, SearchBudgetError, quote
from numamem.pod import Container, Pod
from numamem.topologymanager.policy import (
    NO_AFFINITY,
    NONE,
    SCOPE_POD,
    ProviderHints,
    TopologyHint,
    TopologyPolicy,
)
from numamem.work import Work

TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
POD_LEVEL_TOPOLOGY_AFFINITY_MESSAGE = (
    "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
)
"""The pod scope's refusal of a pod allocated as a whole (``pod_level``): the kubelet's
``NewPodLevelTopologyAffinityError("pod with pod-level resources failed admission under
pod-scope topology manager")``, whose text is ``Pod Scope`` and that message (released in
v1.36 with ``PodLevelResourceManagers``, kubernetes PR #134768; its reason is still
``TopologyAffinityError``). A pod shows it as ``Pod was rejected: Pod Scope pod with ...``.
The behavioural spec (memory-manager.md 7.2) names only the older text; the released code
wins."""
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


class HintProvider(Protocol):
    """A resource manager taking part in admission (kubelet ``HintProvider``)."""

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints: ...

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints: ...

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        """Allocate for one container; raise a NumamemError to reject the pod."""

    def allocate_pod(self, pod: Pod, affinity: TopologyHint) -> None:
        """Allocate a pod as a whole (``AllocatePod``); raise a NumamemError to reject it."""


@dataclass(frozen=True)
class GivenHints:
    """Another provider's hints, handed in with the admission request (a CPU manager, a device
    manager, a DRA driver running outside numamem).

    It takes part in the merge as the kubelet's providers do; its ``allocate`` does nothing:
    the provider allocates its own resources once the pod is admitted. Read-only.
    """

    provider: str
    containers: Mapping[str, ProviderHints] = field(default_factory=dict)
    """Container scope: the answer per container name (missing = no preference)."""
    pod: ProviderHints = None
    """Pod scope: the answer for the pod."""

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        return self.containers.get(container.name)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self.pod

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        return None

    def allocate_pod(self, pod: Pod, affinity: TopologyHint) -> None:
        return None


@dataclass
class AdmitResult:
    admitted: bool
    reason: str = ""
    message: str = ""
    affinities: dict[str, TopologyHint] = field(default_factory=dict)
    """The affinity stored for each container (``GetAffinity``), in admission order."""
    hints: dict[str, list[ProviderHints]] = field(default_factory=dict)
    """Per container (container scope) or under "" (pod scope): what each provider answered."""
    merged: dict[str, TopologyHint] = field(default_factory=dict)


def admit(
    pod: Pod,
    policy: TopologyPolicy,
    scope: str,
    providers: Sequence[HintProvider],
    work: Work | None = None,
    pod_level: bool = False,
) -> AdmitResult:
    """Admit ``pod``; see the module docstring (``pod_level``: the pod is allocated as a whole
    in the pod scope)."""
    work = Work() if work is None else work
    result = AdmitResult(admitted=True)
    containers = list(pod.all_containers())
    if policy.name == NONE:
        # The kubelet's none scope: container by container whatever the scope, a pod that
        # sets pod-level resources too (only its equivalent-Guaranteed containers are pinned).
        return _allocate_each(pod, containers, NO_AFFINITY, providers, result, work)
    nodes = policy.info.default_mask.bit_count()
    if scope == SCOPE_POD:
        with work.stage(f"pod {quote(pod.uid)}: the pod's topology hints"):
            answers = [p.get_pod_topology_hints(pod) for p in providers]
        with work.stage(f"pod {quote(pod.uid)}: {_merge_of(answers, nodes)}"):
            best, ok = policy.merge(answers, work)
        result.hints[""] = answers
        result.merged[""] = best
        if not ok:
            if pod_level:  # the kubelet's admitUsingPodResources
                return _reject(result, POD_LEVEL_TOPOLOGY_AFFINITY_MESSAGE)
            return _reject(result)
        if pod_level:
            for container in containers:
                result.affinities[container.name] = best
            with work.stage(f"pod {quote(pod.uid)}: the pod-level allocation"):
                for provider in providers:
                    try:
                        provider.allocate_pod(pod, best)
                    except (SearchBudgetError, DeadlineExceededError):
                        raise
                    except NumamemError as err:
                        return _refuse(result, err)
            return result
        return _allocate_each(pod, containers, best, providers, result, work)
    for container in containers:
        where = f"pod {quote(pod.uid)}, container {quote(container.name)}"
        with work.stage(f"{where}: the topology hints"):
            answers = [p.get_topology_hints(pod, container) for p in providers]
        with work.stage(f"{where}: {_merge_of(answers, nodes)}"):
            best, ok = policy.merge(answers, work)
        result.hints[container.name] = answers
        result.merged[container.name] = best
        if not ok:
            return _reject(result)
        result.affinities[container.name] = best
        with work.stage(f"{where}: the allocation"):
            if not _allocate(pod, container, best, providers, result):
                return result
    return result


def _merge_of(answers: Sequence[ProviderHints], nodes: int) -> str:
    """What a merge merges, for a refusal's message."""
    lists = sum(max(len(a or {}), 1) for a in answers)
    hints = sum(len(lst) for a in answers for lst in (a or {}).values() if isinstance(lst, list))
    return (
        f"the merge of {lists} hint lists from {len(answers)} providers ({hints} listed hints "
        f"besides the memory manager's) on {nodes} NUMA nodes"
    )


def _reject(result: AdmitResult, message: str = TOPOLOGY_AFFINITY_MESSAGE) -> AdmitResult:
    result.admitted = False
    result.reason = TOPOLOGY_AFFINITY_ERROR
    result.message = message
    return result


def _allocate_each(
    pod: Pod,
    containers: Sequence[Container],
    affinity: TopologyHint,
    providers: Sequence[HintProvider],
    result: AdmitResult,
    work: Work,
) -> AdmitResult:
    """Record ``affinity`` for each container and allocate them in order, each in a work
    stage of its own; stops at the first refusal (recorded in ``result``). Returns ``result``."""
    for container in containers:
        result.affinities[container.name] = affinity
        with work.stage(
            f"pod {quote(pod.uid)}: the allocation of container {quote(container.name)}"
        ):
            if not _allocate(pod, container, affinity, providers, result):
                break
    return result


def _allocate(
    pod: Pod,
    container: Container,
    hint: TopologyHint,
    providers: Sequence[HintProvider],
    result: AdmitResult,
) -> bool:
    for provider in providers:
        try:
            provider.allocate(pod, container, hint)
        except (SearchBudgetError, DeadlineExceededError):
            raise  # the search stopped: no admission decision, the whole operation fails
        except NumamemError as err:
            _refuse(result, err)
            return False
    return True


def _refuse(result: AdmitResult, err: NumamemError) -> AdmitResult:
    """``GetPodAdmitResult``: an error with an admission reason of its own keeps its reason
    and text; any other is unexpected."""
    result.admitted = False
    reason = getattr(err, "admission_reason", None)
    if isinstance(reason, str):
        result.reason, result.message = reason, str(err)
    else:
        result.reason = UNEXPECTED_ADMISSION_ERROR
        result.message = f"Allocate failed due to {err}, which is unexpected"
    return result
