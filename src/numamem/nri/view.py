"""The plugin's view of what the runtime has: pod sandboxes and containers, as last heard. Pure.

Replaced whole by each Synchronize (which lists the runtime's pods and its created and
running containers, not the exited ones: measured on containerd 1.7.24 and 2.1.9), kept up
to date by the events in between. The plugin reconciles the daemon with it: whatever numamem
holds for a container that is not in the view is released.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from numamem.nri.kube import sandbox_uid
from numamem.nriapi import api_pb2 as api


@dataclass(frozen=True)
class PodView:
    """One pod uid's current sandbox, its containers in creation order, and the names of
    its containers in every sandbox of it (the pod as numamem must keep it)."""

    sandbox: api.PodSandbox
    containers: tuple[api.Container, ...]
    names: frozenset[str] = frozenset()


class RuntimeView:
    """See the module docstring. Not thread-safe: the plugin serializes its calls. Messages are
    copied in and never handed out for change. Every operation is O(1) but :meth:`replace`
    and :meth:`pods`, which are linear in the pods and containers (a Synchronize of 10^4
    pods must be answered within the runtime's request timeout)."""

    def __init__(self) -> None:
        self._pods: dict[str, api.PodSandbox] = {}
        self._containers: dict[str, api.Container] = {}
        self._stopped: set[str] = set()
        self._order: dict[str, int] = {}
        self._uids: dict[str, dict[str, None]] = {}
        """pod uid -> its sandbox ids, in the order added"""
        self._in_sandbox: dict[str, dict[str, None]] = {}
        """sandbox id -> its container ids"""
        self._next = 0

    def replace(
        self,
        pods: Iterable[api.PodSandbox],
        containers: Iterable[api.Container],
        *,
        owned: bool = False,
    ) -> None:
        """What a Synchronize says the runtime has; in creation order where it says
        (``created_at``), else in the order listed. ``owned``: the messages are the view's
        from now on (not copied: the caller never uses them again)."""
        self._pods.clear()
        self._containers.clear()
        self._stopped.clear()
        self._order.clear()
        self._uids.clear()
        self._in_sandbox.clear()
        for pod in pods:
            self.add_pod(pod, owned=owned)
        listed = list(containers)
        ranked = sorted(range(len(listed)), key=lambda i: (listed[i].created_at or 0, i))
        for i in ranked:
            self.add_container(listed[i], owned=owned)
            if listed[i].state == api.CONTAINER_STOPPED:
                self._stopped.add(listed[i].id)

    def add_pod(self, pod: api.PodSandbox, *, owned: bool = False) -> None:
        copy = pod
        if not owned:
            copy = api.PodSandbox()
            copy.CopyFrom(pod)
        self._pods[pod.id] = copy
        uid = sandbox_uid(pod)
        if uid:
            self._uids.setdefault(uid, {})[pod.id] = None

    def add_container(
        self, container: api.Container, pod: api.PodSandbox | None = None, *, owned: bool = False
    ) -> None:
        """A created container (and its sandbox, when given)."""
        if pod is not None and pod.id not in self._pods:
            self.add_pod(pod)
        copy = container
        if not owned:
            copy = api.Container()
            copy.CopyFrom(container)
        old = self._containers.get(container.id)
        if old is not None and old.pod_sandbox_id != container.pod_sandbox_id:
            self.remove_container(container.id)
        self._containers[container.id] = copy
        self._in_sandbox.setdefault(container.pod_sandbox_id, {})[container.id] = None
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
        container = self._containers.pop(container_id, None)
        if container is not None:
            ids = self._in_sandbox.get(container.pod_sandbox_id)
            if ids is not None:
                ids.pop(container_id, None)
                if not ids:
                    del self._in_sandbox[container.pod_sandbox_id]
        self._stopped.discard(container_id)
        self._order.pop(container_id, None)

    def remove_pod(self, sandbox_id: str) -> None:
        """The sandbox and its containers."""
        pod = self._pods.pop(sandbox_id, None)
        if pod is not None:
            uid = sandbox_uid(pod)
            ids = self._uids.get(uid)
            if ids is not None:
                ids.pop(sandbox_id, None)
                if not ids:
                    del self._uids[uid]
        for cid in list(self._in_sandbox.get(sandbox_id, ())):
            self.remove_container(cid)

    def has_pod(self, uid: str) -> bool:
        """Whether a sandbox of pod ``uid`` is in the view."""
        return uid in self._uids

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
        listed last, and that sandbox's containers in creation order. One pass over the
        containers: linear but for sorting each sandbox's few containers."""

        def containers(sandbox_id: str) -> list[api.Container]:
            ids = sorted(self._in_sandbox.get(sandbox_id, ()), key=self._order.__getitem__)
            return [self._containers[cid] for cid in ids]

        out = {}
        for uid, ids in self._uids.items():
            sandboxes = list(ids)  # in the order listed
            newest, names = None, set()
            listed = {sandbox_id: containers(sandbox_id) for sandbox_id in sandboxes}
            for sandbox_id in sandboxes:
                for container in listed[sandbox_id]:
                    names.add(container.name)
                    if newest is None or self._order[container.id] > self._order[newest.id]:
                        newest = container
            current = newest.pod_sandbox_id if newest is not None else sandboxes[-1]
            out[uid] = PodView(self._pods[current], tuple(listed[current]), frozenset(names))
        return out
