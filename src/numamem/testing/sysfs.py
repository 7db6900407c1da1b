"""Fake sysfs NUMA trees for tests: ``write_sysfs(root, nodes)`` plus ready-made machines.

The layout matches the kernel's (``devices/system/node/node<N>/{meminfo,cpulist,
distance,hugepages/hugepages-<size>kB/{nr,free}_hugepages}``) so the real
discovery code reads it. Tests then edit single files to build odd cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

GIB_KB = 1024 * 1024
HP_2M = 2048
HP_1G = 1048576


@dataclass
class FakeNode:
    """One node of a fake machine. ``hugepages`` maps page size (kB) to (nr, free)."""

    id: int
    memory_kb: int = 16 * GIB_KB
    cpus: str = ""
    hugepages: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    distances: Sequence[int] | None = None  # None: 10 to itself, 20 + 2*|i-j| to others
    hugepages_dir: bool = True
    cpumap_only: bool = False
    """Write ``cpumap`` (hex words) instead of ``cpulist``, as kernels before about 2.6.2x."""


def default_distance(a: int, b: int) -> int:
    return 10 if a == b else 20 + 2 * abs(a - b)


def cpumap(cpus: Sequence[int], words: int = 2) -> str:
    """The kernel's ``cpumap`` text: 32-bit hex words, most significant first."""
    value = sum(1 << c for c in cpus)
    words = max(words, (max(cpus, default=0) // 32) + 1)
    return ",".join(f"{value >> (32 * i) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


def write_sysfs(
    root: Path,
    nodes: Sequence[FakeNode],
    *,
    distance_files: bool = True,
    nul_terminated: bool = False,
    generic_initiators: Sequence[int] = (),
    memory_tiers: Mapping[int, Sequence[int]] | None = None,
) -> Path:
    """Write the tree under ``root`` (created if needed) and return ``root``.

    ``nul_terminated`` ends list and bitmap files with ``\n\0`` (Linux 5.15-rc1);
    ``generic_initiators`` fills ``has_generic_initiator``; ``memory_tiers`` maps a
    tier id to its nodes (``devices/virtual/memory_tiering``).
    """
    end = "\n\x00" if nul_terminated else "\n"
    base = root / "devices" / "system" / "node"
    base.mkdir(parents=True, exist_ok=True)
    ids = [n.id for n in nodes]
    online = _format_list(sorted(ids))
    (base / "online").write_text(online + end)
    (base / "possible").write_text(online + end)
    if generic_initiators:
        (base / "has_generic_initiator").write_text(_format_list(generic_initiators) + end)
    for tier, members in (memory_tiers or {}).items():
        tier_dir = root / "devices" / "virtual" / "memory_tiering" / f"memory_tier{tier}"
        tier_dir.mkdir(parents=True, exist_ok=True)
        (tier_dir / "nodelist").write_text(_format_list(members) + end)
    for node in nodes:
        d = base / f"node{node.id}"
        d.mkdir(exist_ok=True)
        (d / "meminfo").write_text(
            f"Node {node.id} MemTotal:       {node.memory_kb} kB\n"
            f"Node {node.id} MemFree:        {node.memory_kb // 2} kB\n"
            f"Node {node.id} MemUsed:        {node.memory_kb - node.memory_kb // 2} kB\n"
        )
        if node.cpumap_only:
            (d / "cpumap").write_text(cpumap(_cpus(node.cpus)) + end)
        else:
            (d / "cpulist").write_text(node.cpus + end)
        if distance_files:
            row = (
                node.distances
                if node.distances is not None
                else [default_distance(node.id, other) for other in sorted(ids)]
            )
            (d / "distance").write_text(" ".join(str(x) for x in row) + end)
        if node.hugepages_dir:
            hp = d / "hugepages"
            hp.mkdir(exist_ok=True)
            for size_kb, (nr, free) in node.hugepages.items():
                sd = hp / f"hugepages-{size_kb}kB"
                sd.mkdir(exist_ok=True)
                (sd / "nr_hugepages").write_text(f"{nr}\n")
                (sd / "free_hugepages").write_text(f"{free}\n")
                (sd / "surplus_hugepages").write_text("0\n")
    cpu_ids = sorted({c for n in nodes for c in _cpus(n.cpus)})
    cpu_dir = root / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    if cpu_ids:
        (cpu_dir / "online").write_text(f"{cpu_ids[0]}-{cpu_ids[-1]}" + end)
    return root


def write_numa_less(
    root: Path, cpus: str | None, hugepages: Mapping[int, tuple[int, int]] | None = None
) -> Path:
    """A kernel without NUMA: no node directories, ``cpu/online`` (unless None) and the
    machine-wide hugepage pools of ``kernel/mm/hugepages``."""
    cpu_dir = root / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    if cpus is not None:
        (cpu_dir / "online").write_text(cpus + "\n")
    for size_kb, (nr, free) in (hugepages or {}).items():
        sd = root / "kernel" / "mm" / "hugepages" / f"hugepages-{size_kb}kB"
        sd.mkdir(parents=True, exist_ok=True)
        (sd / "nr_hugepages").write_text(f"{nr}\n")
        (sd / "free_hugepages").write_text(f"{free}\n")
    return root


def _format_list(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def _cpus(text: str) -> list[int]:
    out: list[int] = []
    for token in filter(None, text.strip().split(",")):
        lo, _, hi = token.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def standard_nodes(
    count: int,
    *,
    memory_gib: int = 16,
    cpus_per_node: int = 2,
    hugepages: Mapping[int, tuple[int, int]] | None = None,
    memory_only: Sequence[int] = (),
) -> list[FakeNode]:
    """``count`` equal nodes; ``memory_only`` node ids get no CPUs and no hugepages."""
    pages = dict(hugepages) if hugepages is not None else {HP_2M: (512, 512), HP_1G: (4, 4)}
    nodes = []
    cpu = 0
    for i in range(count):
        if i in memory_only:
            nodes.append(FakeNode(i, memory_gib * GIB_KB, "", {}))
            continue
        cpus = f"{cpu}-{cpu + cpus_per_node - 1}" if cpus_per_node > 1 else str(cpu)
        cpu += cpus_per_node
        nodes.append(FakeNode(i, memory_gib * GIB_KB, cpus, dict(pages)))
    return nodes


def power9_nodes() -> list[FakeNode]:
    """An IBM POWER9 with NVIDIA V100s: CPU nodes 0 and 8, GPU memory as CPU-less nodes 250-255."""
    cpu = {0: "0-79", 8: "80-159"}
    ids = [0, 8, 250, 251, 252, 253, 254, 255]
    nodes = []
    for n in ids:
        row = [10 if m == n else (40 if (n in cpu) == (m in cpu) else 80) for m in ids]
        pages = {HP_2M: (256, 256)} if n in cpu else {}
        memory = (256 if n in cpu else 16) * GIB_KB
        nodes.append(FakeNode(n, memory, cpu.get(n, ""), pages, row, hugepages_dir=n in cpu))
    return nodes


def machine_tree(
    root: Path, count: int, *, memory_gib: int = 16, memory_only: Sequence[int] = ()
) -> Path:
    """Write a standard ``count``-node machine (1, 2, 4, 8 and 12 are used by the tests)."""
    return write_sysfs(root, standard_nodes(count, memory_gib=memory_gib, memory_only=memory_only))
