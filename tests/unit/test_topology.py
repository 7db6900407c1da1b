"""NUMA discovery from fake sysfs trees, cpulists and hugepage resource names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.cpuset import CPUSet, format_cpulist, parse_cpulist
from numamem.errors import InvalidArgumentError, TopologyError
from numamem.testing.sysfs import HP_1G, HP_2M, FakeNode, machine_tree, standard_nodes, write_sysfs
from numamem.topology import hugepage_resource_name
from numamem.topology.sysfs import discover, read_free_hugepages

NODE = "devices/system/node"


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_standard_machines(tmp_path: Path, count: int) -> None:
    machine = discover(machine_tree(tmp_path, count))
    assert machine.node_ids == tuple(range(count))
    for node in machine.nodes:
        assert node.memory_bytes == 16 * 1024**3
        assert [(p.page_size_kb, p.total_pages, p.free_pages) for p in node.hugepages] == [
            (HP_2M, 512, 512),
            (HP_1G, 4, 4),
        ]
        assert node.cpus == (2 * node.id, 2 * node.id + 1)
        assert len(node.distances) == count
        assert node.distances[node.id] == 10
    assert machine.hugepage_resources == ("hugepages-2Mi", "hugepages-1Gi")


def test_twelve_nodes_are_in_numeric_order(tmp_path: Path) -> None:
    machine = discover(machine_tree(tmp_path, 12))
    assert machine.node_ids == tuple(range(12))  # node10 after node9, not after node1


def test_memory_only_node_has_no_cpus(tmp_path: Path) -> None:
    machine = discover(machine_tree(tmp_path, 3, memory_only=[2]))
    assert machine.node(2).cpus == ()
    assert machine.node(2).hugepages == ()
    assert machine.node(1).cpus == (2, 3)


def test_meminfo_kb_to_bytes(tmp_path: Path) -> None:
    write_sysfs(tmp_path, [FakeNode(0, memory_kb=5466316, cpus="0-1")])
    assert discover(tmp_path).node(0).memory_bytes == 5466316 * 1024


def test_no_node_directories_falls_back_to_one_node_with_total_memory(tmp_path: Path) -> None:
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-3\n")
    machine = discover(tmp_path, total_memory=lambda: 8 * 1024**3)
    assert len(machine.nodes) == 1
    node = machine.node(0)
    assert node.memory_bytes == 8 * 1024**3  # not 0, unlike cadvisor
    assert node.cpus == (0, 1, 2, 3)
    assert node.hugepages == ()
    [warning] = machine.warnings
    assert "no NUMA nodes (a kernel without NUMA)" in warning


def test_missing_hugepages_directory_means_no_hugepages(tmp_path: Path) -> None:
    nodes = standard_nodes(2)
    nodes[1].hugepages_dir = False
    machine = discover(write_sysfs(tmp_path, nodes))
    assert machine.node(1).hugepages == ()
    assert len(machine.node(0).hugepages) == 2


def test_missing_distance_file_warns_and_gives_no_distances(tmp_path: Path) -> None:
    write_sysfs(tmp_path, standard_nodes(2))
    (tmp_path / NODE / "node1" / "distance").unlink()
    machine = discover(tmp_path)
    assert machine.node(1).distances == ()
    assert machine.node(0).distances == (10, 22)
    assert not machine.has_distances
    assert machine.warnings == (
        f"{tmp_path / NODE / 'node1' / 'distance'}: missing; NUMA distances unknown",
    )


@pytest.mark.parametrize(
    ("file", "content", "fragment"),
    [
        ("node1/meminfo", "Node 1 MemFree: 10 kB\n", "no 'MemTotal: <n> kB' line"),
        ("node1/meminfo", "Node 1 MemTotal: lots kB\n", "no 'MemTotal: <n> kB' line"),
        ("node0/distance", "10 twenty\n", "cannot convert twenty to int"),
        (
            "node0/hugepages/hugepages-2048kB/nr_hugepages",
            "many\n",
            "expected a page count, got 'many'",
        ),
        (
            "node1/hugepages/hugepages-1048576kB/free_hugepages",
            "-1\n",
            "expected a page count, got '-1'",
        ),
        ("node1/cpulist", "0-x\n", "invalid cpulist '0-x"),
        ("node0/cpulist", "3-1\n", "is reversed"),
    ],
)
def test_unparsable_files_refuse_with_file_and_content(
    tmp_path: Path, file: str, content: str, fragment: str
) -> None:
    write_sysfs(tmp_path, standard_nodes(2))
    path = tmp_path / NODE / file
    path.write_text(content)
    with pytest.raises(TopologyError) as info:
        discover(tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert fragment in message
    assert "\n" not in message


def test_a_node_without_meminfo_has_no_memory_and_a_warning(tmp_path: Path) -> None:
    write_sysfs(tmp_path, standard_nodes(2))
    (tmp_path / NODE / "node1" / "meminfo").unlink()
    machine = discover(tmp_path)
    assert machine.node(1).memory_bytes == 0
    assert machine.node(0).memory_bytes == 16 * 1024**3
    assert machine.warnings == (
        f"{tmp_path / NODE / 'node1' / 'meminfo'}: missing; node 1 counts as having no memory",
    )


def test_free_hugepages_are_read_live(tmp_path: Path) -> None:
    write_sysfs(tmp_path, standard_nodes(1))
    assert read_free_hugepages(tmp_path, 0, HP_2M) == 512
    (tmp_path / NODE / "node0/hugepages/hugepages-2048kB/free_hugepages").write_text("17\n")
    assert read_free_hugepages(tmp_path, 0, HP_2M) == 17


@pytest.mark.parametrize(
    ("size_kb", "name"),
    [
        (2048, "hugepages-2Mi"),
        (1048576, "hugepages-1Gi"),
        (64, "hugepages-64Ki"),
        (16384, "hugepages-16Mi"),
        (16777216, "hugepages-16Gi"),
        (1536, "hugepages-1536Ki"),
    ],
)
def test_hugepage_resource_names_as_kubernetes_formats_them(size_kb: int, name: str) -> None:
    assert hugepage_resource_name(size_kb) == name


@pytest.mark.parametrize(
    ("text", "ids", "canonical"),
    [
        ("", [], ""),
        ("\n", [], ""),
        ("0", [0], "0"),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ("3,1,2", [1, 2, 3], "1-3"),
        ("0-1", [0, 1], "0-1"),
        (" 4 , 6 ", [4, 6], "4,6"),
        ("5-5", [5], "5"),
    ],
)
def test_cpulist(text: str, ids: list[int], canonical: str) -> None:
    assert parse_cpulist(text) == ids
    assert format_cpulist(ids) == canonical
    assert str(CPUSet.parse(text)) == canonical
    assert len(CPUSet.parse(text)) == len(ids)


@pytest.mark.parametrize(
    "text",
    ["a", "1-", "-1", "1-2-3", "1,,2", "1 2", "0x1", "1.5", "３", "1" * 5000, "0-" + "9" * 5000],
)
def test_malformed_cpulists_are_errors(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_cpulist(text)


def test_a_huge_cpu_id_is_refused_with_a_short_message() -> None:
    """More than 4300 digits made int() raise ValueError (INTERNAL over gRPC)."""
    with pytest.raises(InvalidArgumentError) as info:
        parse_cpulist("0," + "1" * 5000)
    assert "is not below 8192 (MAX_CPUS" in str(info.value)
    assert len(str(info.value)) < 400


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_cpulist_round_trip(ids: set[int]) -> None:
    assert parse_cpulist(format_cpulist(ids)) == sorted(ids)


@pytest.mark.smoke
def test_discovery_of_this_machines_sysfs_does_not_fail() -> None:
    """Smoke test on the real /sys of the machine running the tests.

    Holds on any Linux machine: any number of nodes, memory-only or memory-less
    nodes, or a kernel without NUMA (one node with the machine's memory).
    """
    machine = discover("/sys")
    assert machine.nodes
    assert list(machine.node_ids) == sorted(set(machine.node_ids))
    assert machine.total_memory_bytes > 0
    assert all(n.memory_bytes >= 0 for n in machine.nodes)
