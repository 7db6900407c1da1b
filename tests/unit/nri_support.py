"""Shared pieces of the NRI plugin tests: a recording handler, a plugin running in a thread,
a plugin connected to a scripted runtime. (tests/unit/conftest.py has their fixtures.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from numamem.nri import handler as hmod
from numamem.nri.handler import CallContext, Handler
from numamem.nri.plugin import Backoff, Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.nri_runtime import PluginPeer, ScriptedRuntime

FAST = Backoff(initial=0.01, maximum=0.05)


class Recorder(Handler):
    """Records every call (method name, request, context); answers as a pinning plugin would:
    ``cpuset.mems`` "0" for a created container, "1" for an updated one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, CallContext]] = []
        self._lock = threading.Lock()
        self.hook: Callable[[str, Any], None] | None = None
        """Called first in every method (tests make a call block or fail with it)."""

    def record(self, name: str, req: Any, ctx: CallContext) -> None:
        with self._lock:
            self.calls.append((name, req, ctx))
        if self.hook is not None:
            self.hook(name, req)

    def names(self) -> list[str]:
        with self._lock:
            return [name for name, _, _ in self.calls]

    def requests(self, name: str) -> list[Any]:
        with self._lock:
            return [req for n, req, _ in self.calls if n == name]

    def contexts(self, name: str) -> list[CallContext]:
        with self._lock:
            return [ctx for n, _, ctx in self.calls if n == name]

    def configure(self, req: api.ConfigureRequest, ctx: CallContext) -> api.ConfigureResponse:
        self.record("configure", req, ctx)
        return super().configure(req, ctx)

    def synchronize(self, req: api.SynchronizeRequest, ctx: CallContext) -> api.SynchronizeResponse:
        self.record("synchronize", req, ctx)
        return api.SynchronizeResponse(
            update=[
                obj.mems_update(c.id, "0") for c in req.containers if not c.linux.resources.cpu.mems
            ]
        )

    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        self.record("create_container", req, ctx)
        return api.CreateContainerResponse(adjust=obj.mems_adjustment("0"))

    def update_container(
        self, req: api.UpdateContainerRequest, ctx: CallContext
    ) -> api.UpdateContainerResponse:
        self.record("update_container", req, ctx)
        return api.UpdateContainerResponse(update=[obj.mems_update(req.container.id, "1")])

    def stop_container(
        self, req: api.StopContainerRequest, ctx: CallContext
    ) -> api.StopContainerResponse:
        self.record("stop_container", req, ctx)
        return api.StopContainerResponse()

    def remove_container(
        self, req: api.RemoveContainerRequest, ctx: CallContext
    ) -> api.RemoveContainerResponse:
        self.record("remove_container", req, ctx)
        return api.RemoveContainerResponse()

    def shutdown(self, req: api.Empty, ctx: CallContext) -> api.Empty:
        self.record("shutdown", req, ctx)
        return api.Empty()


class PodRecorder(Recorder):
    """A :class:`Recorder` that also handles the pod events."""

    def run_pod_sandbox(
        self, req: api.RunPodSandboxRequest, ctx: CallContext
    ) -> api.RunPodSandboxResponse:
        self.record("run_pod_sandbox", req, ctx)
        return api.RunPodSandboxResponse()

    def stop_pod_sandbox(
        self, req: api.StopPodSandboxRequest, ctx: CallContext
    ) -> api.StopPodSandboxResponse:
        self.record("stop_pod_sandbox", req, ctx)
        return api.StopPodSandboxResponse()

    def remove_pod_sandbox(
        self, req: api.RemovePodSandboxRequest, ctx: CallContext
    ) -> api.RemovePodSandboxResponse:
        self.record("remove_pod_sandbox", req, ctx)
        return api.RemovePodSandboxResponse()


@contextmanager
def running(plugin: Plugin) -> Iterator[threading.Thread]:
    """``plugin.run()`` in a thread; stopped and joined on exit, which must end it."""
    thread = threading.Thread(target=plugin.run, name="plugin-run")
    thread.start()
    try:
        yield thread
    finally:
        plugin.stop()
        thread.join(30)
        assert not thread.is_alive(), "Plugin.run() did not return after stop()"


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for ``predicate`` (polling); fail naming ``what`` if it is not true in ``timeout``
    seconds (a bound against hanging, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


def nri_threads() -> list[str]:
    """Threads of NRI endpoints (readers, workers) and plugins alive now."""
    return sorted(
        t.name for t in threading.enumerate() if t.name.startswith(("nri-", "plugin-run"))
    )


def external(handler: Handler, sock: Path, **kwargs: object) -> Plugin:
    return Plugin(handler, name="numamem", idx="90", socket_path=str(sock), backoff=FAST, **kwargs)  # type: ignore[arg-type]


@contextmanager
def connected(handler: Handler, sock: Path, **runtime: Any) -> Iterator[PluginPeer]:
    """A :class:`ScriptedRuntime` on ``sock`` (``runtime``: its options) and an external
    plugin of ``handler`` registered with it: yields the runtime's side of the connection,
    not configured yet. On exit the plugin is stopped (it must end) and the runtime too."""
    scripted = ScriptedRuntime(sock, **runtime).start()
    try:
        with running(external(handler, sock)):
            yield scripted.accept()
    finally:
        scripted.stop()


class StateChangeOnly(Handler):
    """Sees the pod events only through StateChange (no dedicated method)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str, str]] = []

    def configure(self, req: api.ConfigureRequest, ctx: CallContext) -> api.ConfigureResponse:
        return api.ConfigureResponse(
            events=hmod.events_mask([api.RUN_POD_SANDBOX, api.REMOVE_CONTAINER])
        )

    def state_change(self, req: api.StateChangeEvent, ctx: CallContext) -> api.Empty:
        self.events.append((req.event, req.pod.uid, req.container.id))
        return api.Empty()
