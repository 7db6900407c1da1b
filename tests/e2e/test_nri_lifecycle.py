"""``numamem nri`` on the real daemon (fake 2-node machine), scripted runtime: rejections,
resizes, releases and what the runtime sends that the plugin cannot use.

The fake machine's nodes have 16 GiB of which 5 GiB are hugepages (512 2Mi, 4 1Gi): 11 GiB
of regular memory, 10 GiB on node 0 after its 1 GiB reservation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.errors import NriStatusError
from numamem.nri.service import PLUGIN_SERVICE
from numamem.nriapi import api_pb2 as api
from numamem.testing.daemon import DaemonProcess
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS
from tests.e2e.nri_node import GI, Node, started_node

pytestmark = pytest.mark.e2e


@pytest.fixture
def flavor() -> str:
    """containerd 2.x's event delivery; the release tests run with 1.7's too (lifecycle
    events through StateChange only), the one place the two differ for the plugin."""
    return "2.x"


@pytest.fixture
def node(short_root: Path, daemon_factory: list[DaemonProcess], flavor: str) -> Iterator[Node]:
    """The conftest's node, with the scripted runtime of ``flavor``."""
    with started_node(short_root, daemon_factory, flavor=flavor) as n:
        yield n


BOTH_FLAVORS = pytest.mark.parametrize("flavor", ["2.x", "1.7"])


# --- rejections ------------------------------------------------------------------------------


