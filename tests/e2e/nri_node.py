"""A node for NRI plugin tests: the scripted runtime, the real daemon (a subprocess on a fake
machine) and ``numamem nri``'s handler serving in this process, on the same framing code.

:class:`Node` plays containerd's part: it keeps the pods and containers it "runs", sends the
plugin the events containerd sends (CreateContainer, StopContainer, RemoveContainer,
RemovePodSandbox, UpdateContainer) and applies what the plugin answers to its containers'
``cpuset.mems``, and Synchronizes a (re)connected plugin with what it runs, listing created
and running containers but not exited ones, as containerd 1.7.24 and 2.1.9 do.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from numamem.client import NumamemClient
from numamem.nri.daemonlink import DaemonLink
from numamem.nri.memoryplugin import MemoryPlugin
from numamem.nri.options import PluginOptions
from numamem.nri.plugin import Backoff, Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.daemon import DaemonProcess
from numamem.testing.nri_runtime import Flavor, PluginPeer, ScriptedRuntime
from tests.daemon import STATIC_ARGS

FAST = Backoff(initial=0.01, maximum=0.05)
GI = 1 << 30
MI = 1 << 20


@dataclass
class RunningPlugin:
    handler: MemoryPlugin
    plugin: Plugin
    thread: threading.Thread
    peer: PluginPeer

    def stop(self) -> None:
        self.plugin.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "Plugin.run() did not return after stop()"
        self.handler.stop()


@dataclass
class Node:
    """See the module docstring."""

    root: Path
    daemon: DaemonProcess
    flavor: Flavor = "2.x"
    on_reject: str = "fail"
    request_timeout: float = 2.0
    pods: dict[str, api.PodSandbox] = field(default_factory=dict)
    containers: dict[str, api.Container] = field(default_factory=dict)
    running: RunningPlugin | None = None
    instances: dict[tuple[str, str], int] = field(default_factory=dict)
    """(pod uid, container name) -> instances created so far (the kubelet's restartCount)"""

    def __post_init__(self) -> None:
        self.runtime = ScriptedRuntime(
            self.root / "nri.sock", flavor=self.flavor, request_timeout=self.request_timeout
        ).start()
        self.client = NumamemClient(self.daemon.socket, timeout=10)

    # --- the plugin ------------------------------------------------------------------------

    def start_plugin(self, *, synchronize: bool = True) -> RunningPlugin:
        options = PluginOptions(socket=self.daemon.socket, on_reject=self.on_reject)
        handler = MemoryPlugin(options, DaemonLink(self.daemon.socket), poll=0.05)
        plugin = Plugin(
            handler,
            name="numamem",
            idx="50",
            socket_path=str(self.runtime.socket_path),
            backoff=FAST,
        )
        handler.reconciler.updater = plugin.update_containers
        handler.start()
        thread = threading.Thread(target=plugin.run, name="plugin-run")
        thread.start()
        peer = self.runtime.accept()
        peer.configure()
        self.running = RunningPlugin(handler, plugin, thread, peer)
        if synchronize:
            passes = handler.reconciler.passes
            self.synchronize()
            self.wait_reconciled(passes + 1)
        return self.running

    def wait_reconciled(self, passes: int) -> None:
        """Wait for the plugin's reconciler to complete ``passes`` full passes, then apply the
        updates it sent."""
        assert self.handler.reconciler.wait_passes(passes, 30), "no reconciliation in 30 s"
        self.apply_unsolicited()

    def stop_plugin(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None

    @property
    def peer(self) -> PluginPeer:
        assert self.running is not None, "start_plugin() first"
        return self.running.peer

    @property
    def handler(self) -> MemoryPlugin:
        assert self.running is not None, "start_plugin() first"
        return self.running.handler

    def close(self) -> None:
        self.stop_plugin()
        self.runtime.stop()
        self.client.close()

    # --- what the runtime runs --------------------------------------------------------------

    def run_pod(
        self, name: str, uid: str | None = None, *, cgroup_parent: str | None = None
    ) -> api.PodSandbox:
        uid = uid or str(uuid.uuid4())
        sandbox = obj.pod(
            name, uid, sandbox_id=f"sb-{uuid.uuid4().hex[:12]}", cgroup_parent=cgroup_parent
        )
        self.pods[sandbox.id] = sandbox
        return sandbox

    def create(
        self,
        sandbox: api.PodSandbox,
        name: str,
        memory: int | None,
        *,
        cpu_milli: int | None = 1000,
        hugepages: dict[str, int] | None = None,
        cpus: str = "0-3",
    ) -> tuple[api.Container, api.CreateContainerResponse]:
        """CreateContainer as the kubelet's CRI call makes containerd send it (with the
        kubelet's restartCount: the name's earlier instances in the pod); the plugin's
        adjustment is applied to the container (raises the plugin's refusal)."""
        key = (sandbox.uid, name)
        container = obj.container(
            sandbox,
            name,
            container_id=f"c-{uuid.uuid4().hex[:16]}",
            memory_limit=memory,
            cpu_milli=cpu_milli,
            hugepages=hugepages,
            cpus=cpus,
            restart_count=self.instances.get(key, 0),
        )
        reply = self.peer.create_container(sandbox, container)
        self.instances[key] = self.instances.get(key, 0) + 1
        assert reply is not None
        container.linux.resources.cpu.mems = reply.adjust.linux.resources.cpu.mems
        container.state = api.CONTAINER_RUNNING
        self.containers[container.id] = container
        self._apply(self.peer.update_requests)
        return container, reply

    def stop(self, container: api.Container) -> None:
        self.peer.stop_container(self.pods[container.pod_sandbox_id], container)
        container.state = api.CONTAINER_STOPPED

    def remove(self, container: api.Container) -> None:
        self.peer.remove_container(self.pods[container.pod_sandbox_id], container)
        del self.containers[container.id]

    def remove_pod(self, sandbox: api.PodSandbox) -> None:
        for c in [c for c in self.containers.values() if c.pod_sandbox_id == sandbox.id]:
            if c.state != api.CONTAINER_STOPPED:
                self.stop(c)
            self.remove(c)
        self.peer.stop_pod_sandbox(sandbox)
        self.peer.remove_pod_sandbox(sandbox)
        del self.pods[sandbox.id]

    def update(
        self, container: api.Container, memory: int, *, cpu_milli: int = 1000
    ) -> api.UpdateContainerResponse:
        resources = api.LinuxResources()
        resources.CopyFrom(container.linux.resources)
        resources.memory.limit.value = memory
        resources.cpu.quota.value = cpu_milli * 100
        reply = self.peer.update_container(
            self.pods[container.pod_sandbox_id], container, resources
        )
        assert reply is not None
        container.linux.resources.CopyFrom(resources)
        self._apply_updates(reply.update)
        return reply

    def synchronize(self, *, per_message: int | None = None) -> list[api.ContainerUpdate]:
        listed = [c for c in self.containers.values() if c.state != api.CONTAINER_STOPPED]
        updates = self.peer.synchronize(list(self.pods.values()), listed, per_message=per_message)
        self._apply_updates(updates)
        return updates

    def _apply(self, requests: list[api.UpdateContainersRequest]) -> None:
        while requests:
            self._apply_updates(requests.pop(0).update)

    def _apply_updates(self, updates: object) -> None:
        for update in updates:  # type: ignore[attr-defined]
            container = self.containers.get(update.container_id)
            if container is not None and update.linux.resources.cpu.mems:
                container.linux.resources.cpu.mems = update.linux.resources.cpu.mems

    def apply_unsolicited(self) -> None:
        """Apply the UpdateContainers the plugin sent on its own (reconciliations)."""
        self._apply(self.peer.update_requests)

    def mems(self, container: api.Container) -> str:
        return self.containers[container.id].linux.resources.cpu.mems

    def held(self) -> dict[str, set[str]]:
        return held(self.client)


def held(client: NumamemClient) -> dict[str, set[str]]:
    """The daemon's memory manager state now: pod uid -> the names of its containers holding
    memory (one GetState)."""
    return {uid: set(e.containers) for uid, e in client.get_state().entries.items()}


@contextmanager
def started_node(
    root: Path,
    daemon_factory: list[DaemonProcess],
    flags: Sequence[str] = STATIC_ARGS,
    **options: object,
) -> Iterator[Node]:
    """The real daemon on ``root`` started with ``flags`` (the conftest's ``daemon_factory``
    kills it), a :class:`Node` on it (``options``: the Node's fields) and ``numamem nri``'s
    plugin registered and synchronized; the plugin and the runtime are stopped on exit."""
    daemon = DaemonProcess(root, list(flags))
    daemon_factory.append(daemon)
    daemon.start()
    node = Node(root, daemon, **options)  # type: ignore[arg-type]
    try:
        node.start_plugin()
        yield node
    finally:
        node.close()
