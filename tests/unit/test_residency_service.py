"""GetResidency, Explain's residency, the Prometheus gauges and ``numamem residency``, in-process
on a fake 2-node machine with fake cgroup trees (the collector's rounds are run by the test)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from numamem.api.metacache import MetaCacheComponent
from numamem.cli.main import main
from numamem.testing.cgroups import CGROUPFS, SYSTEMD, V1, V2, CgroupValues, write_container
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.unit.test_metrics import scrape_unix, value

MI = 1 << 20
SPLIT = {0: (64 * MI, 32 * MI), 1: (30 * MI, 2 * MI)}  # a quarter on node 1


def p1_cgroup(root: Path, mode: str, driver: str, cid: str = "aaa", **values: Any) -> str:
    """The cgroup of p1's container (Guaranteed, id ``cid``) under ``root``/cgroup, its
    memory SPLIT between the nodes but where ``values`` say otherwise; its path below the
    mount point."""
    return write_container(
        root / "cgroup",
        mode,
        driver,
        "guaranteed",
        "p1",
        cid,
        CgroupValues(**{"numa": SPLIT, **values}),
    )


def pod(uid: str, memory: str = "1Gi", names: tuple[str, ...] = ("app",)) -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(
        uid=uid,
        namespace="default",
        name=f"web-{uid}",
        containers=[mm.Container(name=n, requests=res, limits=res) for n in names],
    )


def collector_round(server: InProcessServer) -> None:
    """One more collector round, run here after the thread's first (it then waits an hour)."""
    cache = server.component(MetaCacheComponent)
    deadline = time.monotonic() + 10
    while cache.collector.stats.samples < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    cache.collector.sample_once()


