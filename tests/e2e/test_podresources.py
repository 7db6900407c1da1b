"""The kubelet's podresources v1 API on --podresources-socket, against the real daemon, read by
a client generated from the upstream api.proto (tests/podresources_upstream.py, in its own
process), by grpcurl, and merged with a fake kubelet built from the same file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import REPO, STATIC_ARGS, grpcurl_bin

pytestmark = pytest.mark.e2e

GI = 1024**3


def upstream(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "tests.podresources_upstream", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def pod(
    uid: str, namespace: str, name: str, memory: str = "1Gi", hugepages: bool = False
) -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    if hugepages:
        res["hugepages-2Mi"] = "4Mi"
    return mm.Pod(
        uid=uid,
        namespace=namespace,
        name=name,
        containers=[
            mm.Container(name="app", requests=res, limits=res),
            mm.Container(name="side", requests={"cpu": "1", "memory": "256Mi"},
                         limits={"cpu": "1", "memory": "256Mi"}),
        ],
    )  # fmt: skip


def start(root: Path, factory: list[DaemonProcess], *extra: str) -> DaemonProcess:
    if not (root / "sys").exists():
        write_sysfs(root / "sys", standard_nodes(2, memory_gib=8, hugepages={2048: (64, 64)}))
    d = DaemonProcess(
        root,
        [
            "--sysfs-root",
            str(root / "sys"),
            *STATIC_ARGS,
            "--topology-manager-policy",
            "single-numa-node",
            "--podresources-socket",
            str(root / "pr" / "podresources.sock"),
            *extra,
        ],
    )
    factory.append(d)
    return d.start()


def memory_of(
    response: dict[str, Any],
) -> dict[tuple[str, str, str], list[tuple[str, int, list[int]]]]:
    """(namespace, pod, container) -> sorted (type, size, nodes) of a List answer."""
    found = {}
    for p in response.get("pod_resources", []):
        for c in p.get("containers", []):
            found[(p.get("namespace", ""), p["name"], c["name"])] = sorted(
                (m["memory_type"], int(m["size"]), [int(n.get("ID", 0)) for n in m["topology"].get("nodes", [])])
                for m in c.get("memory", [])
            )  # fmt: skip
    return found


def state_blocks(
    client: NumamemClient, names: dict[str, tuple[str, str]]
) -> dict[tuple[str, str, str], list[tuple[str, int, list[int]]]]:
    state = client.get_state()
    return {
        (*names[uid], ctr): sorted(
            (b.type, b.size, sorted(b.numa_affinity)) for b in blocks.blocks if b.size > 0
        )
        for uid, entry in state.entries.items()
        for ctr, blocks in entry.containers.items()
    }  # fmt: skip


def test_list_get_and_allocatable_after_admissions_releases_and_a_restart(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    socket = str(short_root / "pr" / "podresources.sock")
    assert oct(Path(socket).stat().st_mode & 0o777) == "0o660"
    names = {"u-web": ("shop", "web-0"), "u-db": ("shop", "db-0"), "u-gone": ("tmp", "gone")}
    with NumamemClient(d.socket) as c:
        assert c.admit(pod("u-web", "shop", "web-0", hugepages=True)).admitted
        assert c.admit(pod("u-db", "shop", "db-0", memory="2Gi")).admitted
        assert c.admit(pod("u-gone", "tmp", "gone")).admitted
        c.release_pod("u-gone")
        del names["u-gone"]
        expected = state_blocks(c, names)
        allocatable = sorted(
            (b.type, b.size, list(b.numa_affinity)) for b in c.get_allocatable_memory() if b.size
        )
    listed = upstream("call", socket, "List")["response"]
    assert memory_of(listed) == expected
    assert {(p["namespace"], p["name"]) for p in listed["pod_resources"]} == set(names.values())
    assert ("hugepages-2Mi", 4 * 1024**2) in {
        (t, s) for t, s, _ in expected[("shop", "web-0", "app")]
    }

    got = upstream("call", socket, "Get", json.dumps({"pod_name": "db-0", "pod_namespace": "shop"}))
    assert memory_of({"pod_resources": [got["response"]["pod_resources"]]}) == {
        k: v for k, v in expected.items() if k[1] == "db-0"
    }
    missing = upstream(
        "call", socket, "Get", json.dumps({"pod_name": "gone", "pod_namespace": "tmp"})
    )
    assert missing == {"code": "NOT_FOUND", "details": "pod gone in namespace tmp not found"}

    alloc = upstream("call", socket, "GetAllocatableResources")["response"]
    assert (
        sorted(
            (
                m["memory_type"],
                int(m["size"]),
                [int(n.get("ID", 0)) for n in m["topology"]["nodes"]],
            )
            for m in alloc["memory"]
        )
        == allocatable
    )
    assert {m["memory_type"] for m in alloc["memory"]} == {"memory", "hugepages-2Mi"}

    # The names are durable: a restart lists the same pods, named.
    d.stop()
    d.start()
    assert memory_of(upstream("call", socket, "List")["response"]) == expected


def test_grpcurl_lists_through_reflection(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as c:
        assert c.admit(pod("u-1", "default", "nginx")).admitted
    socket = str(short_root / "pr" / "podresources.sock")
    out = subprocess.run(
        [grpcurl_bin(), "-plaintext", "-unix", socket, "v1.PodResourcesLister/List"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    pods = json.loads(out.stdout)["pod_resources"]
    assert [(p["namespace"], p["name"]) for p in pods] == [("default", "nginx")]


@pytest.fixture
def fake_kubelet(short_root: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    fixture = short_root / "kubelet.json"
    fixture.write_text(json.dumps({
        "list": {"pod_resources": [
            {"name": "web-0", "namespace": "shop", "containers": [
                {"name": "app", "cpu_ids": [2, 3],
                 "devices": [{"resource_name": "vendor.com/nic", "device_ids": ["nic-1"],
                              "topology": {"nodes": [{"ID": 0}]}}],
                 "memory": [{"memory_type": "memory", "size": "123", "topology": {"nodes": [{"ID": 1}]}}]},
                {"name": "side", "cpu_ids": [4]}]},
            {"name": "kube-proxy", "namespace": "kube-system", "containers": [{"name": "proxy"}]}]},
        "allocatable": {"cpu_ids": [0, 1, 2, 3, 4, 5, 6, 7],
                        "devices": [{"resource_name": "vendor.com/nic", "device_ids": ["nic-1", "nic-2"]}]},
    }))  # fmt: skip
    socket = str(short_root / "kubelet.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.podresources_upstream", "kubelet", socket, str(fixture)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
    try:
        yield socket, proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_merge_with_the_kubelet_and_the_kubelet_going_away(
    short_root: Path,
    daemon_factory: list[DaemonProcess],
    fake_kubelet: tuple[str, subprocess.Popen[str]],
) -> None:
    kubelet_socket, kubelet = fake_kubelet
    d = start(short_root, daemon_factory, "--kubelet-podresources-socket", kubelet_socket)
    socket = str(short_root / "pr" / "podresources.sock")
    with NumamemClient(d.socket) as c:
        assert c.admit(pod("u-web", "shop", "web-0")).admitted
        assert c.admit(pod("u-batch", "jobs", "batch-1")).admitted
        expected = state_blocks(c, {"u-web": ("shop", "web-0"), "u-batch": ("jobs", "batch-1")})
    listed = upstream("call", socket, "List")["response"]
    pods = {(p["namespace"], p["name"]): p for p in listed["pod_resources"]}
    # The kubelet's pods in its order, then numamem's own; CPUs and devices from the kubelet,
    # memory from numamem (the kubelet's 123 bytes on node 1 are replaced).
    assert list(pods) == [("shop", "web-0"), ("kube-system", "kube-proxy"), ("jobs", "batch-1")]
    app = next(c for c in pods[("shop", "web-0")]["containers"] if c["name"] == "app")
    assert [int(x) for x in app["cpu_ids"]] == [2, 3]
    assert app["devices"][0]["device_ids"] == ["nic-1"]
    assert memory_of(listed) == {**expected, ("kube-system", "kube-proxy", "proxy"): []}
    alloc = upstream("call", socket, "GetAllocatableResources")["response"]
    assert [int(x) for x in alloc["cpu_ids"]] == list(range(8))
    assert alloc["devices"][0]["device_ids"] == ["nic-1", "nic-2"]
    assert {m["memory_type"] for m in alloc["memory"]} == {"memory", "hugepages-2Mi"}
    got = upstream(
        "call", socket, "Get", json.dumps({"pod_name": "web-0", "pod_namespace": "shop"})
    )
    assert [int(x) for x in got["response"]["pod_resources"]["containers"][0]["cpu_ids"]] == [2, 3]
    got = upstream(
        "call", socket, "Get", json.dumps({"pod_name": "batch-1", "pod_namespace": "jobs"})
    )
    assert got["response"]["pod_resources"]["name"] == "batch-1"  # numamem's, unknown to kubelet

    # The kubelet goes away: numamem answers with its own data, and says so in its log.
    kubelet.kill()
    kubelet.wait()
    listed = upstream("call", socket, "List")["response"]
    assert memory_of(listed) == expected
    alloc = upstream("call", socket, "GetAllocatableResources")["response"]
    assert "cpu_ids" not in alloc and alloc["memory"]
    deadline = time.monotonic() + 5
    while "did not answer" not in d.stderr() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert d.stderr().count("podresources API did not answer") == 1  # once a minute


def test_a_burst_above_the_rate_limit_is_refused_and_the_main_socket_is_not(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    socket = str(short_root / "pr" / "podresources.sock")
    codes = upstream("burst", socket, "60")
    refused = [c for c in codes if c != "OK"]
    assert refused and set(refused) == {"RESOURCE_EXHAUSTED: rejected by rate limit"}
    assert 5 <= codes.count("OK") < 60  # the burst of 10, less the call that connected
    with NumamemClient(d.socket) as c:
        for _ in range(50):
            c.get_state()
        assert c.check_health() == 1


def test_a_podresources_socket_that_cannot_be_bound_refuses_the_start_and_leaves_nothing(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = DaemonProcess(short_root, [])
    daemon_factory.append(d)
    too_long = str(short_root / ("x" * 120) / "p.sock")
    out = d.run_to_exit("--podresources-socket", too_long)
    assert out.returncode == 1
    assert "--podresources-socket" in out.stderr.strip().splitlines()[-1]
    taken = short_root / "taken"
    taken.write_text("not a directory")
    before = sorted(str(p) for p in short_root.rglob("*"))
    out = d.run_to_exit("--podresources-socket", str(taken / "p.sock"))
    assert out.returncode == 1
    assert "--podresources-socket" in out.stderr.strip().splitlines()[-1]
    assert sorted(str(p) for p in short_root.rglob("*")) == before
