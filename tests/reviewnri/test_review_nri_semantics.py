"""REVIEW (reviewnri): ``numamem nri`` against the real daemon on the standard fake 2-node
machine (10 and 11 GiB of regular memory), driven by the scripted runtime. Each test asserts
what the kubelet's memory manager (container scope, Static) would do and FAILS on main as of
673a7f0; the docstring says why the plugin could do it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from numamem.nriapi import api_pb2 as api
from numamem.testing.daemon import DaemonProcess
from tests.daemon import STATIC_ARGS
from tests.e2e.nri_node import GI, Node

pytestmark = pytest.mark.e2e


@pytest.fixture
def node(short_root: Path, daemon_factory: list[DaemonProcess]) -> Iterator[Node]:
    d = DaemonProcess(short_root, list(STATIC_ARGS))
    daemon_factory.append(d)
    d.start()
    n = Node(short_root, d)
    n.start_plugin()
    yield n
    n.close()


def held(node: Node) -> dict[str, set[str]]:
    return {u: set(e.containers) for u, e in node.client.get_state().entries.items()}


def test_crashlooping_container_keeps_its_memory_across_a_plugin_restart(node: Node) -> None:
    """An app container in CrashLoopBackOff is exited for up to 5 minutes between restarts.
    containerd's Synchronize lists no exited container, so a plugin (or runtime) restart in
    that window declares the pod to SyncActivePods without it (or not at all) and the daemon
    releases its memory; another pod takes it, and the restart lands elsewhere or fails.
    The kubelet keeps a container's memory until its pod is gone (removeStaleState)."""
    p = node.run_pod("crashy")
    a, reply = node.create(p, "app", 8 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    node.stop(a)  # it crashed; the kubelet restarts it after a back-off
    node.stop_plugin()
    node.start_plugin()  # Synchronize: the exited container is not listed
    after_restart = held(node)
    q = node.run_pod("other")
    _, other = node.create(q, "app", 8 * GI)
    # the restart (the kubelet keeps the exited instance until the new one exists)
    _, restarted = node.create(p, "app", 8 * GI)
    print(
        f"held after plugin restart: {after_restart}; other pod -> "
        f"{other.adjust.linux.resources.cpu.mems!r}; restart -> "
        f"{restarted.adjust.linux.resources.cpu.mems!r}"
    )
    assert after_restart.get(p.uid) == {"app"}, "the crash-looping container lost its memory"
    assert restarted.adjust.linux.resources.cpu.mems == "0"  # where its pages are


def test_app_container_that_exits_before_the_next_is_created_stays_pinned(node: Node) -> None:
    """Two app containers; ``a`` crashes while the kubelet is still pulling ``b``'s image
    (startContainer pulls before CreateContainer, so the gap is the pull's length). The plugin
    takes ``a`` for a finished init container: ``b`` is admitted reusing ``a``'s memory, ``a`` is
    freed, and ``a``'s restart runs unpinned. The kubelet pins both for the pod's life.
    The plugin could know better: a regular init container that finished is never re-created
    in the same sandbox, so a freed name re-created there (restartCount annotation > 0) was
    never an init container and must be admitted again, as the kubelet kept it."""
    p = node.run_pod("two-apps")
    a, first = node.create(p, "a", 4 * GI)
    node.stop(a)  # crashed before b was created
    _, second = node.create(p, "b", 4 * GI)
    after_b = held(node)
    _, again = node.create(p, "a", 4 * GI)
    print(
        f"a -> {first.adjust.linux.resources.cpu.mems!r}, b -> "
        f"{second.adjust.linux.resources.cpu.mems!r}, held after b: {after_b}, "
        f"a restarted -> {again.adjust.linux.resources.cpu.mems!r}, held: {held(node)}"
    )
    assert after_b.get(p.uid) == {"a", "b"}, "an app container was freed as an init container"
    assert again.adjust.linux.resources.cpu.mems == first.adjust.linux.resources.cpu.mems


def _while_a_reconciliation_holds_the_lock(node: Node, *events: object) -> list[str]:
    """Run ``events`` (runtime calls) while the reconciler holds the plugin's lock waiting for
    a daemon that does not answer (SIGSTOPped: a reconciliation's RPC may take 5 s); the
    errors the runtime got (containerd only logs a failed StopContainer/RemoveContainer/
    RemovePodSandbox and goes on: it never retries them)."""
    reconciler = node.handler.reconciler
    deferrals = reconciler._deferrals
    while reconciler._deferrals == deferrals or not node.handler.state.lock.locked():
        pass  # a new full() pass has just taken the lock
    out = []
    for event in events:
        try:
            event()  # type: ignore[operator]
        except Exception as err:
            out.append(str(err)[:40])
        else:
            out.append("ok")
    return out


def test_events_during_a_reconciliation_with_a_slow_daemon_are_not_lost(node: Node) -> None:
    """The reconciler holds the plugin's lock across daemon RPCs of up to 5 s
    (``MAX_RPC_SECONDS``); a runtime call waits for it only ~1.5 s and then fails with
    "numamem nri is busy" WITHOUT recording anything: a StopContainer lost makes a finished
    init container look running (never freed, its memory not reused: the pod holds init + app,
    the kubelet holds app only); a RemoveContainer/RemovePodSandbox lost leaves the view with
    the container, so every later reconciliation re-declares it and the daemon keeps its
    memory until the next Synchronize (a plugin or runtime restart)."""
    init_pod = node.run_pod("with-init")
    init, _ = node.create(init_pod, "init", 6 * GI)
    gone = node.run_pod("gone")
    app, _ = node.create(gone, "app", 2 * GI)
    assert held(node) == {init_pod.uid: {"init"}, gone.uid: {"app"}}

    pid = node.daemon.proc.pid  # type: ignore[union-attr]
    import os
    import signal

    os.kill(pid, signal.SIGSTOP)
    try:
        node.handler.state.dirty.set()  # e.g. a release the daemon did not get
        node.handler.reconciler.request()

        init.state = api.CONTAINER_STOPPED  # the runtime's truth, whatever the plugin says
        sandbox = node.pods[init.pod_sandbox_id]
        del node.containers[app.id]
        del node.pods[gone.id]
        errors = [
            *_while_a_reconciliation_holds_the_lock(
                node, lambda: node.peer.stop_container(sandbox, init)
            ),
            *_while_a_reconciliation_holds_the_lock(
                node,
                lambda: node.peer.stop_container(gone, app),
                lambda: node.peer.remove_container(gone, app),
            ),
            *_while_a_reconciliation_holds_the_lock(
                node, lambda: node.peer.remove_pod_sandbox(gone)
            ),
        ]
    finally:
        os.kill(pid, signal.SIGCONT)
    passes = node.handler.reconciler.passes
    node.wait_reconciled(passes + 1)
    _, reply = node.create(init_pod, "app", 6 * GI)  # reuses the init container's 6 GiB
    state = held(node)
    print(f"runtime saw: {errors}; app -> {reply.adjust.linux.resources.cpu.mems!r}; held {state}")
    assert state == {init_pod.uid: {"app"}}, "events lost while the reconciler held the lock"


def test_reconciliation_does_not_send_stale_mems_over_a_resize(node: Node) -> None:
    """:meth:`Reconciler.full` computes the ``cpuset.mems`` updates under the lock (``quick``),
    then releases it pod by pod for the adoptions and sends the updates afterwards, outside
    the lock. A runtime event handled in between (here an UpdateContainer that moves the
    container's group to both nodes) is overwritten by the stale update: the container ends
    with the old ``cpuset.mems`` while numamem holds its memory on both nodes.
    The interleaving is forced at ``_send`` (outside the lock, as in production)."""
    import threading

    r = node.run_pod("resized")
    a, _ = node.create(r, "a", 4 * GI)
    b, _ = node.create(r, "b", 4 * GI)
    # The plugin died before it answered a's creation: the runtime created it unpinned.
    node.containers[a.id].linux.resources.cpu.mems = ""
    node.stop_plugin()
    node.start_plugin(synchronize=False)
    reconciler = node.handler.reconciler
    original = reconciler._send
    resized = threading.Event()

    def send_after_the_resize(updates: list[api.ContainerUpdate]) -> None:
        threading.Thread(target=lambda: (node.update(a, 10 * GI), resized.set())).start()
        assert resized.wait(10)
        original(updates)

    reconciler._send = send_after_the_resize  # type: ignore[method-assign]
    passes = reconciler.passes
    node.synchronize()
    node.wait_reconciled(passes + 1)
    nodes = list(node.client.get_memory_numa_nodes(r.uid, "a"))
    print(
        f"numamem holds a on {nodes}; the runtime's cpuset.mems of a: {node.mems(a)!r}, b: {node.mems(b)!r}"
    )
    assert node.mems(a) == ",".join(map(str, nodes)), "a stale reconciliation update won"


def test_unpinned_creation_while_the_lock_is_busy_is_adopted_later(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """README: "with ``unpinned`` the container starts and is adopted once the daemon
    answers". A creation that finds the plugin's lock held by a reconciliation waiting for a
    slow daemon starts unpinned WITHOUT being put in the plugin's view or records, so no
    reconciliation ever adopts it (only the next Synchronize, i.e. a plugin or runtime
    restart, would)."""
    import os
    import signal

    d = DaemonProcess(short_root, list(STATIC_ARGS))
    daemon_factory.append(d)
    d.start()
    node = Node(short_root, d, on_reject="unpinned")
    try:
        node.start_plugin()
        os.kill(d.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            node.handler.state.dirty.set()
            node.handler.reconciler.request()
            late = node.run_pod("late")
            replies = []
            _while_a_reconciliation_holds_the_lock(
                node, lambda: replies.append(node.create(late, "app", 2 * GI)[1])
            )
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        assert not replies[0].adjust.HasField("linux")  # it started unpinned
        passes = node.handler.reconciler.passes
        node.handler.reconciler.request()  # even asked for explicitly
        node.wait_reconciled(passes + 2)
        print(f"held after two reconciliations: {held(node)}; counts {node.handler.counts}")
        assert held(node) == {late.uid: {"app"}}, "the unpinned container was never adopted"
    finally:
        node.close()


def test_memory_follows_the_cpu_managers_exclusive_cpus(node: Node) -> None:
    """With the kubelet's CPU manager (static) and topology manager, the CreateContainer
    request already carries the container's exclusive ``cpuset.cpus``. Here they are CPUs 2-3,
    node 1 of the fake machine (node 0: CPUs 0-1). The kubelet with both managers Static aligns
    memory with them (node 1); numamem merges only its own hints although its ``Admit`` takes
    other providers' hints (``AdmitRequest.other_providers``), so it pins memory to node 0:
    every access of the pod is remote. README calls this a deviation ("only numamem's hints are
    merged"); the information to avoid it is in the request."""
    import uuid

    from numamem.testing import nri_objects as obj

    sandbox = node.run_pod("exclusive")
    container = obj.container(
        sandbox,
        "app",
        container_id=f"c-{uuid.uuid4().hex[:16]}",
        memory_limit=2 * GI,
        cpu_milli=2000,
        cpus="2-3",  # the CPU manager's exclusive CPUs: NUMA node 1
    )
    reply = node.peer.create_container(sandbox, container)
    assert reply is not None
    mems = reply.adjust.linux.resources.cpu.mems
    print(f"cpuset.cpus 2-3 (node 1) -> numamem's cpuset.mems {mems!r}")
    assert mems == "1", "memory pinned away from the container's exclusive CPUs"


def test_a_synchronize_update_is_not_sent_twice(node: Node) -> None:
    """Minor: the ``cpuset.mems`` updates a Synchronize reply carries are not recorded in the
    plugin's view, so the reconciliation that follows computes them again and sends each one a
    second time through UpdateContainers (one more runtime round trip per container)."""
    p = node.run_pod("resynced")
    a, _ = node.create(p, "app", GI)
    node.containers[a.id].linux.resources.cpu.mems = ""  # created while the plugin was away
    node.stop_plugin()
    node.start_plugin(synchronize=False)
    passes = node.handler.reconciler.passes
    in_reply = node.synchronize()
    node.handler.reconciler.wait_passes(passes + 1, 30)
    unsolicited = [u for r in node.peer.update_requests for u in r.update]
    print(
        f"in the Synchronize reply: {len(in_reply)}; sent again by UpdateContainers: {len(unsolicited)}"
    )
    assert [u.container_id for u in in_reply] == [a.id]
    assert unsolicited == [], "the same update sent twice"
