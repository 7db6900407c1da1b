"""In-place resize of a pod allocated as a whole by its pod-level resources (issue 30, KEP-5526).

In the topology manager's pod scope, a Guaranteed pod that sets pod-level memory is **one**
NUMA-aligned allocation, its *budget* (the pod-level blocks, reserved once), divided among its
containers by :func:`numamem.memorymanager.requests.podlevel.partition`. Such a pod is resized as a
whole, as the API server accepted it: its new ``spec.resources`` memory is the new budget, and the
new requests of its equivalent-Guaranteed containers are their new exclusive shares. The rules are
the container rules (:mod:`.decide`) applied to the budget:

* the pod keeps its pod-level resources and stays Guaranteed, no hugepage size changes (the
  budget's or an exclusive container's), a regular init container's own memory does not
  change, and no container moves between memory of its own and the pod's shared pool: each
  refused as Infeasible, naming it;
* the new partition must be valid: the exclusive memory of the sidecars and app containers
  fits in the new budget (refused as Infeasible naming the values; fix: resize the pod's
  ``spec.resources`` too), and the shared pool stays non-empty where the kubelet's
  ``validatePodScopeResources`` requires it (refused as Infeasible with its
  ``EmptyPodSharedPoolError`` text and the values);
* **grow** the budget in the pod's group from its free memory (lowest node first), else by
  extending the group to the narrowest superset of unused nodes the topology manager policy
  admits (:func:`.decide.grow`), else Deferred or Infeasible (the same rules with every
  other pod gone); **shrink** from the last node filled; the group never shrinks;
* the budget unchanged and a share changed: the containers' blocks change inside it
  (``repartitioned``), the machine state does not;
* afterwards every container with an entry has the partition's blocks on the group (a
  regular init container released after it ran stays released); a resize to the current
  sizes changes nothing.

Deviation from upstream: the kubelet does not resize a pod-level allocation at all (its
Static policy ignores every operation but Add).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numamem.errors import AllocationError, ResizeError, ResizeInfeasibleError, quote
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.requests.resources import (
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.resize.decide import (
    EXTENDED,
    GROWN,
    NOT_PINNED,
    REPARTITIONED,
    SHRUNK,
    UNCHANGED,
    Growth,
    PodBudget,
    Resize,
)
from numamem.memorymanager.resize.extension import Extension
from numamem.memorymanager.state.model import MemoryState
from numamem.memtypes import MEMORY, Block
from numamem.pod import Pod
from numamem.quantity import format_bytes_exact
from numamem.topologymanager.policy import TopologyPolicy
from numamem.work import Work

BUDGET = "spec.resources.requests"


def decide(
    state: MemoryState,
    policy: Policy,
    topology: TopologyPolicy | None,
    pod: Pod,
    container_name: str,
    work: Work,
    hint_nodes: tuple[int, ...] | None = None,
) -> Resize:
    """What resizing ``pod`` (as the API server accepted the resize) does on ``state`` (read
    only), seen from ``container_name`` ("" for the pod itself). A pod allocated as a whole
    is resized by the rules of the module docstring; any other pod's container by
    :func:`.decide.decide`, and its pod ("") has no budget pinned (``not-pinned``)."""
    pod_blocks = state.get_pod_memory_blocks(pod.uid)
    if pod_blocks is None:
        container = pod.container(container_name) if container_name else None
        if container is None:
            return Resize(pod.uid, container_name, NOT_PINNED)
        return resizing.decide(state, policy, topology, pod, container, work, hint_nodes)
    return _Budget(state, policy, pod, container_name, tuple(pod_blocks)).decide(
        topology, work, hint_nodes
    )


class _Budget:
    """One pod-level resize decision: the stored budget and shares, and the resized pod."""

    def __init__(
        self,
        state: MemoryState,
        policy: Policy,
        pod: Pod,
        container_name: str,
        pod_blocks: tuple[Block, ...],
    ) -> None:
        self.state, self.policy, self.pod, self.name = state, policy, pod, container_name
        self.pod_blocks = pod_blocks
        self.old = {b.type: b.size for b in pod_blocks}
        self.nodes = tuple(sorted(pod_blocks[0].numa_affinity or ())) if pod_blocks else ()
        names = set(state.container_names(pod.uid))
        order = [c.name for c in pod.all_containers() if c.name in names]
        order += sorted(names - set(order))
        self.current = {n: tuple(state.get_memory_blocks(pod.uid, n) or ()) for n in order}
        self.head = f"pod {quote(pod.uid)}" + (
            f", container {quote(container_name)}" if container_name else ""
        )

    def _shown(
        self, containers: Mapping[str, Sequence[Block]], pod_blocks: Sequence[Block]
    ) -> tuple[Block, ...]:
        return tuple(containers.get(self.name, ()) if self.name else pod_blocks)

    def refuse(
        self, why: str, error: ResizeError | None = None, plan: Extension | None = None
    ) -> Resize:
        """Nothing changes: the stored sizes, and the refusal."""
        shown = self._shown(self.current, self.pod_blocks)
        size = _memory(shown)
        size_now = self.old.get(MEMORY, 0)
        budget = PodBudget(
            size_now,
            size_now,
            self.pod_blocks,
            tuple(self.current.items()),
            tuple(sorted(self.state.exclusive_containers(self.pod.uid))),
        )
        error = error or ResizeInfeasibleError(f"Infeasible: {self.head}: {why}")
        return Resize(
            self.pod.uid, self.name, UNCHANGED, size, size, self.nodes, self.nodes, shown,
            extension=plan, refusal=error, pod_level=budget,
        )  # fmt: skip

    def decide(
        self, topology: TopologyPolicy | None, work: Work, hint_nodes: tuple[int, ...] | None
    ) -> Resize:
        pod, policy = self.pod, self.policy
        if not podlevel.allocated_as_pod(policy.gates, pod):
            return self.refuse(
                "the pod is allocated by its pod-level resources (KEP-5526), and the resized "
                "pod sets none in spec.resources (the API server does not add or remove "
                "pod-level resources in a resize); fix: keep spec.resources"
            )
        container = pod.container(self.name) if self.name else None
        why = resizing.forbidden(pod, container)
        if why:
            return self.refuse(why)
        try:
            budget = pod_requested_resources(pod, pod_level=True)
        except AllocationError as err:
            return self.refuse(str(err))
        if MEMORY not in budget:
            return self.refuse(
                f'{BUDGET}["memory"]: none, pinned {format_bytes_exact(self.old.get(MEMORY, 0))}: '
                "the pod's budget must keep its memory; fix: set spec.resources memory"
            )
        own = {c.name: container_requested_resources(c, pod, True) for c in pod.all_containers()}
        why = (
            resizing.changed_hugepages(BUDGET, budget, self.old)
            or self._shares_kept(own)
            or _over_budget(pod, budget, own)
        )
        if why:
            return self.refuse(why)
        rejection = podlevel.validate_pod_scope_resources(pod, budget, lambda c: own[c.name])
        if rejection is not None:
            return self.refuse(
                f"EmptyPodSharedPoolError: {rejection} ({_sums(pod, budget, own)}); fix: keep "
                f"{BUDGET} above the exclusive containers' requests (grow spec.resources or "
                "shrink an exclusive container)"
            )
        return self._resized(budget, own, topology, work, hint_nodes)

    def _shares_kept(self, own: Mapping[str, Mapping[str, int]]) -> str:
        """Why a container's kind of memory or its hugepages would change ("" when none)."""
        if not self.state.exclusive_known(self.pod.uid):
            return ""  # restored from a kubelet's file: unknown, the resized pod says
        recorded = self.state.exclusive_containers(self.pod.uid)
        for name in self.current:
            if name not in own:
                continue
            if (name in recorded) != bool(own[name]):
                if name in recorded:
                    return f"container {quote(name)}: {resizing.lost_own_memory({})}"
                return (
                    f"container {quote(name)}: it shares its pod's memory, and its resized "
                    "resources give it memory of its own (its cpu and memory requests now equal "
                    "its limits): numamem does not move a container between a shared pool and "
                    "memory of its own in place; fix: keep its requests as they were, or "
                    "recreate the pod"
                )
            if name not in recorded:
                continue
            stored = {b.type: b.size for b in self.current[name]}
            why = resizing.changed_hugepages("requests", own[name], stored)
            if why:
                return f"container {quote(name)}: {why}"
            if self.pod.is_regular_init_container(name) and dict(own[name]) != stored:
                return (
                    f"container {quote(name)}: a regular init container cannot be resized in "
                    "place (the API server resizes app containers and sidecars only)"
                )
        return ""

    def _resized(
        self,
        budget: Mapping[str, int],
        own: Mapping[str, Mapping[str, int]],
        topology: TopologyPolicy | None,
        work: Work,
        hint_nodes: tuple[int, ...] | None,
    ) -> Resize:
        uid, nodes = self.pod.uid, self.nodes
        old_size, new_size = self.old.get(MEMORY, 0), budget[MEMORY]
        wider, action, plan = nodes, UNCHANGED, None
        if new_size > old_size:
            growth = Growth(uid, nodes, old_size, new_size, budget)
            plan, why = resizing.grow(self.state, topology, growth, work, hint_nodes)
            if why:
                verdict = resizing.refused_alone(
                    self.state, self.policy, topology, growth, work, hint_nodes, why
                )
                what = f'{BUDGET}["memory"]'
                error = resizing.verdict_error(verdict, self.head, what, old_size, new_size)
                return self.refuse("", error, plan)
            action = GROWN if plan is None else EXTENDED
            wider = nodes if plan is None else tuple(plan.nodes or ())
        elif new_size < old_size:
            action = SHRUNK
        split = podlevel.partition(self.pod, budget, wider, lambda c: own[c.name])
        containers = {n: tuple(split.containers.get(n, b)) for n, b in self.current.items()}
        if action == UNCHANGED and containers != self.current:
            action = REPARTITIONED
        shown = self._shown(containers, split.pod_blocks)
        before = _memory(self._shown(self.current, self.pod_blocks))
        moved = resizing.members(self.state, nodes) if action == EXTENDED else ()
        pod_budget = PodBudget(
            old_size, new_size, tuple(split.pod_blocks), tuple(containers.items()), split.exclusive
        )
        return Resize(
            uid, self.name, action, before, _memory(shown), nodes, wider, shown, moved, plan,
            pod_level=pod_budget,
        )  # fmt: skip


