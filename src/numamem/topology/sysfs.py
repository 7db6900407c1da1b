"""Discovery of the NUMA topology from sysfs (``--sysfs-root``, default ``/sys``).

Reads, for every ``devices/system/node/node<N>`` (numeric order; ids are the
kernel's, sparse ones included: 0, 8, 250-255):

* ``meminfo`` line ``Node N MemTotal: X kB`` -> X * 1024 bytes;
* ``hugepages/hugepages-<size>kB/{nr_hugepages,free_hugepages}`` for every size;
* ``cpulist`` (Linux list syntax; empty for memory-only nodes such as GPU
  memory or CXL), or on kernels without it ``cpumap`` (32-bit hex words,
  comma-separated, most significant first);
* ``distance`` (one row of distances, one per node);
* the node kinds: ``devices/system/node/has_generic_initiator`` (a node list)
  and ``devices/virtual/memory_tiering/memory_tier<T>/nodelist``.

Every file is parsed as kernels write them across versions: trailing NUL
bytes and whitespace are ignored (Linux 5.15-rc1 ends bitmap files with
``\\n\\0``).

Bounds (issue 38: a short file must not name a large amount of work): every
file is read up to :data:`MAX_FILE_BYTES`; node ids are below
``cpuset.MAX_NUMA_NODES`` and CPU ids below ``cpuset.MAX_CPUS`` (a ``cpumap`` has
at most ``MAX_CPUS / 32`` words); a number has at most :data:`MAX_NUMBER_DIGITS`
digits. Beyond them the tree is no Linux machine's: :class:`TopologyError`.

Odd machines:

* no ``node*`` directory (a kernel without NUMA): one node 0 with the machine's
  memory (``total_memory``), the hugepage pools of ``kernel/mm/hugepages`` and
  the CPUs of the tree's ``devices/system/cpu/online`` (none, with a warning,
  when the tree has no such file: never the CPUs of the host running this).
  cadvisor reports memory 0 here, which makes the Static policy's allocatable
  0 or wrap around; numamem deliberately does not.
* a missing ``hugepages`` directory: no hugepages on that node, not an error;
* a missing ``distance`` file: no distances, with a warning;
* a node without ``meminfo``: memory 0, with a warning;
* suspicious but usable trees give warnings (:attr:`Machine.warnings`, logged
  once at start and shown by GetMachineInfo): several nodes with the same
  CPUs, a distance row whose length is not the number of nodes, a self
  distance that is not 10 or not the smallest of its row;
* anything unparsable (``meminfo`` without MemTotal, a non-numeric distance or
  hugepage count, a bad cpulist or cpumap, an unreadable file):
  :class:`TopologyError` naming the file and the bad content; the daemon
  refuses to start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from numamem.cpuset import MAX_CPUS, MAX_NUMA_NODES, format_cpulist, parse_cpulist
from numamem.errors import InvalidArgumentError, TopologyError, quote
from numamem.quantity import format_bytes_exact
from numamem.topology.machine import HugePagePool, Machine, NUMANode

NODE_DIR = Path("devices/system/node")
KERNEL_HUGEPAGES = Path("kernel/mm/hugepages")
MEMORY_TIERS = Path("devices/virtual/memory_tiering")
LOCAL_DISTANCE = 10
MAX_FILE_BYTES = 64 * 1024
"""The most bytes read of any sysfs file: the longest the kernel writes is a cpulist of
:data:`~numamem.cpuset.MAX_CPUS` CPUs with every other one online (``0,2,...,8190``: 20 KiB;
a ``distance`` row of 1024 nodes is 4 KiB). A larger file is no sysfs file (a wrong
``--sysfs-root``): refused, not read whole."""
MAX_NUMBER_DIGITS = 20
"""Digits of a page count, a size, a distance or a tier id: 2^64 has 20."""
_NODE_RE = re.compile(r"^node(\d{1,20})$")
_HUGEPAGES_RE = re.compile(r"^hugepages-(\d{1,20})kB$")
_TIER_RE = re.compile(r"^memory_tier(\d{1,20})$")
_MEMTOTAL_RE = re.compile(r"MemTotal:\s*([0-9]{1,20}) kB")
_TRAILING = "\x00 \t\r\n"


def discover(sysfs_root: str | Path, total_memory: Callable[[], int] | None = None) -> Machine:
    """Read the machine under ``sysfs_root``.

    ``total_memory`` (default: psutil's total) gives the machine's memory capacity,
    and the memory of node 0 on a kernel without NUMA directories.
    """
    root = Path(sysfs_root)
    node_root = root / NODE_DIR
    entries: list[tuple[int, Path]] = []
    if node_root.is_dir():
        for child in node_root.iterdir():
            match = _NODE_RE.match(child.name)
            if match and child.is_dir():
                if int(match.group(1)) >= MAX_NUMA_NODES:
                    raise TopologyError(
                        f"{child}: node id {match.group(1)} is not below {MAX_NUMA_NODES} "
                        "(MAX_NUMA_NODES, Linux's largest MAX_NUMNODES)"
                    )
                entries.append((int(match.group(1)), child))
    entries.sort()
    memory = (total_memory or (lambda: int(psutil.virtual_memory().total)))()
    warnings: list[str] = []
    if not entries:
        return _numa_less(root, memory)
    initiators = _node_list(node_root / "has_generic_initiator")
    tiers = _memory_tiers(root / MEMORY_TIERS)
    nodes = [
        _read_node(node_id, path, node_id in initiators, tiers.get(node_id), warnings)
        for node_id, path in entries
    ]
    warnings += _suspicious(nodes, node_root)
    return Machine(tuple(nodes), memory, tuple(warnings))


def read_free_hugepages(sysfs_root: str | Path, node_id: int, page_size_kb: int) -> int:
    """Live ``free_hugepages`` of one node and size (for GetMachineInfo); on a kernel without
    NUMA directories, the machine-wide pool of ``kernel/mm/hugepages``."""
    root = Path(sysfs_root)
    pool = f"hugepages-{page_size_kb}kB"
    per_node = root / NODE_DIR / f"node{node_id}" / "hugepages" / pool / "free_hugepages"
    if not per_node.exists() and not (root / NODE_DIR / f"node{node_id}").exists():
        return _read_count(root / KERNEL_HUGEPAGES / pool / "free_hugepages")
    return _read_count(per_node)


def _numa_less(root: Path, memory: int) -> Machine:
    warnings = [
        f"{root / NODE_DIR}: no NUMA nodes (a kernel without NUMA); using one node 0 with the "
        f"machine's memory, {format_bytes_exact(memory)}, and the pools of {root / KERNEL_HUGEPAGES}"
    ]
    online = root / "devices/system/cpu/online"
    cpus: tuple[int, ...] = ()
    if online.exists():
        cpus = tuple(_cpulist(online, MAX_CPUS, "CPU"))
    else:
        warnings.append(f"{online}: missing; node 0 has no CPUs")
    pools = _hugepage_pools(root / KERNEL_HUGEPAGES)
    return Machine((NUMANode(0, memory, pools, cpus, ()),), memory, tuple(warnings))


def _read_node(
    node_id: int,
    path: Path,
    generic_initiator: bool,
    memory_tier: int | None,
    warnings: list[str],
) -> NUMANode:
    meminfo = path / "meminfo"
    if meminfo.exists():
        text = _read(meminfo)
        match = _MEMTOTAL_RE.search(text)
        if not match:
            raise TopologyError(f"{meminfo}: no 'MemTotal: <n> kB' line in {_excerpt(text)}")
        memory = int(match.group(1)) * 1024
    else:
        memory = 0
        warnings.append(f"{meminfo}: missing; node {node_id} counts as having no memory")
    return NUMANode(
        node_id,
        memory,
        _hugepage_pools(path / "hugepages"),
        _node_cpus(path),
        _distances(path / "distance", warnings),
        generic_initiator=generic_initiator,
        memory_tier=memory_tier,
    )


def _node_cpus(path: Path) -> tuple[int, ...]:
    cpulist = path / "cpulist"
    if cpulist.exists() or not (path / "cpumap").exists():
        return tuple(_cpulist(cpulist, MAX_CPUS, "CPU"))
    return tuple(_cpumap(path / "cpumap"))


def _hugepage_pools(directory: Path) -> tuple[HugePagePool, ...]:
    if not directory.is_dir():
        return ()
    pools = []
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
        match = _HUGEPAGES_RE.match(child.name)
        if not match:
            raise TopologyError(f"{child}: unexpected entry, expected hugepages-<size>kB")
        size_kb = int(match.group(1))
        if size_kb <= 0:
            raise TopologyError(f"{child}: hugepage size must be positive")
        pools.append(
            HugePagePool(
                size_kb,
                _read_count(child / "nr_hugepages"),
                _read_count(child / "free_hugepages"),
            )
        )
    return tuple(sorted(pools, key=lambda p: p.page_size_kb))


def _distances(path: Path, warnings: list[str]) -> tuple[int, ...]:
    if not path.exists():
        warnings.append(f"{path}: missing; NUMA distances unknown")
        return ()
    text = _read(path)
    tokens = text.rstrip(_TRAILING).split()
    for token in tokens:
        if not (token.isascii() and token.isdigit()) or len(token) > MAX_NUMBER_DIGITS:
            raise TopologyError(
                f"{path}: cannot convert {quote(token, style='bare')} to int (content {_excerpt(text)})"
            )
    return tuple(int(t) for t in tokens)


def _suspicious(nodes: Sequence[NUMANode], node_root: Path) -> list[str]:
    """Warnings for usable trees a careful tool would question."""
    out = []
    by_cpus: dict[tuple[int, ...], list[int]] = {}
    for node in nodes:
        if node.cpus:
            by_cpus.setdefault(node.cpus, []).append(node.id)
    for cpus, ids in sorted(by_cpus.items(), key=lambda item: item[1]):
        if len(ids) > 1:
            out.append(
                f"nodes {', '.join(map(str, ids))} report the same CPUs ({format_cpulist(cpus)}) "
                "in cpulist; the firmware's NUMA description is probably wrong"
            )
    for i, node in enumerate(nodes):
        row = node.distances
        where = node_root / f"node{node.id}" / "distance"
        if not row:
            continue
        if len(row) != len(nodes):
            out.append(
                f"{where}: {len(row)} distances for {len(nodes)} NUMA nodes; distances are "
                "matched to nodes by position"
            )
            continue
        own = row[i]
        if own != LOCAL_DISTANCE or any(d <= own for j, d in enumerate(row) if j != i):
            out.append(
                f"{where}: the distance of node {node.id} to itself is {own}; the kernel's is "
                f"{LOCAL_DISTANCE} and smaller than every other ({' '.join(map(str, row))})"
            )
    return out


def _node_list(path: Path) -> set[int]:
    """A node list file (``has_generic_initiator``); empty when the kernel has none."""
    if not path.exists():
        return set()
    return set(_cpulist(path, MAX_NUMA_NODES, "NUMA node"))


def _memory_tiers(directory: Path) -> dict[int, int]:
    """node -> memory tier id, from ``memory_tier<T>/nodelist`` (kernels 6.1 and later)."""
    tiers: dict[int, int] = {}
    if not directory.is_dir():
        return tiers
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
        match = _TIER_RE.match(child.name)
        if match and (child / "nodelist").exists():
            for node in _cpulist(child / "nodelist", MAX_NUMA_NODES, "NUMA node"):
                tiers[node] = int(match.group(1))
    return tiers


def _cpulist(path: Path, limit: int, what: str) -> list[int]:
    """The ids of a list file, each below ``limit`` (at most ``limit`` ids, however long)."""
    text = _read(path)
    try:
        return parse_cpulist(text.rstrip(_TRAILING), limit, what)
    except InvalidArgumentError as err:
        raise TopologyError(f"{path}: {err}") from err


def _cpumap(path: Path) -> list[int]:
    """``cpumap``: 32-bit hex words separated by commas, the most significant word first."""
    text = _read(path)
    words = text.rstrip(_TRAILING).split(",")
    if len(words) > MAX_CPUS // 32:
        raise TopologyError(
            f"{path}: invalid cpumap {_excerpt(text)}: {len(words)} words name CPUs beyond "
            f"{MAX_CPUS} (MAX_CPUS, Linux's largest CONFIG_NR_CPUS)"
        )
    cpus: list[int] = []
    for index, word in enumerate(reversed(words)):
        token = word.strip()
        if not token or len(token) > 8 or any(c not in "0123456789abcdefABCDEF" for c in token):
            raise TopologyError(f"{path}: invalid cpumap {_excerpt(text)}: bad word {quote(token)}")
        value = int(token, 16)
        cpus.extend(index * 32 + bit for bit in range(32) if value >> bit & 1)
    return sorted(cpus)


def _read(path: Path) -> str:
    """The file as text, refused when longer than :data:`MAX_FILE_BYTES` (read no further)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from err
    if len(data) > MAX_FILE_BYTES:
        raise TopologyError(
            f"{path}: longer than {MAX_FILE_BYTES} bytes (MAX_FILE_BYTES), which no sysfs file "
            "of a Linux machine is: is --sysfs-root a sysfs tree?"
        )
    return data.decode("ascii", errors="replace")


def _read_count(path: Path) -> int:
    text = _read(path)
    body = text.rstrip(_TRAILING).strip()
    if not (body.isascii() and body.isdigit()) or len(body) > MAX_NUMBER_DIGITS:
        raise TopologyError(f"{path}: expected a page count, got {_excerpt(text)}")
    return int(body)


def _excerpt(text: str) -> str:
    return quote(text.strip(), limit=80)
