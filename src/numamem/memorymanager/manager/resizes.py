"""The memory manager's in-place resizes (a numamem extension;
:mod:`numamem.memorymanager.resize.decide`, :mod:`numamem.memorymanager.resize.pod`).

The third layer of :class:`~numamem.memorymanager.manager.writes.Manager` (see
:mod:`.reads`).
"""

from __future__ import annotations

from numamem.errors import SearchBudgetError, quote
from numamem.memorymanager.manager.reads import container_of
from numamem.memorymanager.manager.stale import ActivePods
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.resize import pod as pod_resizing
from numamem.memorymanager.resize.apply import apply
from numamem.memorymanager.state.model import MemoryState
from numamem.pod import Pod
from numamem.work import Work


class Resizes(ActivePods):
    """:meth:`resize` and :meth:`explain_resize`."""

    def resize(
        self,
        pod: Pod,
        container_name: str,
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> resizing.Resize:
        """In-place resize of a container's pinned memory to its resources in ``pod``
        (:mod:`numamem.memorymanager.resize.decide`, a numamem extension: the kubelet's Static
        policy refuses it); of a pod allocated as a whole by its pod-level resources, its budget and
        its containers' shares (:mod:`numamem.memorymanager.resize.pod`; ``container_name`` "" names
        the pod itself).

        Stale-state cleanup first (its own write), then computed outside the lock and
        committed in one write, like :meth:`allocate`. A refusal (ResizeDeferredError,
        ResizeInfeasibleError) changes nothing; a resize to the current sizes (or of a
        container without pinned memory) writes nothing."""
        _resized(pod, container_name)
        self._touch(pod)
        self._settle_stale_state()

        def compute(fork: MemoryState, work: Work) -> tuple[bool, resizing.Resize]:
            try:
                decided = self._decide_resize(fork, pod, container_name, work)
            except SearchBudgetError as err:
                raise resizing.budget_refusal(err) from err
            if decided.refusal is not None:
                raise decided.refusal
            apply(fork, decided)
            return decided.changes, decided

        return self._versions.optimistic(pod, compute, deadline, budget)  # the RPC logs it

    def explain_resize(
        self, pod: Pod, container_name: str, *, deadline: float | None = None
    ) -> resizing.Resize:
        """What :meth:`resize` would decide now, refusal included; changes nothing, no lock."""
        _resized(pod, container_name)
        work = Work(deadline=deadline, courteous=True)
        return self._decide_resize(self._state.fork(), pod, container_name, work)

    def _decide_resize(
        self, fork: MemoryState, pod: Pod, container_name: str, work: Work
    ) -> resizing.Resize:
        nodes = self.policy.numa_nodes if isinstance(self.policy, StaticPolicy) else None
        what = f"pod {quote(pod.uid)}" + (
            f", container {quote(container_name)}" if container_name else ""
        )
        with work.stage(lambda: f"{what}: the resize"):
            return pod_resizing.decide(
                fork, self.policy, self._topology_policy, pod, container_name, work, nodes
            )


def _resized(pod: Pod, name: str) -> None:
    """A resize names a container of ``pod``, or "" for a pod that sets pod-level resources."""
    if name or not pod.pod_level_resources_set:
        container_of(pod, name)
