"""``numamem nri`` reconciling with the runtime both ways, on the real daemon (fake 2-node
machine) and the scripted runtime: after the plugin restarts, after the daemon is SIGKILLed
and restarted, after the runtime restarts. Nothing is lost (every running container of a
Guaranteed pod ends pinned, with its cpuset.mems) and nothing is held twice (the daemon's
state is consistent and holds only what the runtime runs).
"""

from __future__ import annotations

import signal

import pytest

from numamem.api.convert import state_from_proto
from numamem.errors import NriStatusError
from numamem.memorymanager.state.invariants import violations
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from tests.e2e.nri_node import GI, Node

pytestmark = pytest.mark.e2e


def assert_consistent(node: Node) -> None:
    """Nothing held twice: the blocks account for the reserved memory exactly, and every
    running container of a pinned pod has cpuset.mems equal to its blocks' nodes."""
    state = node.client.get_state()
    machine, entries = state_from_proto(state)
    assert violations(machine, entries) == []
    for c in node.containers.values():
        blocks = entries.get(c.labels["io.kubernetes.pod.uid"], {}).get(c.name)
        if blocks and c.state != api.CONTAINER_STOPPED:
            nodes = sorted({n for b in blocks for n in b.numa_affinity or ()})
            assert node.mems(c) == ",".join(map(str, nodes)), c.name


def created_behind_the_plugins_back(
    node: Node, sandbox: api.PodSandbox, name: str, memory: int
) -> api.Container:
    """A running container the plugin never saw (created before it ran)."""
    container = obj.container(
        sandbox, name, container_id=f"c-{name}-{sandbox.uid}", memory_limit=memory, cpu_milli=500
    )
    container.state = api.CONTAINER_RUNNING
    node.containers[container.id] = container
    return container


def test_a_restarted_plugin_reconciles_both_ways(node: Node) -> None:
    kept, gone, lost = (
        node.run_pod("kept", "uid-kept"),
        node.run_pod("gone", "uid-gone"),
        node.run_pod("lost", "uid-lost"),
    )
    node.create(kept, "app", 2 * GI)
    node.create(gone, "app", 2 * GI)
    lost_app, _ = node.create(lost, "app", 2 * GI)
    node.stop_plugin()

    # While the plugin is away: a pod goes, two arrive unpinned, one loses its cpuset.mems.
    for c in [c for c in node.containers.values() if c.pod_sandbox_id == gone.id]:
        del node.containers[c.id]
    del node.pods[gone.id]
    early = node.run_pod("early", "uid-early")
    adopted = created_behind_the_plugins_back(node, early, "app", 3 * GI)
    too_big = node.run_pod("toobig", "uid-toobig")
    created_behind_the_plugins_back(node, too_big, "app", 40 * GI)
    node.containers[lost_app.id].linux.resources.cpu.mems = ""

    run = node.start_plugin(synchronize=False)
    passes = run.handler.reconciler.passes
    updates = node.synchronize(per_message=1)  # in chunks, as a runtime with many pods sends
    assert [(u.container_id, u.linux.resources.cpu.mems) for u in updates] == [(lost_app.id, "0")]
    node.wait_reconciled(passes + 1)
    assert node.held() == {"uid-kept": {"app"}, "uid-lost": {"app"}, "uid-early": {"app"}}
    assert node.mems(adopted) == "0"
    assert run.handler.counts["adopted"] == 1
    assert run.handler.counts["not_adopted"] == 1  # reported; it runs unpinned
    assert_consistent(node)
    # The adopted container's runtime id was recorded: its removal releases it.
    node.remove(adopted)
    assert "uid-early" not in node.held()


def test_a_sigkilled_daemon_loses_nothing_and_holds_nothing_twice(node: Node) -> None:
    a, b = node.run_pod("a", "uid-a"), node.run_pod("b", "uid-b")
    node.create(a, "app", 2 * GI)
    node.create(b, "app", 2 * GI)
    node.daemon.stop(signal.SIGKILL)

    node.remove_pod(b)  # its releases do not reach the daemon
    c = node.run_pod("c", "uid-c")
    with pytest.raises(NriStatusError, match="did not answer"):
        node.create(c, "app", GI)  # fails by default: the kubelet retries
    passes = node.handler.reconciler.passes
    node.daemon.start()
    node.wait_reconciled(passes + 1)  # the plugin reconciles once the daemon answers
    assert node.held() == {"uid-a": {"app"}}
    assert_consistent(node)

    # Again, with --on-reject=unpinned: a container created meanwhile starts unpinned and is
    # adopted once the daemon is back.
    node.daemon.stop(signal.SIGKILL)
    node.stop_plugin()
    node.on_reject = "unpinned"
    node.start_plugin(synchronize=False)
    node.synchronize()
    d = node.run_pod("d", "uid-d")
    _, reply = node.create(d, "app", GI)
    assert not reply.adjust.HasField("linux")
    passes = node.handler.reconciler.passes
    node.daemon.start()
    node.wait_reconciled(passes + 1)
    assert node.held() == {"uid-a": {"app"}, "uid-d": {"app"}}
    assert_consistent(node)
    _, reply = node.create(c, "app", GI)  # the kubelet's retry
    assert reply.adjust.linux.resources.cpu.mems == "0"
    assert node.held() == {"uid-a": {"app"}, "uid-c": {"app"}, "uid-d": {"app"}}
    assert_consistent(node)


