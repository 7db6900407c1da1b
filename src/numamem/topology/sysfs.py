"""Discovery of the NUMA topology from sysfs (``--sysfs-root``, default ``/sys``).

Reads, for every ``devices/system/node/node<N>`` (numeric order):

* ``meminfo`` line ``Node N MemTotal: X kB`` -> X * 1024 bytes;
* ``hugepages/hugepages-<size>kB/{nr_hugepages,free_hugepages}`` for every size;
* ``cpulist`` (Linux list syntax; empty for memory-only nodes such as CXL/HBM);
* ``distance`` (one row of distances, one per node).

Odd machines:

* no ``node*`` directory (a kernel without NUMA): one node 0 whose memory is
  the machine's total memory (psutil) and whose CPUs are all online CPUs, with
  a warning. (cadvisor reports memory 0 here, which makes the Static policy's
  allocatable 0 or wrap around; numamem deliberately does not.)
* a missing ``hugepages`` directory: no hugepages on that node, not an error;
* a missing ``distance`` file: no distances, with a warning;
* anything unparsable (``meminfo`` without MemTotal, a non-numeric distance or
  hugepage count, a bad cpulist, an unreadable file): :class:`TopologyError`
  naming the file and the bad content; the daemon refuses to start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import psutil

from numamem.cpuset import parse_cpulist
from numamem.errors import InvalidArgumentError, TopologyError
from numamem.logging import get_logger
from numamem.topology.machine import MAX_NUMA_ID, HugePagePool, Machine, NUMANode

_log = get_logger("topology")

NODE_DIR = Path("devices/system/node")
_NODE_RE = re.compile(r"^node(\d+)$")
_HUGEPAGES_RE = re.compile(r"^hugepages-(\d+)kB$")
_MEMTOTAL_RE = re.compile(r"MemTotal:\s*([0-9]+) kB")


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
                entries.append((int(match.group(1)), child))
    entries.sort()
    memory = (total_memory or (lambda: int(psutil.virtual_memory().total)))()
    if not entries:
        cpus = _fallback_cpus(root)
        _log.warning(
            "no NUMA nodes in sysfs; using one node 0 with the machine's total memory",
            path=str(node_root),
            memory_bytes=memory,
            cpus=len(cpus),
        )
        return Machine((NUMANode(0, memory, (), cpus, ()),), memory)
    nodes = []
    for node_id, path in entries:
        if node_id > MAX_NUMA_ID:
            raise TopologyError(
                f"{path}: NUMA node id {node_id} is above {MAX_NUMA_ID}; the topology manager's "
                "64-bit masks cannot represent it"
            )
        nodes.append(_read_node(node_id, path))
    return Machine(tuple(nodes), memory)


def read_free_hugepages(sysfs_root: str | Path, node_id: int, page_size_kb: int) -> int:
    """Live ``free_hugepages`` of one node and size (for GetMachineInfo)."""
    path = (
        Path(sysfs_root)
        / NODE_DIR
        / f"node{node_id}"
        / "hugepages"
        / f"hugepages-{page_size_kb}kB"
        / "free_hugepages"
    )
    return _read_count(path)


def _read_node(node_id: int, path: Path) -> NUMANode:
    meminfo = path / "meminfo"
    text = _read(meminfo)
    match = _MEMTOTAL_RE.search(text)
    if not match:
        raise TopologyError(f"{meminfo}: no 'MemTotal: <n> kB' line in {_excerpt(text)}")
    memory = int(match.group(1)) * 1024

    cpulist_path = path / "cpulist"
    cpu_text = _read(cpulist_path)
    try:
        cpus = tuple(parse_cpulist(cpu_text))
    except InvalidArgumentError as err:
        raise TopologyError(f"{cpulist_path}: {err}") from err

    hugepages: list[HugePagePool] = []
    hp_dir = path / "hugepages"
    if hp_dir.is_dir():
        for child in sorted(hp_dir.iterdir(), key=lambda p: p.name):
            hp_match = _HUGEPAGES_RE.match(child.name)
            if not hp_match:
                raise TopologyError(f"{child}: unexpected entry, expected hugepages-<size>kB")
            size_kb = int(hp_match.group(1))
            if size_kb <= 0:
                raise TopologyError(f"{child}: hugepage size must be positive")
            hugepages.append(
                HugePagePool(
                    size_kb,
                    _read_count(child / "nr_hugepages"),
                    _read_count(child / "free_hugepages"),
                )
            )
        hugepages.sort(key=lambda p: p.page_size_kb)

    distance_path = path / "distance"
    distances: tuple[int, ...] = ()
    if distance_path.exists():
        dist_text = _read(distance_path)
        tokens = dist_text.split()
        for token in tokens:
            if not (token.isascii() and token.isdigit()):
                raise TopologyError(
                    f"{distance_path}: cannot convert {token} to int (content {_excerpt(dist_text)})"
                )
        distances = tuple(int(t) for t in tokens)
    else:
        _log.warning("NUMA node has no distance file; distances unknown", path=str(distance_path))
    return NUMANode(node_id, memory, tuple(hugepages), cpus, distances)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from err


def _read_count(path: Path) -> int:
    text = _read(path)
    body = text.strip()
    if not (body.isascii() and body.isdigit()):
        raise TopologyError(f"{path}: expected a page count, got {_excerpt(text)}")
    return int(body)


def _fallback_cpus(root: Path) -> tuple[int, ...]:
    online = root / "devices/system/cpu/online"
    if online.exists():
        text = _read(online)
        try:
            return tuple(parse_cpulist(text))
        except InvalidArgumentError as err:
            raise TopologyError(f"{online}: {err}") from err
    return tuple(range(os.cpu_count() or 1))


def _excerpt(text: str, limit: int = 80) -> str:
    flat = text.strip().replace("\n", "\\n")
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")
