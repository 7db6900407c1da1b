"""Topology through the real daemon: discovery cases over gRPC, refusals, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import FakeNode, power9_nodes, standard_nodes, write_sysfs
from numamem.v1 import topology_pb2, topology_pb2_grpc
from tests.daemon import REPO, serve_to_exit
from tests.unit.test_memorymanager_service import container, pod

pytestmark = pytest.mark.e2e
NODE = "devices/system/node"


def machine_info(d: DaemonProcess) -> topology_pb2.MachineInfo:
    with d.channel() as ch:
        return topology_pb2_grpc.TopologyStub(ch).GetMachineInfo(
            topology_pb2.GetMachineInfoRequest(), timeout=5
        )


def serve(short_root: Path, factory: list[DaemonProcess], sysfs: Path) -> DaemonProcess:
    d = DaemonProcess(short_root, ["--sysfs-root", str(sysfs)])
    factory.append(d)
    return d.start()


def expected(nodes: list[FakeNode]) -> list[dict[str, object]]:
    ids = sorted(n.id for n in nodes)
    out = []
    for n in sorted(nodes, key=lambda n: n.id):
        out.append(
            {
                "id": n.id,
                "memory": n.memory_kb * 1024,
                "hugepages": [
                    (s * 1024, nr, free) for s, (nr, free) in sorted(n.hugepages.items())
                ],
                "distances": [10 if n.id == o else 20 + 2 * abs(n.id - o) for o in ids],
            }
        )
    return out


def actual(info: topology_pb2.MachineInfo) -> list[dict[str, object]]:
    return [
        {
            "id": n.id,
            "memory": n.memory_bytes,
            "hugepages": [(h.page_size_bytes, h.total_pages, h.free_pages) for h in n.hugepages],
            "distances": list(n.distances),
        }
        for n in info.numa_nodes
    ]


@pytest.mark.parametrize(
    "nodes",
    [
        standard_nodes(1),
        standard_nodes(2),
        standard_nodes(4, hugepages={2048: (100, 60), 1048576: (2, 1)}),
        standard_nodes(8, memory_gib=64),
        standard_nodes(3, memory_only=[2]),
        standard_nodes(12),
    ],
    ids=["1-node", "2-node", "4-node-two-sizes", "8-node", "memory-only-node", "12-node-order"],
)
def test_discovered_machine_over_grpc(
    short_root: Path, daemon_factory: list[DaemonProcess], nodes: list[FakeNode]
) -> None:
    sysfs = write_sysfs(short_root / "sys", nodes)
    info = machine_info(serve(short_root, daemon_factory, sysfs))
    assert actual(info) == expected(nodes)
    for fake, node in zip(nodes, info.numa_nodes, strict=True):
        assert ",".join(map(str, node.cpus)) == ",".join(str(c) for c in _expand(fake.cpus))


def _expand(cpus: str) -> list[int]:
    out: list[int] = []
    for token in filter(None, cpus.split(",")):
        lo, _, hi = token.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def test_non_numa_kernel_gives_one_node_with_total_memory(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    sysfs = short_root / "sys"
    (sysfs / "devices/system/cpu").mkdir(parents=True)
    (sysfs / "devices/system/cpu/online").write_text("0-1\n")
    d = serve(short_root, daemon_factory, sysfs)
    [node] = machine_info(d).numa_nodes
    assert node.id == 0
    assert node.memory_bytes == psutil.virtual_memory().total
    assert list(node.cpus) == [0, 1]
    assert "no NUMA nodes (a kernel without NUMA)" in d.stderr()
    assert "no NUMA nodes (a kernel without NUMA)" in machine_info(d).warnings[0]


def test_missing_hugepages_dir_and_distance_file(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    nodes = standard_nodes(2)
    nodes[0].hugepages_dir = False
    sysfs = write_sysfs(short_root / "sys", nodes)
    (sysfs / NODE / "node1" / "distance").unlink()
    d = serve(short_root, daemon_factory, sysfs)
    info = machine_info(d)
    assert list(info.numa_nodes[0].hugepages) == []
    assert list(info.numa_nodes[1].distances) == []
    warnings = [json.loads(x) for x in d.stderr().splitlines() if '"warning"' in x]
    assert any("distance: missing" in w.get("problem", "") for w in warnings)
    assert [w for w in info.warnings if "distance" in w]


def test_free_hugepages_are_live_through_the_daemon(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(1))
    d = serve(short_root, daemon_factory, sysfs)
    (sysfs / NODE / "node0/hugepages/hugepages-2048kB/free_hugepages").write_text("3\n")
    assert machine_info(d).numa_nodes[0].hugepages[0].free_pages == 3


@pytest.mark.parametrize(
    ("file", "content", "fragment"),
    [
        ("node0/meminfo", "Node 0 MemFree: 1 kB\n", "no 'MemTotal: <n> kB' line"),
        ("node1/distance", "10 x\n", "cannot convert x to int"),
        ("node1/hugepages/hugepages-2048kB/nr_hugepages", "ten\n", "expected a page count"),
        ("node0/cpulist", "0-1-2\n", "invalid cpulist"),
    ],
)
def test_daemon_refuses_unparsable_sysfs(
    short_root: Path, file: str, content: str, fragment: str
) -> None:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(2))
    (sysfs / NODE / file).write_text(content)
    out = serve_to_exit(short_root, "--sysfs-root", str(sysfs))
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("numamem: ")
    assert str(sysfs / NODE / file) in last
    assert fragment in last
    assert not (short_root / "s.sock").exists()


def test_topology_cli_table_and_json(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(2))
    d = serve(short_root, daemon_factory, sysfs)
    cmd = [sys.executable, "-m", "numamem", "topology", "--socket", d.socket]
    table = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    lines = table.splitlines()
    assert lines[0].split() == ["NODE", "KIND", "MEMORY", "CPUS", "HUGEPAGES", "DISTANCES"]
    assert lines[1].split()[:4] == ["0", "cpu", "16Gi", "0-1"]
    assert "2Mi: 512/512 free" in lines[1]
    assert lines[2].split()[-2:] == ["22", "10"]
    data = json.loads(
        subprocess.run(
            [*cmd, "--json"], capture_output=True, text=True, check=True, cwd=REPO
        ).stdout
    )
    assert data["numa_nodes"][1]["memory_bytes"] == 16 * 1024**3
    assert data["numa_nodes"][1]["hugepages"][1] == {
        "page_size_bytes": 1024**3,
        "total_pages": 4,
        "free_pages": 4,
    }


def test_cli_without_daemon_is_one_clear_line(short_root: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "numamem",
            "topology",
            "--socket",
            str(short_root / "none.sock"),
            "--timeout",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"numamem: UNAVAILABLE: no daemon socket at {short_root / 'none.sock'} "
        "(is numamem running? --socket)"
    )


def test_power9_tree_through_the_real_daemon(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """CPU nodes 0 and 8, GPU memory nodes 250-255: discovered, shown as memory-only by
    ``numamem topology``, and a Guaranteed pod admitted with Static and restricted."""
    sysfs = write_sysfs(short_root / "sys", power9_nodes(), generic_initiators=[250])
    d = DaemonProcess(
        short_root,
        [
            "--sysfs-root",
            str(sysfs),
            "--memory-manager-policy=Static",
            "--reserved-memory=0:memory=1Gi",
            "--system-reserved=memory=924Mi",
            "--eviction-hard=memory.available<100Mi",
            "--topology-manager-policy=restricted",
            "--topology-manager-policy-options=restrict-to-cpu-numa-nodes=true",
        ],
    )
    daemon_factory.append(d)
    d.start()
    info = machine_info(d)
    assert [n.id for n in info.numa_nodes] == [0, 8, 250, 251, 252, 253, 254, 255]
    assert [n.has_cpus for n in info.numa_nodes] == [True, True] + [False] * 6
    cmd = [sys.executable, "-m", "numamem", "topology", "--socket", d.socket]
    table = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows["8"].split()[1] == "cpu"
    assert "memory-only, generic initiator" in rows["250"]
    with NumamemClient(d.socket, timeout=10) as client:
        resp = client.admit(pod("p", container("app", "8Gi")))
        assert resp.admitted
        assert [list(b.numa_affinity) for b in resp.containers[0].blocks] == [[0]]
