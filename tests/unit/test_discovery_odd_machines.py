"""Discovery of every machine the kernel can describe (issue: real trees numamem refused).

Fake sysfs trees reproduce each case: sparse node ids (POWER9 GPU memory nodes
250-255, ids up to 1023), NUL-terminated files (Kunpeng 920 on Linux 5.15-rc1),
cpumap-only nodes, identical CPU sets, bad distance rows, NUMA-less kernels
with hugepages, node kinds. Each goes through discovery and through the
daemon's own bootstrap with the None and Static policies and every topology
policy; a property test checks that sparse ids give the hints and admissions of
the same machine with dense ids.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numamem.errors import TopologyError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.store import InMemoryStore
from numamem.memtypes import Block
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import (
    HP_2M,
    FakeNode,
    power9_nodes,
    standard_nodes,
    write_numa_less,
    write_sysfs,
)
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topology.sysfs import discover, read_free_hugepages
from numamem.topologymanager.policy import POLICIES, TopologyHint, new_policy
from numamem.v1 import memorymanager_pb2 as mm
from tests.properties import examples
from tests.unit.test_memorymanager_service import container, pod

NODE = Path("devices/system/node")
GI = 1024**3


def sparse_nodes(ids: list[int]) -> list[FakeNode]:
    nodes = standard_nodes(len(ids))
    for node, n in zip(nodes, ids, strict=True):
        node.id = n
    return nodes


# --- discovery ------------------------------------------------------------------------------


def test_power9_gpu_memory_nodes_are_memory_only(tmp_path: Path) -> None:
    machine = discover(
        write_sysfs(tmp_path, power9_nodes(), generic_initiators=[250], memory_tiers={4: [0, 8]})
    )
    assert machine.node_ids == (0, 8, 250, 251, 252, 253, 254, 255)
    assert [n.has_cpus for n in machine.nodes] == [True, True] + [False] * 6
    assert machine.node(250).memory_bytes == 16 * GI and machine.node(250).cpus == ()
    assert machine.node(250).generic_initiator and not machine.node(251).generic_initiator
    assert (machine.node(0).memory_tier, machine.node(250).memory_tier) == (4, None)
    assert machine.distance(0, 8) == 40 and machine.distance(8, 255) == 80
    assert machine.warnings == ()


def test_nul_terminated_bitmap_and_list_files(tmp_path: Path) -> None:
    """Linux 5.15-rc1 on a Kunpeng 920 ends cpulist/cpumap/... with a NUL after the newline."""
    nodes = standard_nodes(4, cpus_per_node=32)
    nodes[3].cpumap_only = True
    machine = discover(write_sysfs(tmp_path, nodes, nul_terminated=True))
    assert machine.node(0).cpus == tuple(range(32))
    assert machine.node(3).cpus == tuple(range(96, 128))
    assert machine.node(1).distances == (22, 10, 22, 24)
    assert (tmp_path / NODE / "node0" / "cpulist").read_bytes() == b"0-31\n\x00"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("00000000,0000ff00\n", tuple(range(8, 16))),
        ("80000000,00000001\n", (0, 63)),
        ("ff\n", tuple(range(8))),
        ("00000000\n\x00", ()),
        ("1,00000000,00000000\n", (64,)),
    ],
)
def test_cpumap_only_nodes(tmp_path: Path, text: str, cpus: tuple[int, ...]) -> None:
    write_sysfs(tmp_path, standard_nodes(1))
    (tmp_path / NODE / "node0" / "cpulist").unlink()
    (tmp_path / NODE / "node0" / "cpumap").write_text(text)
    assert discover(tmp_path).node(0).cpus == cpus


@pytest.mark.parametrize(
    ("file", "content", "fragment"),
    [
        ("node0/cpumap", "0000zz00\n", "invalid cpumap '0000zz00': bad word '0000zz00'"),
        ("node0/cpumap", "00000000,,1\n", "bad word ''"),
        ("node0/cpulist", "0-31\n\x00x", "invalid cpulist"),
    ],
)
def test_bad_bitmaps_are_refused_naming_the_file(
    tmp_path: Path, file: str, content: str, fragment: str
) -> None:
    write_sysfs(tmp_path, standard_nodes(1))
    if file.endswith("cpumap"):
        (tmp_path / NODE / "node0" / "cpulist").unlink()
    (tmp_path / NODE / file).write_text(content)
    with pytest.raises(TopologyError) as info:
        discover(tmp_path)
    assert str(info.value).startswith(str(tmp_path / NODE / file) + ": ")
    assert fragment in str(info.value)


def test_sparse_ids_up_to_1023(tmp_path: Path) -> None:
    ids = [0, 1, 2, 33, 34, 45, 72, 1023]
    machine = discover(write_sysfs(tmp_path, sparse_nodes(ids)))
    assert machine.node_ids == tuple(ids)
    assert machine.distance(45, 1023) == 20 + 2 * abs(45 - 1023)  # rows are positional
    assert machine.warnings == ()


def test_identical_cpu_sets_are_a_warning(tmp_path: Path) -> None:
    nodes = standard_nodes(8)
    for node in nodes:
        node.cpus = "0-63"
    machine = discover(write_sysfs(tmp_path, nodes))
    assert machine.warnings == (
        "nodes 0, 1, 2, 3, 4, 5, 6, 7 report the same CPUs (0-63) in cpulist; the firmware's "
        "NUMA description is probably wrong",
    )


def test_distance_rows_of_the_wrong_length_or_diagonal_are_warnings(tmp_path: Path) -> None:
    nodes = standard_nodes(3)
    nodes[1].distances = [20, 10]
    nodes[2].distances = [30, 30, 20]
    machine = discover(write_sysfs(tmp_path, nodes))
    assert machine.node(1).distances == (20, 10)
    assert machine.warnings == (
        f"{tmp_path / NODE / 'node1' / 'distance'}: 2 distances for 3 NUMA nodes; distances are "
        "matched to nodes by position",
        f"{tmp_path / NODE / 'node2' / 'distance'}: the distance of node 2 to itself is 20; the "
        "kernel's is 10 and smaller than every other (30 30 20)",
    )


def test_numa_less_kernel_has_the_machine_pools_and_the_trees_cpus(tmp_path: Path) -> None:
    write_numa_less(tmp_path, "0-7", {HP_2M: (128, 100), 1048576: (2, 2)})
    machine = discover(tmp_path, total_memory=lambda: 64 * GI)
    [node] = machine.nodes
    assert (node.id, node.memory_bytes, node.cpus) == (0, 64 * GI, tuple(range(8)))
    assert node.hugepages == (HugePagePool(HP_2M, 128, 100), HugePagePool(1048576, 2, 2))
    assert read_free_hugepages(tmp_path, 0, HP_2M) == 100
    assert len(machine.warnings) == 1


def test_numa_less_kernel_without_cpu_online_never_reads_the_host(tmp_path: Path) -> None:
    write_numa_less(tmp_path, None)
    machine = discover(tmp_path, total_memory=lambda: 8 * GI)
    assert machine.node(0).cpus == ()
    assert (
        machine.warnings[1]
        == f"{tmp_path / 'devices/system/cpu/online'}: missing; node 0 has no CPUs"
    )


# --- through the daemon's bootstrap ----------------------------------------------------------


def _kunpeng(root: Path) -> tuple[int, ...]:
    nodes = standard_nodes(4, cpus_per_node=32)
    nodes[3].cpumap_only = True
    write_sysfs(root, nodes, nul_terminated=True)
    return (0, 1, 2, 3)


def _identical_cpus(root: Path) -> tuple[int, ...]:
    nodes = standard_nodes(8)
    for node in nodes:
        node.cpus = "0-63"
    write_sysfs(root, nodes)
    return tuple(range(8))


def _bad_distances(root: Path) -> tuple[int, ...]:
    nodes = standard_nodes(3)
    nodes[1].distances = [20, 10]
    nodes[2].distances = [30, 30, 20]
    write_sysfs(root, nodes)
    return (0, 1, 2)


def _numa_less(root: Path) -> tuple[int, ...]:
    write_numa_less(root, "0-3", {HP_2M: (512, 512)})
    return (0,)


def _power9(root: Path) -> tuple[int, ...]:
    write_sysfs(root, power9_nodes())
    return (0, 8, 250, 251, 252, 253, 254, 255)


def _sparse(root: Path) -> tuple[int, ...]:
    ids = [0, 33, 34, 45, 72, 1023]
    write_sysfs(root, sparse_nodes(ids))
    return tuple(ids)


TREES = {
    "power9": _power9,
    "sparse-1023": _sparse,
    "kunpeng-nul-cpumap": _kunpeng,
    "identical-cpus": _identical_cpus,
    "bad-distance-rows": _bad_distances,
    "numa-less-hugepages": _numa_less,
}


@pytest.mark.parametrize("tree", list(TREES))
@pytest.mark.parametrize("memory_policy", ["None", "Static"])
@pytest.mark.parametrize("topology_policy", POLICIES)
def test_the_daemon_serves_every_tree_with_every_policy(
    tmp_path: Path, tree: str, memory_policy: str, topology_policy: str
) -> None:
    """The daemon's bootstrap starts on each tree, serves GetMachineInfo with the discovered
    ids and warnings, and admits a Guaranteed pod (pinned to the first node under Static)."""
    sysfs = tmp_path / "tree"
    ids = TREES[tree](sysfs)
    extra = {} if memory_policy == "Static" else {"reserved_memory": ()}
    with serve_in_process(
        standard_nodes(1),
        sysfs_root=str(sysfs),
        memory_manager_policy=memory_policy,
        topology_manager_policy=topology_policy,
        **extra,
    ) as server:
        info = server.client.get_machine_info()
        assert tuple(n.id for n in info.numa_nodes) == ids
        assert list(info.warnings) == list(discover(sysfs).warnings)
        resp = server.client.admit(pod("p", container("app", "2Gi")))
        assert resp.admitted
        if memory_policy == "Static":
            [block] = [b for b in resp.containers[0].blocks if b.type == "memory"]
            assert list(block.numa_affinity) == [ids[0]]


def test_power9_admits_with_static_restricted_and_restrict_to_cpu_nodes() -> None:
    options = (("restrict-to-cpu-numa-nodes", "true"),)
    with serve_in_process(
        power9_nodes(),
        topology_manager_policy="restricted",
        topology_manager_policy_options=options,
    ) as server:
        info = server.client.get_machine_info()
        assert [n.has_cpus for n in info.numa_nodes] == [True, True] + [False] * 6
        hints = server.client.get_topology_hints(pod("h", container("app", "1Gi")), "app")
        assert [list(h.numa_nodes) for h in hints.hints["memory"].hints] == [[0], [8], [0, 8]]
        big = server.client.admit(pod("big", container("app", "300Gi")))  # more than one node
        assert big.admitted
        assert {tuple(b.numa_affinity) for b in big.containers[0].blocks} == {(0, 8)}
        # The group {0,8} has room for 200Gi, but a 2-node hint is not preferred for a request
        # one node could hold: restricted rejects it, leaving nothing behind.
        gpu = server.client.admit(pod("gpu", container("app", "200Gi")))
        assert gpu.result == mm.REJECTED
        assert server.client.get_memory("gpu", "app") == []


# --- sparse ids are dense ids, renamed ----------------------------------------------------------


def q(n: int) -> Quantity:
    return Quantity.from_int(n, Format.BINARY_SI)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_sparse_ids_admit_like_dense_ids(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 6))
    sparse = sorted(data.draw(st.sets(st.integers(0, 1023), min_size=count, max_size=count)))
    specs = [(data.draw(st.integers(2, 12)) * GI, data.draw(st.booleans())) for _ in range(count)]
    policy_name = data.draw(st.sampled_from(POLICIES))
    scope = data.draw(st.sampled_from(["container", "pod"]))
    pods = []
    for i in range(data.draw(st.integers(1, 6))):
        apps = tuple(
            Container(f"c{j}", r, dict(r))
            for j in range(data.draw(st.integers(1, 3)))
            for r in [{"cpu": q(1), "memory": q(data.draw(st.integers(1, 16)) * GI // 2)}]
        )
        pods.append(Pod(f"p{i}", "ns", f"p{i}", (), apps))

    def run(
        ids: list[int],
    ) -> list[tuple[bool, str, dict[str, TopologyHint], dict[str, list[Block]]]]:
        machine = Machine(
            tuple(
                NUMANode(n, memory, cpus=(k,) if cpu or k == 0 else ())
                for k, (n, (memory, cpu)) in enumerate(zip(ids, specs, strict=True))
            )
        )
        topology, _ = new_policy(policy_name, machine, {"max-allowable-numa-nodes": "64"})
        manager = Manager(
            StaticPolicy(machine, {ids[0]: {"memory": GI}}), InMemoryStore(), topology, scope
        )
        manager.start()
        out = []
        for p in pods:
            outcome = manager.admit(p)
            r = outcome.result
            out.append((r.admitted, r.reason, r.affinities, outcome.blocks))
        return out

    rename = dict(zip(sparse, range(count), strict=True))

    def dense_mask(mask: int | None) -> int | None:
        if mask is None:
            return None
        return sum(1 << rename[n] for n in range(mask.bit_length()) if mask >> n & 1)

    expected = run(list(range(count)))
    for got, want in zip(run(sparse), expected, strict=True):
        admitted, reason, affinities, blocks = got
        assert (admitted, reason) == want[:2]
        assert {
            k: TopologyHint(dense_mask(h.affinity), h.preferred) for k, h in affinities.items()
        } == want[2]
        assert {
            k: [Block(tuple(rename[n] for n in b.numa_affinity or ()), b.type, b.size) for b in v]
            for k, v in blocks.items()
        } == want[3]
