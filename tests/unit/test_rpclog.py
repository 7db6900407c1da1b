"""numamem.api.rpclog: what an RPC's log line says (whom, what was decided, why refused),
bounded whatever the request; numamem.api.status.reason_in reads an error's reason back."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from numamem.api import rpclog, status
from numamem.errors import MAX_MESSAGE_BYTES
from numamem.v1 import common_pb2, info_pb2
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.tables import named_rows

RES = {"cpu": "1", "memory": "1Gi"}


def pod(uid: str = "u1", containers: int = 1, inits: int = 0, **kw: str) -> mm.Pod:
    return mm.Pod(
        uid=uid,
        namespace=kw.get("namespace", "default"),
        name=kw.get("name", "web"),
        init_containers=[
            mm.Container(name=f"i{i}", requests=RES, limits=RES) for i in range(inits)
        ],
        containers=[
            mm.Container(name=f"c{i}", requests=RES, limits=RES) for i in range(containers)
        ],
    )


def blocks(*nodes: tuple[int, ...]) -> list[mm.MemoryBlock]:
    return [mm.MemoryBlock(numa_affinity=n, type="memory", size=1) for n in nodes]


def refs(uid: str, count: int) -> list[common_pb2.ContainerRef]:
    return [common_pb2.ContainerRef(pod_uid=uid, container_name=f"c{i}") for i in range(count)]


WHO = {"pod_uid": "u1", "pod": "default/web", "containers": ["c0"]}

CASES: list[tuple[str, Any, Any, dict[str, Any]]] = [
    # (case, request, reply (None: an error, no reply), the line's fields)
    (
        "Admit, admitted on two nodes",
        mm.AdmitRequest(pod=pod(inits=1)),
        mm.AdmitResponse(
            admitted=True,
            containers=[
                mm.ContainerAdmission(container_name="i0", blocks=blocks((1,))),
                mm.ContainerAdmission(container_name="c0", blocks=blocks((0,))),
            ],
        ),
        {**WHO, "containers": ["i0", "c0"], "result": "admitted", "nodes": [0, 1]},
    ),
    (
        "Admit, rejected: the kubelet's reason and message",
        mm.AdmitRequest(pod=pod()),
        mm.AdmitResponse(
            admitted=False,
            reason="TopologyAffinityError",
            message="Resources cannot be allocated with Topology locality",
        ),
        {
            **WHO,
            "result": "rejected",
            "reason": "TopologyAffinityError",
            "message": "Resources cannot be allocated with Topology locality",
        },
    ),
    (
        "Admit of a pod with 40 containers: 16 named, the rest counted",
        mm.AdmitRequest(pod=pod(containers=38, inits=2)),
        mm.AdmitResponse(admitted=True, pod_blocks=blocks((0, 1))),
        {
            **WHO,
            "containers": ["i0", "i1", *(f"c{i}" for i in range(14))],
            "containers_omitted": 24,
            "result": "admitted",
            "nodes": [0, 1],
        },
    ),
    (
        "a pod without namespace and name: its uid only",
        mm.ExplainRequest(pod=mm.Pod(uid="u1")),
        mm.ExplainResponse(),
        {"pod_uid": "u1", "containers": []},
    ),
    (
        "Allocate",
        mm.AllocateRequest(pod=pod(), container_name="c0"),
        mm.AllocateResponse(blocks=blocks((3,), (3,))),
        {**WHO, "container": "c0", "result": "allocated", "nodes": [3]},
    ),
    (
        "AllocatePod",
        mm.AllocatePodRequest(pod=pod()),
        mm.AllocatePodResponse(
            pod_blocks=mm.MemoryBlocks(blocks=blocks((0, 1))),
            containers={"c0": mm.MemoryBlocks(blocks=blocks((0, 1)))},
        ),
        {**WHO, "result": "allocated", "nodes": [0, 1]},
    ),
    (
        "AddContainer",
        mm.AddContainerRequest(pod=pod(), container_name="c0", container_id="cid"),
        mm.AddContainerResponse(),
        {**WHO, "container": "c0", "container_id": "cid", "result": "added"},
    ),
    (
        "RemoveContainer of a known id",
        mm.RemoveContainerRequest(container_id="cid"),
        mm.RemoveContainerResponse(found=True),
        {"container_id": "cid", "result": "removed"},
    ),
    (
        "RemoveContainer of an unknown id",
        mm.RemoveContainerRequest(container_id="nope"),
        mm.RemoveContainerResponse(found=False),
        {"container_id": "nope", "result": "not_found"},
    ),
    (
        "ReleasePod of 20 containers: 16 named",
        mm.ReleasePodRequest(pod_uid="u1"),
        mm.ReleasePodResponse(released=refs("u1", 20)),
        {
            "pod_uid": "u1",
            "result": "released",
            "released": [f"u1/c{i}" for i in range(16)],
            "released_omitted": 4,
        },
    ),
    (
        "SyncActivePods",
        mm.SyncActivePodsRequest(pods=[pod("a"), pod("b")]),
        mm.SyncActivePodsResponse(removed=refs("gone", 1)),
        {"active_pods": 2, "result": "synced", "removed": ["gone/c0"]},
    ),
    (
        "Resize that extends the group",
        mm.ResizeRequest(pod=pod(), container_name="c0"),
        mm.ResizeResponse(
            action=mm.RESIZE_GROWN_BY_EXTENSION,
            memory=2 << 30,
            numa_nodes=[1, 0],
            previous_numa_nodes=[0],
            affinity_changed=True,
        ),
        {
            **WHO,
            "container": "c0",
            "result": "grown_by_extension",
            "nodes": [0, 1],
            "memory": 2 << 30,
            "previous_nodes": [0],
        },
    ),
    (
        "a refused Admit: the request's pod, no result",
        mm.AdmitRequest(pod=pod()),
        None,
        WHO,
    ),
    (
        "a MetaWriter call names its container",
        mc.DeleteContainerRequest(pod_uid="u1", container_name="app"),
        mc.MetaWriteResponse(),
        {"pod_uid": "u1", "container": "app"},
    ),
    ("a call about no pod", info_pb2.GetBuildInfoRequest(), info_pb2.BuildInfo(), {}),
    ("a client stream's requests are not described", iter(()), None, {}),
]


@pytest.mark.parametrize(("request_msg", "reply", "expected"), named_rows(CASES))
def test_fields_say_whom_and_what_was_decided(
    request_msg: Any, reply: Any, expected: dict[str, Any]
) -> None:
    assert rpclog.fields(request_msg, reply) == expected


def test_an_error_adds_its_reason_and_message_over_the_decision() -> None:
    got = rpclog.fields(
        mm.AdmitRequest(pod=pod()),
        mm.AdmitResponse(admitted=True, pod_blocks=blocks((0,))),
        error=("REPLY_TOO_LARGE", "the reply would take 5,000,000 bytes"),
    )
    # Admitted and then not delivered: both are on the line.
    assert got["result"] == "admitted" and got["reason"] == "REPLY_TOO_LARGE"
    assert got["message"] == "the reply would take 5,000,000 bytes"


def test_request_values_and_messages_are_one_bounded_line() -> None:
    hostile = "x\n" * 5000
    got = rpclog.fields(
        mm.AdmitRequest(pod=mm.Pod(uid=hostile, namespace="a\nb", name="n", containers=[])),
        None,
        error=("INVALID_ARGUMENT", "line one\nline two " + "y" * 5000),
    )
    for value in (got["pod_uid"], got["pod"], got["message"]):
        assert "\n" not in value
    assert len(got["pod_uid"].encode()) <= 96 + 40
    assert got["message"].startswith("line one\\nline two yyy")
    assert len(got["message"].encode()) <= MAX_MESSAGE_BYTES + 40


def test_the_servicer_attaches_inside_a_recording_only() -> None:
    rpclog.attach(pod_uid="nobody")  # no call running: nothing, no error
    with rpclog.recording() as attached:
        rpclog.attach(**rpclog.container_fields(("u9", "c9")))
        rpclog.attach(**rpclog.container_fields(None))
        with rpclog.recording() as inner:
            rpclog.attach(other=1)
        assert inner == {"other": 1}
        rpclog.attach(more=2)
    assert attached == {"pod_uid": "u9", "container": "c9", "more": 2}
    rpclog.attach(late=3)
    assert "late" not in attached
    line = rpclog.fields(
        mm.RemoveContainerRequest(container_id="cid"),
        mm.RemoveContainerResponse(found=True),
        attached,
    )
    assert line == {
        "container_id": "cid",
        "result": "removed",
        "pod_uid": "u9",
        "container": "c9",
        "more": 2,
    }


def test_reason_in_reads_the_errorinfo_status_with_reason_wrote() -> None:
    trailers = status.status_with_reason(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", status.OVERLOADED
    ).trailing_metadata
    assert status.reason_in(trailers) == "OVERLOADED"
    assert status.reason_in(list(trailers)) == "OVERLOADED"
    assert status.reason_in(()) == ""
    assert status.reason_in(None) == ""
    assert status.reason_in((("grpc-status-details-bin", b"\xff\xfe not a status"),)) == ""
    assert status.reason_in((("other", b"x"),)) == ""


def test_stale_state_a_call_removes_on_the_way_is_one_bounded_line() -> None:
    """The kubelet's removeStaleState inside a hint or allocation call: one line naming at
    most 16 containers (it used to be one line per container); SyncActivePods itself says
    what it removed in its RPC line and logs nothing more."""
    from structlog.testing import capture_logs

    from numamem import logging as nlog
    from numamem.memorymanager.manager.writes import Manager
    from numamem.memorymanager.policy.static import StaticPolicy
    from numamem.memorymanager.state.store import InMemoryStore
    from numamem.pod import Container, Pod
    from numamem.quantity import parse_quantity
    from numamem.topology import Machine, NUMANode

    gi = 1024**3
    machine = Machine(tuple(NUMANode(i, 16 * gi) for i in range(2)))
    active: list[Pod] = []
    mgr = Manager(
        StaticPolicy(machine, {0: {"memory": gi}}), InMemoryStore(), active_pods=lambda: active
    )
    mgr.start()
    res = {"cpu": parse_quantity("1"), "memory": parse_quantity("16Mi")}
    big = Pod("big", "ns", "big", (), tuple(Container(f"c{i}", res, dict(res)) for i in range(40)))
    active.append(big)
    for ctr in big.containers:
        mgr.allocate(big, ctr.name)
    assert mgr.reader().pod_count() == 1
    active.clear()
    nlog.configure("info", "json", cache=False)  # the tests' configuration drops info lines
    try:
        with capture_logs() as logs:
            mgr.get_topology_hints(big, "c0")  # big is no longer active: its state goes
        assert mgr.reader().pod_count() == 0
        with capture_logs() as synced:
            mgr.allocate(big, "c0")
            mgr.sync_active_pods([])
    finally:
        nlog.configure("warning", "console", cache=False)
    [line] = [x for x in logs if x["event"] == "removed stale state"]
    assert line["containers"] == [f"big/c{i}" for i in range(16)] and line["omitted"] == 24
    assert len(logs) == 1
    assert synced == []
