"""Issue 38 in the files the kernel writes: a tree no Linux machine has is refused, not
worked through (sysfs, /proc/iomem, cgroup files).

Each file is read up to ``MAX_FILE_BYTES``; node ids are below ``MAX_NUMA_NODES``, CPU ids
below ``MAX_CPUS``; a number has at most ``MAX_NUMBER_DIGITS`` digits. Before, a
``--sysfs-root`` with a huge file was read whole, a cpulist ``0-1048575`` was expanded to a
million ids, and a 5000-digit count raised ValueError (a traceback at start).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from numamem.cpuset import MAX_CPUS, MAX_NUMA_NODES
from numamem.errors import CgroupFormatError, TopologyError
from numamem.metacache.metrics.cgroup import (
    MAX_SMALL_FILE_BYTES,
    read_cpu_max,
    read_int,
    read_keyed,
    read_psi_avg60,
)
from numamem.testing.sysfs import HP_2M, standard_nodes, write_sysfs
from numamem.topology.iomem import MAX_IOMEM_BYTES, kernel_image_span
from numamem.topology.sysfs import MAX_FILE_BYTES, MAX_NUMBER_DIGITS, discover

NODE0 = Path("devices/system/node/node0")


def _tree(tmp_path: Path) -> Path:
    nodes = standard_nodes(2)
    nodes[0].hugepages = {HP_2M: (4, 4)}
    return write_sysfs(tmp_path, nodes)


@pytest.mark.parametrize(
    ("file", "content", "refusal"),
    [
        ("cpulist", "0-1048575\n", f"CPU id 1048575 is not below {MAX_CPUS} (MAX_CPUS"),
        ("cpulist", f"0-{MAX_CPUS}\n", f"CPU id {MAX_CPUS} is not below {MAX_CPUS}"),
        ("cpulist", "0," * (MAX_FILE_BYTES // 2) + "0\n", f"longer than {MAX_FILE_BYTES} bytes"),
        ("distance", "10 " + "9" * (MAX_NUMBER_DIGITS + 1), "cannot convert"),
        ("meminfo", "Node 0 MemTotal: " + "9" * 5000 + " kB\n", "no 'MemTotal: <n> kB' line"),
        (
            "hugepages/hugepages-2048kB/nr_hugepages",
            "9" * 5000 + "\n",
            "expected a page count",
        ),
    ],
)
def test_a_file_beyond_any_linux_machine_is_refused(
    tmp_path: Path, file: str, content: str, refusal: str
) -> None:
    root = _tree(tmp_path)
    (root / NODE0 / file).write_text(content)
    with pytest.raises(TopologyError) as info:
        discover(root, total_memory=lambda: 1 << 35)
    assert refusal in str(info.value) and file.rsplit("/", 1)[-1] in str(info.value)


def test_a_cpumap_naming_cpus_beyond_max_cpus_is_refused_before_expanding(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / NODE0 / "cpulist").unlink()
    (root / NODE0 / "cpumap").write_text(",".join(["ffffffff"] * (MAX_CPUS // 32 + 1)) + "\n")
    with pytest.raises(TopologyError, match=r"257 words name CPUs beyond 8192 \(MAX_CPUS"):
        discover(root, total_memory=lambda: 1 << 35)
    (root / NODE0 / "cpumap").write_text(",".join(["ffffffff"] * (MAX_CPUS // 32)) + "\n")
    assert len(discover(root, total_memory=lambda: 1 << 35).node(0).cpus) == MAX_CPUS


def test_node_ids_beyond_max_numnodes_are_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "devices/system/node" / f"node{MAX_NUMA_NODES}").mkdir()
    with pytest.raises(TopologyError, match=r"node id 1024 is not below 1024 \(MAX_NUMA_NODES"):
        discover(root, total_memory=lambda: 1 << 35)
    (root / "devices/system/node/node1024").rmdir()
    (root / "devices/system/node/has_generic_initiator").write_text("0-1048575\n")
    with pytest.raises(TopologyError, match="NUMA node id 1048575 is not below 1024"):
        discover(root, total_memory=lambda: 1 << 35)


def test_the_largest_machine_reads_within_the_bounds(tmp_path: Path) -> None:
    """8192 CPUs with every other one online (the longest cpulist the kernel writes) and the
    largest node id are a machine, read without expanding anything twice."""
    nodes = standard_nodes(2)
    nodes[0].cpus = ",".join(str(c) for c in range(0, MAX_CPUS, 2))
    nodes[1].id = MAX_NUMA_NODES - 1
    nodes[1].cpus = ",".join(str(c) for c in range(1, MAX_CPUS, 2))
    root = write_sysfs(tmp_path, nodes)
    assert len((root / NODE0 / "cpulist").read_bytes()) < MAX_FILE_BYTES
    tracemalloc.start()
    try:
        machine = discover(root, total_memory=lambda: 1 << 35)
        spent = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert machine.node_ids == (0, MAX_NUMA_NODES - 1)
    assert len(machine.node(0).cpus) + len(machine.node(MAX_NUMA_NODES - 1).cpus) == MAX_CPUS
    assert spent < 4 << 20


def test_a_huge_file_is_not_read_whole(tmp_path: Path) -> None:
    """A --sysfs-root whose files are not sysfs files (here: 64 MiB of cpulist) costs at most
    MAX_FILE_BYTES to refuse."""
    root = _tree(tmp_path)
    with open(root / NODE0 / "cpulist", "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes
    tracemalloc.start()
    try:
        with pytest.raises(TopologyError, match="MAX_FILE_BYTES"):
            discover(root, total_memory=lambda: 1 << 35)
        spent = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert spent < 4 * MAX_FILE_BYTES


def test_iomem_is_read_up_to_its_bound_and_addresses_are_64_bit(tmp_path: Path) -> None:
    """/proc/iomem was read whole (a wrong --proc-root could name any file), and a
    1000-digit "address" made a 4000-bit kernel span."""
    lines = "01000000-03ffffff : Kernel code\n" + "f" * 1000 + "-" + "f" * 1001 + " : Kernel bss\n"
    (tmp_path / "iomem").write_text(lines)
    assert kernel_image_span(tmp_path) == 0x03FFFFFF - 0x01000000 + 1
    with open(tmp_path / "iomem", "ab") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB more
    tracemalloc.start()
    try:
        assert kernel_image_span(tmp_path) == 0x03FFFFFF - 0x01000000 + 1
        spent = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert spent < 4 * MAX_IOMEM_BYTES


@pytest.mark.parametrize("read", [read_keyed, read_int, read_cpu_max, read_psi_avg60])
def test_a_cgroup_file_is_read_up_to_its_bound(tmp_path: Path, read: object) -> None:
    """memory.stat, cpu.stat, cpu.max, memory.pressure and the single numbers were read whole."""
    path = tmp_path / "memory.stat"
    with open(path, "wb") as f:
        f.write(b"anon 4096\n")
        f.truncate(64 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(CgroupFormatError, match=f"larger than {MAX_SMALL_FILE_BYTES} bytes"):
            read(path)  # type: ignore[operator]
        spent = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert spent < 4 * MAX_SMALL_FILE_BYTES