def _memory(blocks: Sequence[Block]) -> int:
    return next((b.size for b in blocks if b.type == MEMORY), 0)


def _long_running(pod: Pod) -> list[str]:
    """The containers whose own memory is taken from the budget for good: sidecars, app."""
    return [c.name for c in pod.init_containers if c.restartable] + [c.name for c in pod.containers]


def _over_budget(pod: Pod, budget: Mapping[str, int], own: Mapping[str, Mapping[str, int]]) -> str:
    """Why the exclusive shares exceed the budget ("" when they fit)."""
    for name in sorted(budget, key=podlevel.resource_order):
        shares = [(c, own[c].get(name, 0)) for c in _long_running(pod) if own[c].get(name, 0)]
        total = sum(size for _, size in shares)
        if total > budget[name]:
            listed = ", ".join(f"{quote(c)} {format_bytes_exact(s)}" for c, s in shares)
            return (
                f'{BUDGET}["{name}"]: {format_bytes_exact(budget[name])}: the exclusive {name} of '
                f"the sidecars and app containers would be {format_bytes_exact(total)} ({listed}), "
                f"more than the pod's budget; fix: resize the pod's spec.resources too (to at "
                f"least {format_bytes_exact(total)})"
            )
    return ""


def _sums(pod: Pod, budget: Mapping[str, int], own: Mapping[str, Mapping[str, int]]) -> str:
    """The exclusive sums against the budget, per type, in words."""
    return "; ".join(
        f"{name}: exclusive "
        f"{format_bytes_exact(sum(own[c].get(name, 0) for c in _long_running(pod)))} of "
        f'{BUDGET}["{name}"] {format_bytes_exact(budget[name])}'
        for name in sorted(budget, key=podlevel.resource_order)
    )
