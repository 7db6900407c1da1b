"""The plugin's view of what the runtime has: pod sandboxes and containers, as last heard. Pure.

Replaced whole by each Synchronize (which lists the runtime's pods and its created and
running containers, not the exited ones: measured on containerd 1.7.24 and 2.1.9), kept up
to date by the events in between. The plugin reconciles the daemon with it: whatever numamem
holds for a container that is not in the view is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from numamem.nriapi import api_pb2 as api


@dataclass(frozen=True)
class PodView:
    """One pod uid's current sandbox and its containers in creation order."""

    sandbox: api.PodSandbox
    containers: tuple[api.Container, ...]


class RuntimeView:
    """See the module docstring. Not thread-safe: the plugin serializes its calls. Messages are
    copied in and never handed out for change."""

    def __init__(self) -> None:
        self._pods: dict[str, api.PodSandbox] = {}
        self._containers: dict[str, api.Container] = {}
        self._stopped: set[str] = set()
        self._order: dict[str, int] = {}
        self._next = 0

    def replace(self, pods: Iterable[api.PodSandbox], containers: Iterable[api.Container]) -> None:
        """What a Synchronize says the runtime has; in creation order where it says
        (``created_at``), else in the order listed."""
        self._pods.clear()
        self._containers.clear()
        self._stopped.clear()
        self._order.clear()
        for pod in pods:
            self.add_pod(pod)
        listed = list(containers)
        ranked = sorted(range(len(listed)), key=lambda i: (listed[i].created_at or 0, i))
        for i in ranked:
            self.add_container(listed[i])
            if listed[i].state == api.CONTAINER_STOPPED:
                self._stopped.add(listed[i].id)

    def add_pod(self, pod: api.PodSandbox) -> None:
        copy = api.PodSandbox()
        copy.CopyFrom(pod)
        self._pods[pod.id] = copy

    def add_container(self, container: api.Container, pod: api.PodSandbox | None = None) -> None:
        """A created container (and its sandbox, when given)."""
        if pod is not None and pod.id not in self._pods:
            self.add_pod(pod)
        copy = api.Container()
        copy.CopyFrom(container)
        self._containers[container.id] = copy
        self._stopped.discard(container.id)
        self._order[container.id] = self._next
        self._next += 1

    def set_mems(self, container_id: str, mems: str) -> None:
        """The ``cpuset.mems`` the plugin had the runtime set for the container."""
        container = self._containers.get(container_id)
        if container is not None:
            container.linux.resources.cpu.mems = mems

    def set_resources(self, container_id: str, resources: api.LinuxResources) -> None:
        container = self._containers.get(container_id)
        if container is not None:
            mems = container.linux.resources.cpu.mems
            container.linux.resources.CopyFrom(resources)
            container.linux.resources.cpu.mems = resources.cpu.mems or mems

    def stop(self, container_id: str) -> None:
        if container_id in self._containers:
            self._stopped.add(container_id)

    def remove_container(self, container_id: str) -> None:
        self._containers.pop(container_id, None)
        self._stopped.discard(container_id)
        self._order.pop(container_id, None)

    def remove_pod(self, sandbox_id: str) -> None:
        """The sandbox and its containers."""
        self._pods.pop(sandbox_id, None)
        for cid in [c.id for c in self._containers.values() if c.pod_sandbox_id == sandbox_id]:
            self.remove_container(cid)

    def is_stopped(self, container_id: str) -> bool:
        return container_id in self._stopped

    def container(self, container_id: str) -> api.Container | None:
        return self._containers.get(container_id)

    def sandbox(self, sandbox_id: str) -> api.PodSandbox | None:
        return self._pods.get(sandbox_id)

    def sandboxes(self) -> list[api.PodSandbox]:
        return list(self._pods.values())

    def pods(self) -> dict[str, PodView]:
        """By pod uid (sandboxes without one are left out): the sandbox of the newest
        container (the kubelet's current one, when it made a new sandbox), else the sandbox
        listed last, and that sandbox's containers in creation order."""
        by_uid: dict[str, list[api.PodSandbox]] = {}
        for pod in self._pods.values():
            uid = pod.uid or pod.labels.get("io.kubernetes.pod.uid", "")
            if uid:
                by_uid.setdefault(uid, []).append(pod)
        ordered = sorted(self._containers.values(), key=lambda c: self._order[c.id])
        out = {}
        for uid, sandboxes in by_uid.items():
            ids = {s.id for s in sandboxes}
            newest = [c for c in ordered if c.pod_sandbox_id in ids]
            current = newest[-1].pod_sandbox_id if newest else sandboxes[-1].id
            sandbox = next(s for s in sandboxes if s.id == current)
            out[uid] = PodView(sandbox, tuple(c for c in newest if c.pod_sandbox_id == current))
        return out

    def container_names(self, uid: str) -> Sequence[str]:
        """The names of the pod's containers in every sandbox of it (the pod as numamem must
        keep it)."""
        ids = {
            s.id
            for s in self._pods.values()
            if (s.uid or s.labels.get("io.kubernetes.pod.uid", "")) == uid
        }
        return sorted({c.name for c in self._containers.values() if c.pod_sandbox_id in ids})
