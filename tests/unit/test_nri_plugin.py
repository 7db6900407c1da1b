"""The NRI plugin against a scripted runtime: the whole sequence in both modes, containerd 1.7's
StateChange path, the Unimplemented fallback, handler errors and timeouts, reconnects, clean stops."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.errors import NriConnectionError, NriStatusError
from numamem.nri import handler as hmod
from numamem.nri import status
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.nri_runtime import ScriptedRuntime, inheritable, plugin_env
from tests.unit.nri_support import (
    PodRecorder,
    Recorder,
    StateChangeOnly,
    connected,
    external,
    running,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_leaked_nri_threads")


def test_external_plugin_registers_configures_synchronizes_and_handles_events(
    nri_sock: Path,
) -> None:
    handler = Recorder()
    with connected(handler, nri_sock, request_timeout=1.5) as peer:
        assert (peer.registration.plugin_name, peer.registration.plugin_idx) == (
            "numamem",
            "90",
        )  # type: ignore[union-attr]

        reply = peer.configure("pin: true")
        expected = {
            api.CREATE_CONTAINER,
            api.UPDATE_CONTAINER,
            api.STOP_CONTAINER,
            api.REMOVE_CONTAINER,
        }
        assert reply.events == sum(1 << (e - 1) for e in expected) == 0b110_1000_1000
        [configure] = handler.requests("configure")
        assert (configure.config, configure.request_timeout) == ("pin: true", 1500)

        pods = [obj.pod(f"p{i}", f"u{i}") for i in range(5)]
        containers = [obj.container(p, mems="0" if i == 4 else "") for i, p in enumerate(pods)]
        updates = peer.synchronize(pods, containers, per_message=2)  # 3 messages
        [whole] = handler.requests("synchronize")
        assert [p.uid for p in whole.pods] == [f"u{i}" for i in range(5)]
        assert [c.id for c in whole.containers] == [c.id for c in containers]
        assert not whole.more
        assert [u.container_id for u in updates] == [c.id for c in containers[:4]]

        created = peer.create_container(pods[0], containers[0])
        assert created is not None and created.adjust.linux.resources.cpu.mems == "0"
        [create] = handler.requests("create_container")
        assert (create.pod.uid, create.container.name) == ("u0", "app")

        new = api.LinuxResources()
        new.memory.limit.value = 2 << 30
        updated = peer.update_container(pods[0], containers[0], new)
        assert updated is not None and updated.update[0].linux.resources.cpu.mems == "1"
        assert handler.requests("update_container")[0].linux_resources.memory.limit.value == 2 << 30

        assert peer.stop_container(pods[0], containers[0]) is not None
        assert peer.remove_container(pods[0], containers[0])
        assert not peer.fallback  # RemoveContainer is served: no StateChange needed
        assert not peer.run_pod_sandbox(pods[0])  # not subscribed: never sent
        assert handler.names() == [
            "configure", "synchronize", "create_container", "update_container",
            "stop_container", "remove_container",
        ]  # fmt: skip


def test_the_handler_knows_the_runtimes_request_timeout(nri_sock: Path) -> None:
    handler = Recorder()
    with connected(handler, nri_sock, request_timeout=0.75) as peer:
        peer.configure()
        pod = obj.pod()
        peer.create_container(pod, obj.container(pod))
        [before] = handler.contexts("configure")
        [ctx] = handler.contexts("create_container")
        assert before.request_timeout == ctx.request_timeout == 0.75  # Configure's own too
        assert hmod.DEFAULT_REQUEST_TIMEOUT == 2.0
        assert ctx.method == "CreateContainer"
        assert 0 <= ctx.remaining() <= 0.75


def test_configure_may_come_before_the_registration_reply(nri_sock: Path) -> None:
    """The runtime configures from inside its RegisterPlugin handler: a plugin that waited
    for the registration reply before reading would never answer, and time out."""
    handler = Recorder()
    runtime = ScriptedRuntime(
        nri_sock, configure_in_register="early", registration_timeout=5
    ).start()
    try:
        plugin = external(handler, nri_sock)
        with running(plugin):
            peer = runtime.accept()
            assert peer.configured is not None and peer.configured.events != 0
            assert plugin.wait_registered(10)
            assert handler.requests("configure")[0].config == "early"
    finally:
        runtime.stop()


def test_prelaunched_plugin_serves_the_socketpair_and_returns_when_it_closes() -> None:
    handler = Recorder()
    runtime = ScriptedRuntime()
    peer, theirs = runtime.prelaunch()
    plugin = Plugin.prelaunched(handler, plugin_env("numamem", "05", theirs.detach()))
    thread = threading.Thread(target=plugin.run, name="plugin-run")
    thread.start()
    try:
        assert peer.wait_registered(10).plugin_idx == "05"
        peer.configure("from plugin_config_path")
        pod = obj.pod()
        assert peer.create_container(pod, obj.container(pod)) is not None
    finally:
        peer.close()  # the runtime drops the plugin: run() returns, the process would exit
        thread.join(30)
    assert not thread.is_alive()
    assert handler.names() == ["configure", "create_container"]


CHILD = """
import sys
from numamem.nri.handler import Handler
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api

