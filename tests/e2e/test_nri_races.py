"""``numamem nri``'s runtime events against its own reconciliations, on the real daemon (fake
2-node machine) and the scripted runtime: the reconciler never holds the plugin's lock
across a daemon RPC, so an event that comes while a reconciliation waits for a slow daemon
is noted at once (its release made then or by the next reconciliation) and never fails for
it; a reconciliation's result computed before an event never overwrites the event's; and
what a Synchronize reply carries is sent once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from numamem.nriapi import api_pb2 as api
from numamem.testing.daemon import DaemonProcess
from tests.e2e.nri_node import GI, Node, started_node

pytestmark = pytest.mark.e2e


def while_a_reconciliation_waits(node: Node, *events: Callable[[], object]) -> list[str]:
    """Run ``events`` (runtime calls) while a reconciliation waits for the daemon, which does
    not answer (SIGSTOPped: a reconciliation's RPC may take 5 s); what the runtime got."""
    pid = node.daemon.proc.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    out = []
    try:
        node.handler.state.dirty.set()  # e.g. a release the daemon did not get
        node.handler.reconciler.request()
        deadline = time.monotonic() + 10  # a bound against hanging, not a timing check
        while node.handler.state.daemon.in_flight == 0:
            assert time.monotonic() < deadline, "no reconciliation started"
            time.sleep(0.01)
        for event in events:
            try:
                event()
            except Exception as err:
                out.append(str(err)[:80])
            else:
                out.append("ok")
    finally:
        os.kill(pid, signal.SIGCONT)
    return out


def test_events_while_a_reconciliation_waits_for_a_slow_daemon_are_not_lost(node: Node) -> None:
    """containerd only logs a failed StopContainer/RemoveContainer/RemovePodSandbox and goes
    on (it never retries them): a lost stop makes a finished init container look running
    (never freed), a lost removal keeps memory until the next Synchronize."""
    init_pod = node.run_pod("with-init")
    init, _ = node.create(init_pod, "init", 6 * GI)
    gone = node.run_pod("gone")
    app, _ = node.create(gone, "app", 2 * GI)
    assert node.held() == {init_pod.uid: {"init"}, gone.uid: {"app"}}
    seen = while_a_reconciliation_waits(
        node,
        lambda: node.stop(init),
        lambda: node.stop(app),
        lambda: node.remove(app),
        lambda: node.peer.remove_pod_sandbox(gone),
    )
    del node.pods[gone.id]
    assert seen == ["ok"] * 4
    passes = node.handler.reconciler.passes
    node.handler.reconciler.request()
    node.wait_reconciled(passes + 1)
    _, reply = node.create(init_pod, "app", 6 * GI)  # reuses the init container's 6 GiB
    assert reply.adjust.linux.resources.cpu.mems == "0"
    assert node.held() == {init_pod.uid: {"app"}}


def test_an_unpinned_creation_while_the_daemon_is_slow_is_recorded_counted_and_adopted(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """docs/nri-plugin.md: "with ``unpinned`` the container starts and is adopted once the daemon
    answers", also when a reconciliation is waiting for the daemon at that moment."""
    with started_node(short_root, daemon_factory, on_reject="unpinned") as node:
        late = node.run_pod("late")
        replies: list[api.CreateContainerResponse] = []
        seen = while_a_reconciliation_waits(
            node, lambda: replies.append(node.create(late, "app", 2 * GI)[1])
        )
        assert seen == ["ok"]
        assert not replies[0].adjust.HasField("linux")  # it started unpinned
        assert node.handler.counts["unpinned"] == 1
        passes = node.handler.reconciler.passes
        node.handler.reconciler.request()
        node.wait_reconciled(passes + 1)
        assert node.held() == {late.uid: {"app"}}
        assert node.handler.counts["adopted"] == 1
        assert [c.linux.resources.cpu.mems for c in node.containers.values()] == ["0"]


def test_an_unreachable_daemon_fails_a_creation_naming_the_pod_and_container(node: Node) -> None:
    sandbox = node.run_pod("named", "uid-named")
    node.daemon.stop(signal.SIGKILL)
    with pytest.raises(Exception) as caught:
        node.create(sandbox, "app", GI)
    text = str(caught.value)
    assert "numamem could not admit container 'app' of pod default/named (uid uid-named)" in text
    assert "retries" not in text


def test_a_reconciliation_does_not_send_stale_mems_over_a_resize(node: Node) -> None:
    """The updates a reconciliation computed are checked against the current decision just
    before they are sent: a resize handled in between (here one that moves the container's
    group to both nodes) is not overwritten with the old ``cpuset.mems``."""
    r = node.run_pod("resized")
    a, _ = node.create(r, "a", 4 * GI)
    b, _ = node.create(r, "b", 4 * GI)
    node.containers[a.id].linux.resources.cpu.mems = ""  # the runtime created it unpinned
    node.containers[b.id].linux.resources.cpu.mems = ""
    reconciler = node.handler.reconciler
    original = reconciler._send
    sent: list[list[str]] = []

    def send_after_a_resize(updates: list[api.ContainerUpdate]) -> None:
        sent.append([u.linux.resources.cpu.mems for u in updates])
        done = threading.Event()
        threading.Thread(target=lambda: (node.update(a, 10 * GI), done.set())).start()
        assert done.wait(10)
        original(updates)

    node.handler.state.view.set_mems(a.id, "")  # what the runtime reports after a restart
    node.handler.state.view.set_mems(b.id, "")
    reconciler._send = send_after_a_resize  # type: ignore[method-assign]
    passes = reconciler.passes
    reconciler.request()
    node.wait_reconciled(passes + 1)
    assert sent == [["0", "0"]]  # computed before the resize
    nodes = list(node.client.get_memory_numa_nodes(r.uid, "a"))
    assert nodes == [0, 1]
    assert (node.mems(a), node.mems(b)) == ("0,1", "0,1")
    assert node.peer.update_requests == []  # the stale ones were not sent


def test_a_synchronize_update_is_sent_once(node: Node) -> None:
    """The ``cpuset.mems`` updates a Synchronize reply carries are noted in the plugin's
    view: the reconciliation that follows does not send them again."""
    p = node.run_pod("resynced")
    a, _ = node.create(p, "app", GI)
    node.containers[a.id].linux.resources.cpu.mems = ""  # created while the plugin was away
    node.stop_plugin()
    node.start_plugin(synchronize=False)
    passes = node.handler.reconciler.passes
    in_reply = node.synchronize()
    node.handler.reconciler.wait_passes(passes + 1, 30)
    assert [u.container_id for u in in_reply] == [a.id]
    assert [u for r in node.peer.update_requests for u in r.update] == []


def test_a_declaration_from_before_an_admission_does_not_release_it(node: Node) -> None:
    """A creation admitted between a reconciliation's snapshot of the runtime's pods and its
    SyncActivePods must not be released by it: the reconciliation takes its snapshot again."""
    daemon = node.handler.state.daemon
    original = daemon.get_state
    created: list[api.Container] = []
    late = node.run_pod("late")

    def get_state_then_a_creation(budget: object) -> object:
        state = original(budget)  # type: ignore[arg-type]
        if not created:
            worker = threading.Thread(
                target=lambda: created.append(node.create(late, "app", GI)[0])
            )
            worker.start()
            worker.join(10)
        return state

    daemon.get_state = get_state_then_a_creation  # type: ignore[method-assign]
    passes = node.handler.reconciler.passes
    node.handler.reconciler.request()
    node.wait_reconciled(passes + 1)
    daemon.get_state = original  # type: ignore[method-assign]
    assert created and node.held() == {late.uid: {"app"}}


def test_a_creation_that_cannot_have_the_plugins_state_in_time_is_not_lost(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """Should the plugin's state be held past a creation's budget (a daemon RPC of another
    runtime call that does not answer), ``unpinned`` starts the container and queues its
    record (applied by the next holder of the lock, adopted by the reconciliation), counted;
    ``fail`` fails it naming the pod and the container."""
    from numamem.errors import NriStatusError
    from numamem.nri.handler import CallContext
    from numamem.testing import nri_objects as obj

    with started_node(short_root, daemon_factory, on_reject="unpinned") as node:
        late = node.run_pod("late")
        container = obj.container(late, "app", memory_limit=GI, cpu_milli=1000)
        container.state = api.CONTAINER_RUNNING
        node.containers[container.id] = container
        request = api.CreateContainerRequest(pod=late, container=container)
        handler = node.handler
        with handler.state.lock:
            reply = handler.create_container(
                request, CallContext("CreateContainer", time.monotonic() + 0.5, 0.5)
            )
            assert not reply.adjust.HasField("linux")
            handler.state.options = type(handler.state.options)(
                socket=handler.state.options.socket, on_reject="fail"
            )
            with pytest.raises(NriStatusError) as caught:
                handler.create_container(
                    request, CallContext("CreateContainer", time.monotonic() + 0.5, 0.5)
                )
            assert f"container 'app' of pod default/late (uid {late.uid})" in caught.value.message
        passes = handler.reconciler.passes
        handler.reconciler.request()
        node.wait_reconciled(passes + 1)
        assert node.held() == {late.uid: {"app"}}
        assert handler.counts["unpinned"] == 1 and handler.counts["failed"] == 1
        assert handler.counts["adopted"] == 1
        assert node.mems(container) == "0"