def test_single_numa_node_rejection_fails_creation_with_the_reason(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    with started_node(
        short_root, daemon_factory, [*STATIC_ARGS, "--topology-manager-policy", "single-numa-node"]
    ) as node:
        sandbox = node.run_pod("web-1", "uid-web-1")
        with pytest.raises(NriStatusError) as caught:
            node.create(sandbox, "wide", 14 * GI)  # needs both nodes
        node.create(sandbox, "small", 2 * GI)
        text = caught.value.message
        for part in (
            "'wide'",  # the container
            "default/web-1 (uid uid-web-1)",  # the pod
            "memory 14Gi",  # the resource
            "TopologyAffinityError",
            "single-numa-node",
            "numamem explain",
        ):
            assert part in text, (part, text)
        assert node.held() == {"uid-web-1": {"small"}}  # nothing of the rejected one
        assert node.handler.counts["failed"] == 1

        # --on-reject=unpinned: the creation goes on without cpuset.mems, counted.
        node.stop_plugin()
        node.on_reject = "unpinned"
        node.start_plugin()
        _, reply = node.create(sandbox, "wide", 14 * GI)
        assert not reply.adjust.HasField("linux")
        assert node.handler.counts["unpinned"] == 1
        assert node.held() == {"uid-web-1": {"small"}}
        _, reply = node.create(sandbox, "after", GI)  # the unpinned one is not in later pods
        assert reply.adjust.linux.resources.cpu.mems in ("0", "1")


def test_the_pod_scope_is_refused_per_pod_with_the_reason(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    with started_node(
        short_root, daemon_factory, [*STATIC_ARGS, "--topology-manager-scope", "pod"]
    ) as node:
        sandbox = node.run_pod("scoped")
        with pytest.raises(NriStatusError, match="--topology-manager-scope container"):
            node.create(sandbox, "app", GI)
        assert node.held() == {}


def test_an_unreachable_daemon_fails_creation_clearly_and_in_time(node: Node) -> None:
    node.daemon.stop()
    sandbox = node.run_pod("nodaemon")
    with pytest.raises(NriStatusError) as caught:
        node.create(sandbox, "app", GI)  # answered: the runtime did not drop the plugin
    assert "numamem could not admit container 'app' of pod default/nodaemon" in caught.value.message
    assert "did not answer" in caught.value.message
    assert "is it running?" in caught.value.message
    assert not node.peer.closed


# --- resize ----------------------------------------------------------------------------------


def test_update_container_resizes_through_numamem(node: Node) -> None:
    sandbox = node.run_pod("resized", "uid-r")
    a, reply = node.create(sandbox, "a", 4 * GI)
    b, _ = node.create(sandbox, "b", 4 * GI)
    assert (node.mems(a), node.mems(b)) == ("0", "0")

    reply = node.update(a, 5 * GI)  # grows in its node
    assert [(u.container_id, u.linux.resources.cpu.mems) for u in reply.update] == [(a.id, "0")]
    reply = node.update(a, 10 * GI)  # 14 GiB no longer fit node 0: the group grows to both
    assert [(u.container_id, u.linux.resources.cpu.mems) for u in reply.update] == [
        (a.id, "0,1"),
        (b.id, "0,1"),  # moved with its group
    ]
    assert (node.mems(a), node.mems(b)) == ("0,1", "0,1")
    blocks = node.client.get_memory("uid-r", "a")
    assert [(list(x.numa_affinity), x.type, x.size) for x in blocks] == [
        ([0, 1], "memory", 10 * GI)
    ]

    with pytest.raises(NriStatusError) as caught:
        node.update(a, 100 * GI)  # no machine holds it
    assert "numamem refused the resize of container 'a'" in caught.value.message
    assert "Infeasible" in caught.value.message
    assert [x.size for x in node.client.get_memory("uid-r", "a")] == [10 * GI]  # unchanged
    reply = node.update(a, 10 * GI, cpu_milli=2000)  # a CPU change: memory as it was
    assert [(u.container_id, u.linux.resources.cpu.mems) for u in reply.update] == [(a.id, "0,1")]


def test_a_partial_update_changes_no_limit_and_keeps_the_pinning(node: Node) -> None:
    """The kubelet's CPU manager (static policy) sends UpdateContainerResources with only
    ``cpuset_cpus`` (after every kubelet restart, and to shared-pool containers whenever the
    pool changes): unset and zero memory and hugepage fields mean unchanged. No resize, the
    update goes through with the container's ``cpuset.mems``, and ``cpus`` stays the
    kubelet's."""
    sandbox = node.run_pod("cpu-managed", "uid-cm")
    a, _ = node.create(sandbox, "a", 4 * GI, hugepages={"2MB": 64 << 20, "1GB": 0})
    partial = api.LinuxResources()
    partial.cpu.cpus = "2-3"
    reply = node.peer.update_container(sandbox, a, partial)
    assert reply is not None
    assert [(u.container_id, u.linux.resources.cpu.mems) for u in reply.update] == [(a.id, "0")]
    assert all(u.linux.resources.cpu.cpus == "" for u in reply.update)  # never touched
    blocks = node.client.get_memory("uid-cm", "a")
    assert sorted((x.type, x.size) for x in blocks) == [
        ("hugepages-2Mi", 64 << 20),
        ("memory", 4 * GI),
    ]
    assert node.handler.counts.get("resized", 0) == 0
    zeros = api.LinuxResources()  # every field present but 0, hugepage sizes at 0
    zeros.memory.limit.value = 0
    zeros.hugepage_limits.add(page_size="2MB", limit=0)
    reply = node.peer.update_container(sandbox, a, zeros)
    assert reply is not None and node.handler.counts.get("resized", 0) == 0
    assert [u.linux.resources.cpu.mems for u in reply.update] == ["0"]
    reply = node.update(a, 5 * GI)  # and a real resize still is one
    assert node.handler.counts.get("resized", 0) == 1
    assert [x.size for x in node.client.get_memory("uid-cm", "a") if x.type == "memory"] == [5 * GI]


# --- releases --------------------------------------------------------------------------------


@BOTH_FLAVORS
def test_removal_releases_and_an_older_instance_does_not(node: Node) -> None:
    sandbox = node.run_pod("restarting", "uid-x")
    first, _ = node.create(sandbox, "app", 2 * GI)
    node.stop(first)  # it crashed: the kubelet creates it again, same name
    second, reply = node.create(sandbox, "app", 2 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"  # the same blocks
    node.remove(first)  # the kubelet's garbage collection of the dead instance
    assert node.held() == {"uid-x": {"app"}}
    node.remove(second)
    assert node.held() == {}

    kept = node.run_pod("kept", "uid-k")
    node.create(kept, "app", GI)
    node.remove_pod(kept)
    assert node.held() == {}


@BOTH_FLAVORS
def test_a_replaced_sandbox_does_not_release_its_pod(node: Node) -> None:
    old = node.run_pod("resandboxed", "uid-s")
    init, _ = node.create(old, "init", GI)
    node.stop(init)
    app, _ = node.create(old, "app", 2 * GI)
    node.stop(app)  # the sandbox died; the kubelet makes a new one and re-creates the pod
    new = node.run_pod("resandboxed", "uid-s")
    again, reply = node.create(new, "init", GI)
    assert not reply.adjust.HasField("linux")  # freed as a finished init: unpinned, as kubelet
    node.stop(again)
    _, reply = node.create(new, "app", 2 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    node.remove_pod(old)  # garbage collection of the old sandbox
    assert node.held() == {"uid-s": {"app"}}
    node.remove_pod(new)
    assert node.held() == {}


# --- what the plugin cannot use --------------------------------------------------------------


def test_unusable_input_is_left_alone_logged_once_and_the_plugin_serves_on(node: Node) -> None:
    with capture_logs() as logs:
        no_limits = node.run_pod("nolimits", "uid-n")
        for name in ("a", "b"):
            _, reply = node.create(no_limits, name, None)  # Guaranteed cgroup, no memory limit
            assert not reply.adjust.HasField("linux")
        odd = node.run_pod("odd", "uid-o", cgroup_parent="/system.slice/odd.scope")
        _, reply = node.create(odd, "app", GI)
        assert not reply.adjust.HasField("linux")
        with pytest.raises(NriStatusError):  # an undecodable request: answered, not fatal
            node.peer.call_raw(PLUGIN_SERVICE, "CreateContainer", b"\x0a\xff")
        node.peer.send_frame(7, b"garbage for a connection that does not exist")
    problems = [e.get("problem") for e in logs if "problem" in e]
    assert problems.count("no_limits") == 1  # twice sent, once logged
    assert problems.count("unknown_cgroup_layout") == 1
    assert node.handler.counts["left_alone"] == 3
    assert node.held() == {}
    systemd = node.run_pod(
        "sysd", "1b2c-3d", cgroup_parent="/kubepods.slice/kubepods-pod1b2c_3d.slice"
    )
    _, reply = node.create(systemd, "app", GI)  # and still pins what it can
    assert reply.adjust.linux.resources.cpu.mems == "0"
    assert node.held() == {"1b2c-3d": {"app"}}


def test_a_container_released_behind_the_plugins_back_is_adopted_again_and_resized(
    node: Node,
) -> None:
    """The plugin is the node's agent for what the runtime runs (docs/nri-plugin.md: it owns the
    daemon's pods): a running container another client released is adopted again at the
    next reconciliation, and its resize is numamem's, as any pinned container's. (The test
    was named as if such a resize were left to another agent; it never was, and leaving a
    running Guaranteed container unpinned and unresized would not be the kubelet's.)"""
    sandbox = node.run_pod("other", "uid-o2")
    c, _ = node.create(sandbox, "app", GI)
    node.client.release_pod("uid-o2")  # another agent took it away
    node.stop_plugin()
    node.start_plugin()  # the plugin learns it (and adopts the running container again)
    assert node.held() == {"uid-o2": {"app"}}
    reply = node.update(c, 2 * GI)
    assert [u.linux.resources.cpu.mems for u in reply.update] == ["0"]
    assert [x.size for x in node.client.get_memory("uid-o2", "app")] == [2 * GI]
    assert isinstance(node.client.get_state(), mm.GetStateResponse)