def pinned_and_measured(
    server: InProcessServer, container_id: str = "aaa"
) -> mm.ContainerResidency:
    """Admits pod ``p1`` (one 1Gi container ``app``), names its container ``container_id``,
    runs one collector round and returns the one residency row the daemon then answers."""
    c = server.client
    p1 = pod("p1")
    assert c.admit(p1).admitted
    c.add_container(p1, "app", container_id)
    collector_round(server)
    [row] = c.get_residency()
    return row


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of the metrics whose names start with ``name``: label sets -> values."""
    out = {}
    for line in text.splitlines():
        head, _, number = line.rpartition(" ")
        if head.startswith(name) and "{" in head:
            out[frozenset(re.findall(r'(\w+)="([^"]*)"', head))] = float(number)
    return out


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())


def serve(root: Path, **config: object) -> object:
    return serve_in_process(
        root=root,
        cgroup_root=str(root / "cgroup"),
        metric_interval_seconds=3600,
        metrics_socket=str(root / "metrics.sock"),
        **config,
    )


def by_key(rows: list[mm.ContainerResidency]) -> dict[tuple[str, str], mm.ContainerResidency]:
    return {(r.pod_uid, r.container_name): r for r in rows}


def test_lifecycle_of_a_pinned_container(short_root: Path) -> None:
    cgroups = short_root / "cgroup"
    p1_cgroup(short_root, V2, SYSTEMD, mems="0")
    with serve(short_root) as server:  # type: ignore[attr-defined]
        c = server.client
        assert c.get_residency() == []
        p1 = pod("p1")
        assert c.admit(p1).admitted
        assert c.get_memory_numa_nodes("p1", "app") == [0]
        [row] = c.get_residency()
        assert (row.status, row.assigned_numa_nodes) == (mm.RESIDENCY_NO_CONTAINER_ID, [0])
        c.add_container(p1, "app", "containerd://aaa")
        [row] = c.get_residency("p1", "app")
        assert row.status == mm.RESIDENCY_PENDING
        collector_round(server)
        [row] = c.get_residency("p1")
        assert row.status == mm.RESIDENCY_MEASURED, row
        assert (row.container_id, row.cgroup_mode) == ("containerd://aaa", "v2")
        assert row.cgroup.endswith("kubepods-podp1.slice/cri-containerd-aaa.scope")
        assert [(n.node, n.assigned, n.bytes) for n in row.nodes] == [
            (0, True, 96 * MI),
            (1, False, 32 * MI),
        ]
        assert dict(row.nodes[1].types) == {"anon": 30 * MI, "file": 2 * MI, "total": 32 * MI}
        assert (row.total_bytes, row.outside_bytes, row.outside_share) == (128 * MI, 32 * MI, 0.25)
        assert (row.cpuset_mems_state, list(row.cpuset_mems)) == (mm.CPUSET_MEMS_MATCHES, [0])
        assert row.sampled_at.seconds > 1_600_000_000
        assert not row.HasField("cpuset_write")
        # cpuset.mems changed behind numamem's back: the next round catches it.
        p1_cgroup(short_root, V2, SYSTEMD, mems="0-1")
        collector_round(server)
        [row] = c.get_residency()
        assert (row.cpuset_mems_state, list(row.cpuset_mems)) == (mm.CPUSET_MEMS_DIFFERS, [0, 1])
        assert not row.HasField("cpuset_write")  # not enforced by default
        assert (cgroups / row.cgroup / "cpuset.mems").read_text() == "0-1\n"
        text = scrape_unix(str(short_root / "metrics.sock"))
        who = {"namespace": "", "pod": "p1", "uid": "p1", "container": "app"}
        assert samples(text, "numamem_container_cpuset_mems_mismatch") == {labels(**who): 1}
        assert samples(text, "numamem_container_memory_outside_affinity_bytes") == {
            labels(**who): 32 * MI
        }
        assert samples(text, "numamem_container_numa_memory_bytes") == {
            labels(**who, node=str(node), type=kind): size
            for node, (anon, file) in SPLIT.items()
            for kind, size in (("anon", anon), ("file", file), ("total", anon + file))
        }
        # Released: left out at once, before the next round.
        assert c.remove_container("containerd://aaa")
        assert c.get_residency() == []
        assert samples(scrape_unix(str(short_root / "metrics.sock")), "numamem_container_") == {}


def test_selection_and_bad_requests(short_root: Path) -> None:
    with serve(short_root) as server:  # type: ignore[attr-defined]
        c = server.client
        assert c.admit(pod("p1", names=("a", "b"))).admitted
        assert c.admit(pod("p2")).admitted
        assert [(r.pod_uid, r.container_name) for r in c.get_residency()] == [
            ("p1", "a"),
            ("p1", "b"),
            ("p2", "app"),
        ]
        assert [r.container_name for r in c.get_residency("p1")] == ["a", "b"]
        assert [r.container_name for r in c.get_residency("p1", "b")] == ["b"]
        cases = [
            (
                "p9",
                "",
                grpc.StatusCode.NOT_FOUND,
                "pod 'p9' has no container pinned by the memory manager",
            ),
            (
                "p1",
                "zz",
                grpc.StatusCode.NOT_FOUND,
                "container 'zz' of pod 'p1' is not pinned by the memory manager (it has no memory blocks)",
            ),
            (
                "",
                "a",
                grpc.StatusCode.INVALID_ARGUMENT,
                "pod_uid: must not be empty when container_name is given",
            ),
            (
                "p\x001",
                "",
                grpc.StatusCode.INVALID_ARGUMENT,
                "pod_uid: must not contain NUL characters",
            ),
            (
                "p" * 2000,
                "",
                grpc.StatusCode.INVALID_ARGUMENT,
                "pod_uid: longer than 1024 characters (2000)",
            ),
            (
                "p1",
                "a\x00",
                grpc.StatusCode.INVALID_ARGUMENT,
                "container_name: must not contain NUL characters",
            ),
        ]
        for uid, name, code, details in cases:
            with pytest.raises(grpc.RpcError) as info:
                c.get_residency(uid, name)
            assert (info.value.code(), info.value.details()) == (code, details)
        assert c.check_health() == 1  # still SERVING


def test_names_a_new_id_and_a_new_assignment(short_root: Path) -> None:
    p1_cgroup(short_root, V1, CGROUPFS, "old", mems="0")
    with serve(short_root) as server:  # type: ignore[attr-defined]
        c = server.client
        p1 = pod("p1")
        assert c.admit(p1).admitted
        c.add_container(p1, "app", "old")
        c.add_container_info(
            mc.ContainerInfo(
                pod_uid="p1", container_name="app", pod_namespace="shop", pod_name="web-1"
            )
        )
        collector_round(server)
        [row] = c.get_residency()
        assert (row.pod_namespace, row.pod_name, row.status) == (
            "shop",
            "web-1",
            mm.RESIDENCY_MEASURED,
        )
        # The container restarts under a new id: pending until measured, then the new cgroup.
        p1_cgroup(short_root, V1, CGROUPFS, "new", numa={0: (MI, 0)}, mems="0")
        c.add_container(p1, "app", "new")
        assert c.get_residency()[0].status == mm.RESIDENCY_PENDING
        collector_round(server)
        [row] = c.get_residency()
        assert (row.container_id, row.total_bytes) == ("new", MI)
        # Re-pinned on both nodes (released, then a pod too big for one node): pending again.
        c.release_pod("p1")
        big = pod("p1", memory="20Gi")
        assert c.admit(big).admitted
        c.add_container(big, "app", "new")
        [row] = c.get_residency()
        assert (row.status, list(row.assigned_numa_nodes)) == (mm.RESIDENCY_PENDING, [0, 1])
        collector_round(server)
        [row] = c.get_residency()
        assert (row.cpuset_mems_state, row.outside_bytes) == (mm.CPUSET_MEMS_DIFFERS, 0)


def test_recorded_pod_names_with_podresources(short_root: Path) -> None:
    with serve(short_root, podresources_socket=str(short_root / "pr.sock")) as server:  # type: ignore[attr-defined]
        assert server.client.admit(pod("p1")).admitted
        [row] = server.client.get_residency()
        assert (row.pod_namespace, row.pod_name) == ("default", "web-p1")


def test_unreadable_and_missing_cgroups_in_the_answer(short_root: Path) -> None:
    cgroups = short_root / "cgroup"
    rel = p1_cgroup(short_root, V2, CGROUPFS)
    (cgroups / rel / "memory.numa_stat").write_text("anon N0=1 N1=oops\n")
    with serve(short_root) as server:  # type: ignore[attr-defined]
        c = server.client
        for uid, cid in (("p1", "aaa"), ("p2", "bbb")):
            p = pod(uid)
            assert c.admit(p).admitted
            c.add_container(p, "app", cid)
        collector_round(server)
        rows = by_key(c.get_residency())
        broken = rows[("p1", "app")]
        assert broken.status == mm.RESIDENCY_UNREADABLE
        assert broken.message == (
            f"{cgroups / rel / 'memory.numa_stat'}: line 1 'anon N0=1 N1=oops': "
            "'N1=oops' is not N<node>=<value>"
        )
        assert broken.cpuset_mems_state == mm.CPUSET_MEMS_STATE_UNSPECIFIED
        assert rows[("p2", "app")].status == mm.RESIDENCY_NO_CGROUP
        text = scrape_unix(str(short_root / "metrics.sock"))
        assert value(text, "numamem_collector_errors_total") >= 1


def test_enforcement_through_the_daemon(short_root: Path) -> None:
    cgroups = short_root / "cgroup"
    rel = p1_cgroup(short_root, V1, SYSTEMD, mems="0-1")
    with serve(short_root, enforce_cpuset_mems=True) as server:  # type: ignore[attr-defined]
        row = pinned_and_measured(server, "containerd://aaa")
        assert (row.cpuset_mems_state, list(row.cpuset_mems)) == (mm.CPUSET_MEMS_MATCHES, [0])
        w = row.cpuset_write
        assert (list(w.before), list(w.written), list(w.after), w.error) == ([0, 1], [0], [0], "")
        assert w.memory_migrate_enabled and w.time.seconds > 0
        assert (cgroups / "cpuset" / rel / "cpuset.mems").read_text() == "0\n"
        text = scrape_unix(str(short_root / "metrics.sock"))
        assert value(text, 'numamem_cpuset_mems_writes_total{result="ok"}') == 1
        assert value(text, 'numamem_cpuset_mems_writes_total{result="failed"}') == 0


def test_explain_shows_the_pods_residency(short_root: Path) -> None:
    p1_cgroup(short_root, V2, CGROUPFS, mems="0")
    with serve(short_root) as server:  # type: ignore[attr-defined]
        c = server.client
        p1 = pod("p1")
        assert list(c.explain(p1).residency) == []  # not admitted yet
        assert c.admit(p1).admitted
        c.add_container(p1, "app", "aaa")
        collector_round(server)
        [row] = c.explain(p1).residency
        assert (row.status, row.outside_bytes) == (mm.RESIDENCY_MEASURED, 32 * MI)
        assert [dict(n.types) for n in row.nodes] == [{}, {}]  # totals only in Explain
        assert list(c.explain(pod("p2")).residency) == []


def test_the_residency_command(short_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p1_cgroup(short_root, V2, CGROUPFS, mems="0-1")
    with serve(short_root, podresources_socket=str(short_root / "pr.sock")) as server:  # type: ignore[attr-defined]
        c = server.client
        p1 = pod("p1")
        assert c.admit(p1).admitted
        assert c.admit(pod("p2")).admitted
        c.add_container(p1, "app", "aaa")
        collector_round(server)
        sock = ["--socket", server.socket]
        assert main(["residency", *sock]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == [
            "POD", "CONTAINER", "ASSIGNED", "MEMORY", "BY", "NODE", "OUTSIDE", "CPUSET.MEMS", "STATUS",
        ]  # fmt: skip
        assert out[1].split() == [
            "default/web-p1", "(p1)", "app", "0", "0*:", "96Mi", "1:", "32Mi", "32Mi", "(25.0%)",
            "0-1", "DIFFERS", "measured",
        ]  # fmt: skip
        assert out[2].split() == [
            "default/web-p2",
            "(p2)",
            "app",
            "0",
            "-",
            "-",
            "-",
            "no",
            "container",
            "id",
        ]
        assert out[3] == (
            "default/web-p2 (p2) app: no runtime id is known (AddContainer): its cgroup cannot be found"
        )
        assert out[4].startswith("measured by the collector round of 20")
        assert out[5].startswith("* = a node the memory manager assigned")
        assert main(["residency", "--pod", "p1", "--container", "app", "--json", *sock]) == 0
        data = json.loads(capsys.readouterr().out)
        [row] = data["containers"]
        assert row["status"] == "RESIDENCY_MEASURED"
        assert row["cpuset_mems_state"] == "CPUSET_MEMS_DIFFERS"
        assert row["nodes"][1] == {
            "node": 1,
            "assigned": False,
            "bytes": 32 * MI,
            "types": {"anon": 30 * MI, "file": 2 * MI, "total": 32 * MI},
        }
        assert row["sampled_at"].endswith("Z")
        assert row["cpuset_write"] is None
        assert main(["residency", "--pod", "p9", *sock]) == 1
        assert "NOT_FOUND: pod 'p9' has no container pinned" in capsys.readouterr().err
        with pytest.raises(SystemExit) as usage:
            main(["residency", "--container", "app", *sock])
        assert usage.value.code == 2
        assert "--container needs --pod" in capsys.readouterr().err
        manifest = short_root / "p1.yaml"
        manifest.write_text(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web-p1, namespace: default, uid: p1}\n"
            "spec:\n  containers:\n  - name: app\n    resources:\n"
            "      requests: {cpu: '1', memory: 1Gi}\n      limits: {cpu: '1', memory: 1Gi}\n"
        )
        assert main(["explain", "-f", str(manifest), *sock]) == 0
        text = capsys.readouterr().out
        tail = text.split("residency of the pod's pinned containers (the last collector round):\n")[
            1
        ]
        assert tail.splitlines()[1].split()[:4] == ["default/web-p1", "(p1)", "app", "0"]
        assert "0-1 DIFFERS" in tail.splitlines()[1]


def test_client_values_cannot_forge_lines_of_the_residency_command(
    short_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reviewer's d3: ESC and CR in a runtime id, a pod name and a container name."""
    res = {"cpu": "1", "memory": "1Gi"}
    hostile = mm.Pod(
        uid="p1",
        namespace="ns\x1b[2K",
        name="web\r\nx/n app: wrote cpuset.mems 0",
        containers=[mm.Container(name="app\x1b[31m", requests=res, limits=res)],
    )
    with serve(short_root, podresources_socket=str(short_root / "pr.sock")) as server:  # type: ignore[attr-defined]
        c = server.client
        assert c.admit(hostile).admitted
        cid = "containerd://\x1b[2K\rx/n app: wrote cpuset.mems 0 to /sys/fs/cgroup/cpuset/..."
        c.add_container(hostile, "app\x1b[31m", cid)
        collector_round(server)
        [row] = c.get_residency()
        assert row.status == mm.RESIDENCY_NO_CGROUP
        assert row.message == (
            f"no cgroup under {short_root / 'cgroup'} for container id 'containerd://\\x1b[2K\\rx/n "
            "app: wrote cpuset.mems 0 to /sys/fs/cgroup/cpuset/...'"
        )
        assert main(["residency", "--socket", server.socket]) == 0
        out = capsys.readouterr().out
        assert all(line.isprintable() for line in out.splitlines()), out
        assert "ns\\x1b[2K/web\\r\\nx/n app: wrote cpuset.mems 0 (p1)" in out
        assert "app\\x1b[31m" in out
        assert not any(line.startswith("x/n app") for line in out.splitlines())


