"""The real daemon's log answers "why was pod X rejected" (one line per RPC: whom, what was
decided, why refused), in JSON and on the console; the daemon says its version."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import grpc
import pytest

from numamem import __version__, version
from numamem.client import NumamemClient, error_reason
from numamem.testing.daemon import DaemonProcess
from numamem.v1 import info_pb2, info_pb2_grpc
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS, grpcurl

pytestmark = pytest.mark.e2e

LOCALITY = "Resources cannot be allocated with Topology locality"


def pod(uid: str, memory: str, containers: int = 1, name: str = "web") -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(
        uid=uid,
        namespace="shop",
        name=name,
        containers=[
            mm.Container(name=f"c{i}", requests=res, limits=res) for i in range(containers)
        ],
    )


def start(root: Path, factory: list[DaemonProcess], fmt: str) -> DaemonProcess:
    """Static, single-numa-node: a pod larger than one node (11Gi allocatable each) is
    rejected with TopologyAffinityError while both nodes are free."""
    daemon = DaemonProcess(
        root,
        [*STATIC_ARGS, "--topology-manager-policy", "single-numa-node", "--log-format", fmt],
    )
    factory.append(daemon)
    return daemon.start()


def json_lines(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [json.loads(x) for x in daemon.stderr().splitlines() if x.startswith("{")]


def test_why_was_pod_x_rejected(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    daemon = start(short_root, daemon_factory, "json")
    with NumamemClient(daemon.socket) as c:
        # First: once a pod holds node 0 alone, no two-node group is left, and the memory
        # manager offers no hint at all (the kubelet's UnexpectedAdmissionError, #120733).
        rejected = c.admit(pod("uid-wide", "14Gi", name="wide"))
        assert (rejected.admitted, rejected.reason) == (False, "TopologyAffinityError")
        assert c.admit(pod("uid-web", "1Gi")).admitted
        assert c.admit(pod("uid-many", "16Mi", containers=40, name="many")).admitted
        with pytest.raises(grpc.RpcError) as error:
            c.admit(
                mm.Pod(uid="uid-bad", containers=[mm.Container(name="x", limits={"memory": "1Q"})])
            )
        c.call(
            c.memory.AddContainer,
            mm.AddContainerRequest(
                pod=pod("uid-web", "1Gi"), container_name="c0", container_id="cid-web"
            ),
        )
        c.call(c.memory.RemoveContainer, mm.RemoveContainerRequest(container_id="cid-web"))
        c.call(c.memory.RemoveContainer, mm.RemoveContainerRequest(container_id="cid-none"))
        c.call(c.memory.ReleasePod, mm.ReleasePodRequest(pod_uid="uid-many"))
        assert c.admit(pod("uid-gone", "1Gi", name="gone")).admitted
        c.call(c.memory.SyncActivePods, mm.SyncActivePodsRequest(pods=[pod("uid-web", "1Gi")]))
    assert daemon.stop() == 0
    lines = json_lines(daemon)

    # Why was pod uid-wide rejected? Its one line says it.
    [why] = [line for line in lines if line.get("pod_uid") == "uid-wide"]
    assert why["event"] == "rpc" and why["method"] == "/numamem.v1.MemoryManager/Admit"
    assert (why["code"], why["result"], why["reason"], why["message"]) == (
        "OK",
        "rejected",
        "TopologyAffinityError",
        LOCALITY,
    )
    assert (why["pod"], why["containers"]) == ("shop/wide", ["c0"])

    # One line per RPC: nothing else carries an RPC's request id (the per-container
    # "released" lines of ReleasePod are gone: its line names them, bounded).
    rpcs = [line for line in lines if line.get("event") == "rpc"]
    assert len({line["request_id"] for line in rpcs}) == len(rpcs) == 10
    ids = {line["request_id"] for line in rpcs}
    assert [
        line for line in lines if line.get("request_id") in ids and line["event"] != "rpc"
    ] == []
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for line in rpcs:
        by_uid.setdefault(line.get("pod_uid", ""), []).append(line)

    admitted = by_uid["uid-web"][0]
    assert (admitted["result"], admitted["nodes"], admitted["pod"]) == ("admitted", [0], "shop/web")
    many_admit, many_release = by_uid["uid-many"]
    assert many_admit["containers"] == [f"c{i}" for i in range(16)]
    assert many_admit["containers_omitted"] == 24
    assert many_release["result"] == "released" and many_release["released_omitted"] == 24
    assert len(many_release["released"]) == 16
    for line in (many_admit, many_release):
        assert len(json.dumps(line)) < 2048  # 40 containers, still a short line

    [refused] = by_uid["uid-bad"]
    # The error line says what the client got: code, ErrorInfo reason, message.
    err = error.value
    assert (refused["code"], refused["reason"], refused["message"]) == (
        err.code().name,
        error_reason(err),
        err.details(),
    )
    assert refused["reason"] == "INVALID_ARGUMENT" and "'1Q'" in refused["message"]
    assert "result" not in refused

    added, removed = by_uid["uid-web"][1:]
    [sync] = [line for line in rpcs if line["method"].endswith("/SyncActivePods")]
    assert (added["result"], added["container"], added["container_id"]) == (
        "added",
        "c0",
        "cid-web",
    )
    # RemoveContainer names only the id; the servicer adds the pod and container it was.
    assert (removed["result"], removed["pod_uid"], removed["container"]) == (
        "removed",
        "uid-web",
        "c0",
    )
    assert (sync["result"], sync["active_pods"], sync["removed"]) == ("synced", 1, ["uid-gone/c0"])
    [unknown] = [line for line in rpcs if line.get("container_id") == "cid-none"]
    assert unknown["result"] == "not_found" and "pod_uid" not in unknown


def test_the_console_log_says_it_readably(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    daemon = start(short_root, daemon_factory, "console")
    with NumamemClient(daemon.socket) as c:
        assert not c.admit(pod("uid-wide", "14Gi", name="wide")).admitted
    assert daemon.stop() == 0
    [line] = [x for x in daemon.stderr().splitlines() if "pod_uid=uid-wide" in x]
    assert re.search(r"\[info\s*\] rpc\s", line), line
    for part in (
        "code=OK",
        "method=/numamem.v1.MemoryManager/Admit",
        "pod=shop/wide",
        "result=rejected",
        "reason=TopologyAffinityError",
        f"message='{LOCALITY}'",
    ):
        assert part in line, (part, line)
    [starting] = [x for x in daemon.stderr().splitlines() if "] starting" in x]
    assert f"version={__version__}" in starting and f"commit={version.commit()}" in starting


def test_the_daemon_says_its_version(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    daemon = start(short_root, daemon_factory, "json")
    expected = version.build_info()
    assert expected["version"] == __version__
    with grpc.insecure_channel(f"unix://{daemon.socket}") as channel:
        reply = info_pb2_grpc.InfoStub(channel).GetBuildInfo(
            info_pb2.GetBuildInfoRequest(), timeout=5
        )
    assert {"version": reply.version, "commit": reply.commit, "python": reply.python} == expected
    described = grpcurl(daemon.socket, "describe", "numamem.v1.Info")
    assert (
        "rpc GetBuildInfo ( .numamem.v1.GetBuildInfoRequest ) returns ( .numamem.v1.BuildInfo )"
        in described.stdout
    ), described
    called = grpcurl(daemon.socket, "numamem.v1.Info/GetBuildInfo")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == expected
    assert daemon.stop() == 0
    [starting] = [line for line in json_lines(daemon) if line["event"] == "starting"]
    assert {k: starting[k] for k in expected} == expected
