"""Admit's optional ``container_ids``: the runtime ids recorded in the admission's own durable
write, exactly as Admit followed by the kubelet's AddContainer of each container would record
them; and ``numamem nri``'s CreateContainer, which uses it to make one daemon write, not two."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.memorymanager.manager.writes import Manager
from numamem.nri.daemonlink import Budget, DaemonLink, background_budget
from numamem.nri.handler import CallContext
from numamem.nri.memoryplugin import MemoryPlugin
from numamem.nri.options import PluginOptions
from numamem.nriapi import api_pb2 as api
from numamem.pod import Pod
from numamem.testing import nri_objects as obj
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_memorymanager import GI, ctr, manager, two_nodes
from tests.unit.test_memorymanager_service import code_and_details, container, pod

MI = 1 << 20


def observed(m: Manager) -> tuple[object, ...]:
    committed = m.committed()
    view = committed.view
    return (
        view.get_memory_assignments(),
        view.get_machine_state(),
        committed.containers.as_dict(),
        dict(committed.names),
    )


INIT = ctr("init", 3 * GI)
SIDECAR = ctr("side", GI, sidecar=True)
APP, APP2 = ctr("app", 2 * GI), ctr("app2", GI)

CASES: dict[str, tuple[Pod, dict[str, str]]] = {
    "one app container": (Pod("p", containers=(APP,)), {"app": "id-app"}),
    "the app frees the init container": (
        Pod("p", init_containers=(INIT,), containers=(APP,)),
        {"app": "id-app"},
    ),
    "every container, the init one freed by the app's id": (
        Pod("p", init_containers=(INIT, SIDECAR), containers=(APP, APP2)),
        {"init": "id-init", "side": "id-side", "app": "id-app", "app2": "id-app2"},
    ),
    "the sidecar's id frees the init container before it": (
        Pod("p", init_containers=(INIT, SIDECAR), containers=(APP,)),
        {"side": "id-side"},
    ),
    "only the init container: nothing freed": (
        Pod("p", init_containers=(INIT,), containers=(APP,)),
        {"init": "id-init"},
    ),
}


@pytest.mark.parametrize("policy", ["none", "single-numa-node"])
@pytest.mark.parametrize("case", list(CASES))
def test_admit_with_ids_is_admit_then_add_container_of_each_in_one_write(
    case: str, policy: str
) -> None:
    target, ids = CASES[case]
    combined, store = manager(two_nodes(), policy=policy)
    writes = store.writes
    assert combined.admit(target, container_ids=ids).result.admitted
    assert store.writes == writes + 1

    kubelet, _ = manager(two_nodes(), policy=policy)
    assert kubelet.admit(target).result.admitted
    for c in target.all_containers():  # AddContainer in the pod's order, as the kubelet starts them
        if c.name in ids:
            kubelet.add_container(target, c.name, ids[c.name])
    assert observed(combined) == observed(kubelet)


def test_a_grown_pod_records_the_new_id_and_frees_the_finished_init_container() -> None:
    """The plugin's sequence: the init container admitted and recorded, then the pod grown by
    its app container with the app's id: one write, the init container's memory freed."""
    m, store = manager(two_nodes(), policy="single-numa-node")
    first = Pod("p", containers=(INIT,))
    assert m.admit(first, container_ids={"init": "id-init"}).result.admitted
    grown = Pod("p", init_containers=(INIT,), containers=(APP,))
    writes = store.writes
    assert m.admit(grown, container_ids={"app": "id-app"}).result.admitted
    assert store.writes == writes + 1
    assert m.committed().containers.as_dict() == {"id-app": ("p", "app")}
    assert set(m.reader().get_memory_assignments()["p"]) == {"app"}
    # Again with the same id (a retried creation): nothing changes, nothing is written.
    writes = store.writes
    assert m.admit(grown, container_ids={"app": "id-app"}).result.admitted
    assert store.writes == writes


def test_a_rejected_pod_records_no_id_and_writes_nothing() -> None:
    m, store = manager(two_nodes(), policy="single-numa-node")
    writes = store.writes
    outcome = m.admit(Pod("big", containers=(ctr("app", 20 * GI),)), container_ids={"app": "id"})
    assert not outcome.result.admitted
    assert store.writes == writes
    assert m.committed().containers.as_dict() == {}


# --- the RPC ---------------------------------------------------------------------------


def admit_request(ids: dict[str, str]) -> mm.AdmitRequest:
    return mm.AdmitRequest(
        pod=pod("p", container("app"), inits=(container("init"),)), container_ids=ids
    )


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ({"other": "id"}, "container_ids key: 'other' is not a container of pod 'p'"),
        ({"app": ""}, "container_ids['app']: must not be empty"),
        (
            {"app": "same", "init": "same"},
            "container_ids['init']: 'same' is the id of another container too",
        ),
    ],
)
def test_bad_container_ids_are_refused_naming_the_field_and_change_nothing(
    numamem_server: InProcessServer, ids: dict[str, str], message: str
) -> None:
    client = numamem_server.client
    code, details = code_and_details(
        lambda: client.call(client.memory.Admit, admit_request(ids), None)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in details
    assert dict(client.get_state().entries) == {}


def test_ids_given_to_admit_are_the_daemons_runtime_ids(numamem_server: InProcessServer) -> None:
    client = numamem_server.client
    reply = client.call(client.memory.Admit, admit_request({"app": "cid-app"}), None)
    assert reply.admitted and reply.container_ids_recorded
    assert not client.admit(pod("q", container("app"))).container_ids_recorded  # none sent
    assert set(client.get_state().entries["p"].containers) == {"app"}  # init freed by app's id
    assert client.remove_container("cid-app") is True  # RemoveContainer finds the id
    assert set(client.get_state().entries) == {"q"}


# --- numamem nri's CreateContainer -------------------------------------------------------------


def commits(server: InProcessServer) -> Callable[[], int]:
    component = server.component(MemoryManagerComponent)
    return lambda: component.manager.committed().version


def ctx(method: str) -> CallContext:
    return CallContext(method, deadline=time.monotonic() + 2, request_timeout=2)


def test_the_plugins_create_container_makes_one_daemon_write_with_the_id_recorded() -> None:
    """Admit with the runtime id, no separate AddContainer: the runtime waits for one durable
    write, and a crash after it leaves the id recorded with the memory (never one without
    the other)."""
    with serve_in_process() as server:
        version = commits(server)
        plugin = MemoryPlugin(
            PluginOptions(socket=server.socket), DaemonLink(server.socket), poll=60
        )
        try:
            plugin.state.daemon.get_state(background_budget())  # the settings, read once
            sandbox = obj.pod("web", "uid-web")
            for name, memory in (("init", 256 * MI), ("app", 512 * MI)):
                c = obj.container(sandbox, name, memory_limit=memory, cpu_milli=500)
                before = version()
                reply = plugin.create_container(
                    api.CreateContainerRequest(pod=sandbox, container=c), ctx("CreateContainer")
                )
                assert reply.adjust.linux.resources.cpu.mems == "0"
                assert version() == before + 1, name
                if name == "init":
                    plugin.stop_container(
                        api.StopContainerRequest(pod=sandbox, container=c), ctx("StopContainer")
                    )
            state = server.client.get_state()
            assert set(state.entries["uid-web"].containers) == {"app"}  # init freed by app's id
            app = plugin.state.records["uid-web"].entries["app"]
            assert app.id_recorded
            assert server.client.remove_container(app.container_id) is True
        finally:
            plugin.stop()


def test_an_admitted_container_without_blocks_has_its_id_released_at_removal() -> None:
    """Policy None admits and pins nothing, but the id is recorded (as AddContainer records
    every container's): the container's RemoveContainer releases it."""
    with serve_in_process(memory_manager_policy="None", reserved_memory=()) as server:
        component = server.component(MemoryManagerComponent)
        plugin = MemoryPlugin(
            PluginOptions(socket=server.socket), DaemonLink(server.socket), poll=60
        )
        try:
            sandbox = obj.pod("web", "uid-web")
            c = obj.container(sandbox, "app", memory_limit=512 * MI, cpu_milli=500)
            reply = plugin.create_container(
                api.CreateContainerRequest(pod=sandbox, container=c), ctx("CreateContainer")
            )
            assert reply.adjust.linux.resources.cpu.mems == ""  # left alone: not pinned
            assert component.manager.committed().containers.as_dict() == {c.id: ("uid-web", "app")}
            plugin.remove_container(
                api.RemoveContainerRequest(pod=sandbox, container=c), ctx("RemoveContainer")
            )
            assert component.manager.committed().containers.as_dict() == {}
        finally:
            plugin.stop()


class OldDaemonLink(DaemonLink):
    """A daemon older than Admit's ``container_ids``: it never sees them (proto3 drops an
    unknown field), and says nothing of them."""

    def call(self, method: str, request: Any, budget: Budget, request_id: str = "") -> Any:
        if method == "Admit":
            request = mm.AdmitRequest(pod=request.pod, other_providers=request.other_providers)
        return super().call(method, request, budget, request_id)


def test_with_a_daemon_older_than_container_ids_the_plugin_records_the_id_with_add_container() -> (
    None
):
    with serve_in_process() as server:
        version = commits(server)
        plugin = MemoryPlugin(
            PluginOptions(socket=server.socket), OldDaemonLink(server.socket), poll=60
        )
        try:
            sandbox = obj.pod("web", "uid-web")
            c = obj.container(sandbox, "app", memory_limit=512 * MI, cpu_milli=500)
            plugin.state.daemon.get_state(background_budget())
            before = version()
            reply = plugin.create_container(
                api.CreateContainerRequest(pod=sandbox, container=c), ctx("CreateContainer")
            )
            assert reply.adjust.linux.resources.cpu.mems == "0"
            assert version() == before + 2  # Admit, then AddContainer
            assert plugin.state.records["uid-web"].entries["app"].id_recorded
            assert server.client.remove_container(c.id) is True
        finally:
            plugin.stop()