def test_enforcement_held_back_by_the_parent_is_reported(
    short_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cgroups = short_root / "cgroup"
    rel = p1_cgroup(short_root, V2, CGROUPFS, mems="1", parent_effective="1")
    with serve(short_root, enforce_cpuset_mems=True) as server:  # type: ignore[attr-defined]
        row = pinned_and_measured(server)
        assert row.cpuset_enforcement == mm.CPUSET_ENFORCEMENT_PARENT_DISALLOWS
        assert row.cpuset_enforcement_message.startswith(
            f"{(cgroups / rel).parent / 'cpuset.mems.effective'} is '1', without the assigned node '0'"
        )
        assert not row.HasField("cpuset_write")
        assert (cgroups / rel / "cpuset.mems").read_text() == "1\n"
        text = scrape_unix(str(short_root / "metrics.sock"))
        who = {"namespace": "", "pod": "p1", "uid": "p1", "container": "app"}
        assert samples(text, "numamem_container_cpuset_mems_not_enforced") == {
            labels(**who, reason="parent_disallows"): 1
        }
        assert main(["residency", "--socket", server.socket]) == 0
        out = capsys.readouterr().out.splitlines()
        assert "1 DIFFERS (parent disallows)" in out[1]
        assert (
            out[2]
            == f"p1 app: --enforce-cpuset-mems holds back (parent disallows): {row.cpuset_enforcement_message}"
        )
        (cgroups / rel).parent.joinpath("cpuset.mems.effective").write_text("0-1\n")
        collector_round(server)
        [row] = server.client.get_residency()
        assert row.cpuset_enforcement == mm.CPUSET_ENFORCEMENT_UNSPECIFIED
        assert row.cpuset_enforcement_message == ""
        assert (row.cpuset_mems_state, row.cpuset_write.error) == (mm.CPUSET_MEMS_MATCHES, "")
        text = scrape_unix(str(short_root / "metrics.sock"))
        assert samples(text, "numamem_container_cpuset_mems_not_enforced") == {}


def test_a_contested_cpuset_through_the_daemon(
    short_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cgroups = short_root / "cgroup"
    rel = p1_cgroup(short_root, V1, CGROUPFS, mems="0-1")
    mems = cgroups / "cpuset" / rel / "cpuset.mems"
    with serve(short_root, enforce_cpuset_mems=True) as server:  # type: ignore[attr-defined]
        collector_round(server)  # after the thread's own first round: only ours from here
        c = server.client
        p1 = pod("p1")
        assert c.admit(p1).admitted
        c.add_container(p1, "app", "aaa")
        for _ in range(4):  # the other agent writes 0-1 before each round
            mems.write_text("0-1\n")
            collector_round(server)
        [row] = c.get_residency()
        assert row.cpuset_enforcement == mm.CPUSET_ENFORCEMENT_CONTESTED
        assert row.cpuset_enforcement_message.startswith("cpuset.mems was written 3 times")
        assert (row.cpuset_mems_state, list(row.cpuset_mems)) == (mm.CPUSET_MEMS_DIFFERS, [0, 1])
        text = scrape_unix(str(short_root / "metrics.sock"))
        who = {"namespace": "", "pod": "p1", "uid": "p1", "container": "app"}
        assert samples(text, "numamem_container_cpuset_mems_not_enforced") == {
            labels(**who, reason="contested"): 1
        }
        assert value(text, 'numamem_cpuset_mems_writes_total{result="ok"}') == 3
        assert main(["residency", "--socket", server.socket]) == 0
        out = capsys.readouterr().out
        assert "0-1 DIFFERS (contested)" in out
        assert (
            "p1 app: --enforce-cpuset-mems holds back (contested): cpuset.mems was written" in out
        )


def test_hugetlb_pages_in_the_answer_and_the_gauges(short_root: Path) -> None:
    p1_cgroup(short_root, V2, CGROUPFS, mems="0", hugetlb={"2MB": {0: 0, 1: 64 * MI}})
    with serve(short_root) as server:  # type: ignore[attr-defined]
        row = pinned_and_measured(server)
        assert dict(row.nodes[1].types) == {
            "anon": 30 * MI,
            "file": 2 * MI,
            "hugetlb_2MB": 64 * MI,
            "total": 96 * MI,
        }
        assert (row.total_bytes, row.outside_bytes) == (192 * MI, 96 * MI)
        text = scrape_unix(str(short_root / "metrics.sock"))
        who = {"namespace": "", "pod": "p1", "uid": "p1", "container": "app"}
        gauges = samples(text, "numamem_container_numa_memory_bytes")
        assert gauges[labels(**who, node="1", type="hugetlb_2MB")] == 64 * MI
        assert gauges[labels(**who, node="1", type="total")] == 96 * MI