def test_a_restarted_runtime_reconnects_the_plugin_and_resynchronizes(node: Node) -> None:
    a = node.run_pod("a", "uid-a")
    app, _ = node.create(a, "app", 2 * GI)
    run = node.running
    assert run is not None
    node.runtime.restart()
    run.peer = node.runtime.accept()  # the plugin reconnected and registered again
    assert run.plugin.wait_registered(30, sessions=2)
    run.peer.configure()
    passes = run.handler.reconciler.passes
    assert node.synchronize() == []  # its cpuset.mems is still numamem's
    node.wait_reconciled(passes + 1)
    assert node.held() == {"uid-a": {"app"}}
    b = node.run_pod("b", "uid-b")
    _, reply = node.create(b, "app", 2 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    node.remove(app)
    assert node.held() == {"uid-b": {"app"}}
    assert_consistent(node)


# --- exited containers: containerd's Synchronize lists none -----------------------------------


def test_a_crash_looping_container_keeps_its_memory_across_a_plugin_restart(node: Node) -> None:
    """An app container in CrashLoopBackOff is exited for up to 5 minutes between restarts,
    and containerd's Synchronize lists no exited container: the plugin keeps every name
    numamem holds of a pod whose sandbox the runtime lists (the kubelet keeps a container's
    memory until its pod is gone), so another pod does not take it and the restart lands
    where its pages are."""
    p = node.run_pod("crashy")
    a, reply = node.create(p, "app", 8 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    node.stop(a)  # it crashed; the kubelet restarts it after a back-off
    node.stop_plugin()
    node.start_plugin()  # Synchronize: the exited container is not listed
    assert node.held() == {p.uid: {"app"}}
    q = node.run_pod("other")
    _, other = node.create(q, "app", 8 * GI)
    assert other.adjust.linux.resources.cpu.mems == "1"  # node 0 is still the crashed one's
    _, restarted = node.create(p, "app", 8 * GI)
    assert restarted.adjust.linux.resources.cpu.mems == "0"
    assert node.held() == {p.uid: {"app"}, q.uid: {"app"}}
    node.remove(a)  # the exited instance, once the new one exists: an older instance
    assert node.held() == {p.uid: {"app"}, q.uid: {"app"}}
    node.remove_pod(p)
    assert node.held() == {q.uid: {"app"}}
    assert_consistent(node)


def test_an_exited_container_a_restarted_plugin_never_saw_is_released_with_its_pod(
    node: Node,
) -> None:
    """A kept exited container's instance id is unknown after a plugin restart (the daemon's
    state names containers, not ids): its removal is found by name, and the release the
    daemon cannot make by id is made by the reconciliation (the name is no longer declared)."""
    p = node.run_pod("exited")
    a, _ = node.create(p, "a", 2 * GI)
    node.create(p, "b", 2 * GI)
    node.stop(a)
    node.stop_plugin()
    node.start_plugin()
    assert node.held() == {p.uid: {"a", "b"}}
    node.remove(a)  # the kubelet removes it (e.g. containerd 2.x after a runtime restart)
    assert node.held() == {p.uid: {"b"}}
    node.remove_pod(p)
    assert node.held() == {}


def test_a_finished_init_container_kept_at_a_synchronize_is_reused_by_the_next(
    node: Node,
) -> None:
    """A regular init container that finished before its pod's next container is created
    (the kubelet pulls that one's image meanwhile) is not lost at a Synchronize: the next
    container reuses its memory and frees it, as under the kubelet."""
    p = node.run_pod("with-init")
    init, _ = node.create(p, "init", 6 * GI)
    node.stop(init)
    node.stop_plugin()
    node.start_plugin()
    assert node.held() == {p.uid: {"init"}}
    _, reply = node.create(p, "app", 6 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    assert node.held() == {p.uid: {"app"}}
    blocks = node.client.get_memory(p.uid, "app")
    assert [(list(b.numa_affinity), b.size) for b in blocks] == [([0], 6 * GI)]
    big = node.run_pod("big")
    _, other = node.create(big, "app", 8 * GI)  # 10 GiB on node 0, 4 left: not twice 6
    assert other.adjust.linux.resources.cpu.mems == "1"
    assert_consistent(node)