class Pin(Handler):
    def create_container(self, req, ctx):
        out = api.CreateContainerResponse()
        out.adjust.linux.resources.cpu.mems = "0"
        out.adjust.annotations["pid-of-plugin"] = "child"
        return out

Plugin.prelaunched(Pin()).run()
print("exited after the runtime closed the connection", file=sys.stderr)
"""


# Puts the socket on fd 3 and execs the plugin, as containerd's launch does (a shell cannot:
# dash redirects single-digit fds only).
EXEC_ON_FD_3 = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.execv(sys.executable, [sys.executable, '-c', sys.argv[2]])"


def test_prelaunched_plugin_process_with_only_the_runtimes_environment() -> None:
    """As containerd starts it: fd 3 a socketpair end, NRI_PLUGIN_* only, no PATH."""
    import subprocess

    runtime = ScriptedRuntime()
    peer, theirs = runtime.prelaunch()
    fd = inheritable(theirs)
    child = subprocess.Popen(
        [sys.executable, "-c", EXEC_ON_FD_3, str(fd), CHILD],
        env=plugin_env("numamem", "10", 3),
        pass_fds=[fd],
        stderr=subprocess.PIPE,
        text=True,
    )
    theirs.close()
    try:
        assert peer.wait_registered(30).plugin_name == "numamem"
        peer.configure()
        pod = obj.pod()
        reply = peer.create_container(pod, obj.container(pod))
        assert reply is not None and reply.adjust.annotations["pid-of-plugin"] == "child"
    finally:
        peer.close()
        _, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert "exited after the runtime closed the connection" in err


def test_containerd_17_delivers_lifecycle_events_through_state_change(nri_sock: Path) -> None:
    handler = PodRecorder()
    with connected(handler, nri_sock, flavor="1.7") as peer:
        peer.configure()
        pod = obj.pod()
        ctr = obj.container(pod)
        assert peer.run_pod_sandbox(pod)
        assert peer.create_container(pod, ctr) is not None  # a direct RPC in 1.7 too
        assert peer.remove_container(pod, ctr)
        assert peer.stop_pod_sandbox(pod)
        assert peer.remove_pod_sandbox(pod)
        assert handler.names() == [
            "configure", "run_pod_sandbox", "create_container", "remove_container",
            "stop_pod_sandbox", "remove_pod_sandbox",
        ]  # fmt: skip
        [removed] = handler.requests("remove_container")
        assert (removed.pod.uid, removed.container.id) == (pod.uid, ctr.id)
        assert handler.requests("run_pod_sandbox")[0].pod.name == "pod-a"


def test_unimplemented_methods_make_containerd_2_fall_back_to_state_change(nri_sock: Path) -> None:
    handler = StateChangeOnly()
    with connected(handler, nri_sock, flavor="2.x") as peer:
        peer.configure()
        pod = obj.pod()
        with pytest.raises(NriStatusError) as refused:
            peer.call("RunPodSandbox", api.RunPodSandboxRequest(pod=pod), api.Empty)
        assert refused.value.code == status.UNIMPLEMENTED == 12
        assert peer.run_pod_sandbox(pod)  # Unimplemented again, then StateChange
        assert peer.fallback
        ctr = obj.container(pod)
        assert peer.remove_container(pod, ctr)  # straight to StateChange now
        assert handler.events == [
            (api.RUN_POD_SANDBOX, pod.uid, ""),
            (api.REMOVE_CONTAINER, pod.uid, ctr.id),
        ]


def test_after_a_fallback_state_change_still_reaches_the_dedicated_methods(nri_sock: Path) -> None:
    """One Unimplemented switches every lifecycle event of the plugin to StateChange: the
    methods the handler does implement must still be called."""
    handler = Recorder()  # remove_container, no pod methods
    with connected(handler, nri_sock) as peer:
        peer.configure()
        pod = obj.pod()
        with pytest.raises(NriStatusError, match="method RunPodSandbox not implemented"):
            peer.call("RunPodSandbox", api.RunPodSandboxRequest(pod=pod), api.Empty)
        peer.fallback = True  # what containerd 2.x does after that answer
        assert peer.remove_container(pod, obj.container(pod))
        peer.state_change(api.RUN_POD_SANDBOX, pod)  # not handled: ignored, not an error
        assert handler.names() == ["configure", "remove_container"]


def test_a_slow_handler_is_dropped_by_the_runtime_and_the_plugin_reconnects(nri_sock: Path) -> None:
    handler = Recorder()
    release = threading.Event()

    def block(name: str, req: object) -> None:
        if name == "create_container":
            release.wait(30)

    handler.hook = block
    runtime = ScriptedRuntime(nri_sock, request_timeout=0.2).start()
    plugin = external(handler, nri_sock)
    try:
        with capture_logs() as logs, running(plugin):
            peer = runtime.accept()
            peer.configure()
            pod = obj.pod()
            with pytest.raises(NriStatusError) as late:
                peer.create_container(pod, obj.container(pod))
            assert late.value.code == status.DEADLINE_EXCEEDED
            assert peer.wait_closed(10)  # the runtime dropped the plugin
            again = runtime.accept()  # while the old handler call still blocks
            assert again.registration is not None
            assert plugin.wait_registered(10, sessions=2)
            release.set()
        assert plugin.sessions == 2
        assert [e["method"] for e in logs if e.get("problem") == "late_reply"] == [
            "CreateContainer"
        ]
    finally:
        release.set()
        runtime.stop()


def test_the_plugin_reconnects_after_the_runtime_restarts_and_is_synchronized_again(
    nri_sock: Path,
) -> None:
    handler = Recorder()
    runtime = ScriptedRuntime(nri_sock).start()
    plugin = external(handler, nri_sock)
    try:
        with running(plugin):
            first = runtime.accept()
            first.configure()
            pod = obj.pod()
            first.synchronize([pod], [obj.container(pod)])
            runtime.stop()  # containerd goes away: the socket too
            assert first.closed
            runtime.start()  # and comes back
            second = runtime.accept()
            second.configure()
            second.synchronize([pod], [])
            assert plugin.wait_registered(10, sessions=2)
            failed = plugin.update_containers([obj.mems_update("c1", "0")])
            assert failed == []
            assert [r.update[0].container_id for r in second.update_requests] == ["c1"]
        assert plugin.sessions == 2
        assert handler.names() == ["configure", "synchronize", "configure", "synchronize"]
        assert [len(r.containers) for r in handler.requests("synchronize")] == [1, 0]
    finally:
        runtime.stop()


def test_update_containers_reports_the_runtimes_failures_and_needs_a_connection(
    nri_sock: Path,
) -> None:
    plugin = external(Recorder(), nri_sock)
    with pytest.raises(NriConnectionError, match="not registered"):
        plugin.update_containers([obj.mems_update("c1", "0")])
    runtime = ScriptedRuntime(nri_sock).start()
    try:
        with running(plugin):
            peer = runtime.accept()
            peer.failed_updates = [obj.mems_update("gone", "0")]
            assert plugin.wait_registered(10)
            failed = plugin.update_containers(
                [obj.mems_update("gone", "0")], [api.ContainerEviction(container_id="x")]
            )
            assert [u.container_id for u in failed] == ["gone"]
            assert peer.update_requests[0].evict[0].container_id == "x"
    finally:
        runtime.stop()


def test_shutdown_is_passed_to_the_handler(nri_sock: Path) -> None:
    handler = Recorder()
    runtime = ScriptedRuntime(nri_sock).start()
    plugin = external(handler, nri_sock)
    try:
        with running(plugin):
            peer = runtime.accept()
            peer.configure()
            peer.shutdown()
            assert plugin.service is not None and plugin.service.shutdown_requested.is_set()
            assert handler.names() == ["configure", "shutdown"]
    finally:
        runtime.stop()


def test_stop_while_waiting_for_an_absent_runtime_returns(nri_sock: Path) -> None:
    """No runtime at all: run() retries with backoff and stop() ends it."""
    plugin = external(Recorder(), nri_sock)
    with capture_logs() as logs, running(plugin):
        wait_until(lambda: plugin.failed_connects >= 3, "three failed connection attempts")
    assert plugin.sessions == 0
    unreachable = [e for e in logs if e["event"].startswith("NRI runtime not reachable")]
    assert len(unreachable) == 1  # an outage is logged once, not per attempt
