"""Finding container cgroups under ``--cgroup-root`` (default ``/sys/fs/cgroup``); reading files.

Modes: **v2** when ``<root>/cgroup.controllers`` exists (a unified hierarchy);
otherwise **v1**, with one directory per controller (``cpu,cpuacct`` or
``cpuacct``, ``cpu``, ``memory``); a v1 host that also mounts cgroup2 at
``<root>/unified`` is **hybrid**: counters come from v1, pressure (PSI) from
the unified tree.

Container directories (decision D8): the container id (``containerd://<id>``,
``cri-o://<id>``, ``docker://<id>`` or a bare id) is looked up in the kubepods
layouts of both cgroup drivers, for the guaranteed (directly under kubepods),
burstable and besteffort QoS classes::

    cgroupfs: kubepods[/burstable|/besteffort]/pod<uid>/<id>
    systemd:  kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_with_underscores>.slice/<runtime>-<id>.scope

The first existing directory wins. A container without an id has no cgroup
(no metrics), never a guess; nor has one whose pod uid or container id is not
one path component (:func:`candidate_paths`): client ids never lead out of the
``kubepods`` tree.

The readers of this module read one file each (a number, ``key value`` lines,
``memory.numa_stat``, the hugetlb controller's ``hugetlb.<size>.numa_stat``, memory
pressure), never more than a bound (:data:`MAX_SMALL_FILE_BYTES`,
:data:`MAX_NUMA_STAT_BYTES`): a larger or non-ASCII file, or a malformed numa_stat, is a
:class:`~numamem.errors.CgroupFormatError` naming the file. A whole sample of a container's counters is
:mod:`numamem.metacache.metrics.cgroupsample`; its ``cpuset.mems``, read and written,
:mod:`numamem.metacache.metrics.cpusetfiles`. Reads only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from numamem.errors import CgroupFormatError
from numamem.metacache.metrics.numastat import V1_FORMAT, NumaStat, parse_numa_stat

V1, V2, HYBRID = "v1", "v2", "hybrid"
UNLIMITED = (1 << 63) - 1  # what "max" and v1's huge page-aligned limit mean
_RUNTIME_PREFIXES = {"containerd": "cri-containerd-", "cri-o": "crio-", "docker": "docker-"}
_QOS = ("", "burstable", "besteffort")


def detect_mode(root: Path) -> str:
    if (root / "cgroup.controllers").exists():
        return V2
    if (root / "unified" / "cgroup.controllers").exists():
        return HYBRID
    return V1


def split_container_id(container_id: str) -> tuple[str | None, str]:
    """``containerd://abc`` -> ("containerd", "abc"); a bare id has no runtime."""
    runtime, sep, rest = container_id.partition("://")
    return (runtime, rest) if sep else (None, container_id)


def candidate_paths(pod_uid: str, container_id: str) -> list[str]:
    """Relative cgroup paths to try, in order (cgroupfs first, then systemd).

    Both ids come from clients, so each must be one path component: none for a pod
    uid that is empty or has a ``/`` or NUL, or a container id that is empty, ``.``,
    ``..`` or has a ``/`` or NUL. A Kubernetes pod uid is a UUID (hex digits and
    ``-``; a static pod's is whatever its manifest says, hashed hex otherwise) and the
    kubelet puts it in the cgroup name as is (cgroupfs) or with each ``-`` made ``_``
    (systemd, whose slice names use ``-`` as the hierarchy separator): one component in
    both, so only a ``/`` could leave it (``pod..`` is a plain name, and ``.`` or ``..``
    alone can never be a uid's component, which always starts with ``pod`` or
    ``kubepods-``). Ids with control characters (not :meth:`str.isprintable`) name no
    cgroup either: real ones are hex digits and ``-``."""
    runtime, cid = split_container_id(container_id)
    if not cid or "/" in cid or "\0" in cid or cid in (".", ".."):
        return []
    if not pod_uid or "/" in pod_uid or "\0" in pod_uid:
        return []
    if not (pod_uid.isprintable() and cid.isprintable()):
        return []  # no runtime or kubelet names a cgroup so; a path in a message stays one line
    paths = []
    for qos in _QOS:
        parent = f"kubepods/{qos}" if qos else "kubepods"
        paths.append(f"{parent}/pod{pod_uid}/{cid}")
    prefixes = (
        [_RUNTIME_PREFIXES[runtime]]
        if runtime in _RUNTIME_PREFIXES
        else list(_RUNTIME_PREFIXES.values())
    )
    uid = pod_uid.replace("-", "_")
    for qos in _QOS:
        if qos:
            parent = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"
        else:
            parent = f"kubepods.slice/kubepods-pod{uid}.slice"
        paths.extend(f"{parent}/{prefix}{cid}.scope" for prefix in prefixes)
    return paths


@dataclass
class CgroupDirs:
    """Where one container's files are: per controller on v1, one directory on v2."""

    mode: str
    cpu: Path
    cpuacct: Path
    memory: Path
    pressure: Path | None
    cpuset: Path
    hugetlb: Path
    """The hugetlb controller's directory (v1 ``<root>/hugetlb/...``; v2 the cgroup's)."""


def _v1_controller(root: Path, *names: str) -> Path:
    for name in names:
        if (root / name).is_dir():
            return root / name
    return root / names[0]


def resolve(root: Path, mode: str, pod_uid: str, container_id: str) -> CgroupDirs | None:
    """The container's cgroup directories, or None when no layout matches."""
    if mode == V2:
        for rel in candidate_paths(pod_uid, container_id):
            if (root / rel).is_dir():
                d = root / rel
                return CgroupDirs(mode, d, d, d, d, d, d)
        return None
    memory = _v1_controller(root, "memory")
    cpuacct = _v1_controller(root, "cpu,cpuacct", "cpuacct", "cpuacct,cpu")
    cpu = _v1_controller(root, "cpu,cpuacct", "cpu", "cpuacct,cpu")
    for rel in candidate_paths(pod_uid, container_id):
        if (memory / rel).is_dir() or (cpuacct / rel).is_dir():
            pressure = (
                root / "unified" / rel
                if mode == HYBRID and (root / "unified" / rel).is_dir()
                else None
            )
            cpuset = _v1_controller(root, "cpuset") / rel
            hugetlb = _v1_controller(root, "hugetlb") / rel
            return CgroupDirs(
                mode, cpu / rel, cpuacct / rel, memory / rel, pressure, cpuset, hugetlb
            )
    return None


def path_dirs(root: Path, mode: str, rel: str) -> CgroupDirs:
    """The directories of an arbitrary cgroup path (e.g. from ``/proc/<pid>/cgroup``)."""
    rel = rel.lstrip("/")
    if mode == V2:
        d = root / rel
        return CgroupDirs(mode, d, d, d, d, d, d)
    pressure = root / "unified" / rel if mode == HYBRID else None
    return CgroupDirs(
        mode,
        _v1_controller(root, "cpu,cpuacct", "cpu") / rel,
        _v1_controller(root, "cpu,cpuacct", "cpuacct") / rel,
        _v1_controller(root, "memory") / rel,
        pressure,
        _v1_controller(root, "cpuset") / rel,
        _v1_controller(root, "hugetlb") / rel,
    )


# --- file parsing ---------------------------------------------------------------------------


def read_int(path: Path) -> int:
    """A single number; ``max`` is :data:`UNLIMITED`."""
    text = read_small(path).strip()
    return UNLIMITED if text == "max" else int(text)


def read_keyed(path: Path) -> dict[str, int]:
    """``key value`` lines (``memory.stat``, ``cpu.stat``, ``memory.events``)."""
    out = {}
    for line in read_small(path).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def read_cpu_max(path: Path) -> tuple[int, int]:
    """v2 ``cpu.max``: (quota or -1 for ``max``, period)."""
    quota, _, period = read_small(path).strip().partition(" ")
    return (-1 if quota == "max" else int(quota)), int(period or 100000)


MAX_NUMA_STAT_BYTES = 1 << 20
MAX_SMALL_FILE_BYTES = 1 << 16
"""The most bytes read of any other cgroup file (``memory.stat`` is about 3 KiB): a larger
one is refused, not read whole (issue 38; a wrong --cgroup-root may name any file)."""


def read_small(path: Path, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """A cgroup file of at most ``limit`` bytes (a node list, a flag) as ASCII text; a larger
    or undecodable one is a :class:`~numamem.errors.CgroupFormatError` naming the file."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CgroupFormatError(f"{path}: larger than {limit} bytes")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise CgroupFormatError(f"{path}: not ASCII text") from None


def read_numa_stat(path: Path, page_size: int) -> NumaStat:
    """``memory.numa_stat`` in either format, in bytes (:func:`~numastat.parse_numa_stat`);
    a malformed or oversized file is a :class:`~numamem.errors.CgroupFormatError`."""
    return parse_numa_stat(read_small(path, MAX_NUMA_STAT_BYTES), str(path), page_size)


MAX_HUGETLB_FILES = 16
_HUGETLB_NUMA_STAT = re.compile(r"^hugetlb\.([0-9]+[KMG]B)\.numa_stat$")


def read_hugetlb_numa_stats(directory: Path) -> dict[str, Mapping[int, int]]:
    """Huge page size (``2MB``, ``1GB``: the kernel's names) -> node -> bytes of the cgroup's
    hugetlb pages in use, from each ``hugetlb.<size>.numa_stat`` (Linux 5.17 and later) of
    the hugetlb controller's ``directory``; {} when there is none (no hugetlb controller, an
    older kernel).

    The kernel writes ``total=<bytes> N0=<bytes> ...`` (v2), and on v1 first the cgroup's
    own pages, then ``hierarchical_total=...`` with its descendants', which is taken: the
    values are bytes, not pages. A malformed file is a
    :class:`~numamem.errors.CgroupFormatError` naming it."""
    try:
        with os.scandir(directory) as entries:
            sizes = {m.group(1): e.name for e in entries if (m := _HUGETLB_NUMA_STAT.match(e.name))}
    except FileNotFoundError:
        return {}
    if len(sizes) > MAX_HUGETLB_FILES:
        raise CgroupFormatError(
            f"{directory}: more than {MAX_HUGETLB_FILES} hugetlb.<size>.numa_stat files"
        )
    out: dict[str, Mapping[int, int]] = {}
    for size, name in sorted(sizes.items()):
        path = directory / name
        stat = read_numa_stat(path, 1)  # already bytes
        line = stat.lines.get("hierarchical_total", stat.lines.get("total"))
        if stat.format != V1_FORMAT or line is None:
            raise CgroupFormatError(f"{path}: no 'total=<bytes> N0=<bytes> ...' line")
        out[size] = line
    return out


def read_psi_avg60(path: Path) -> float:
    """``memory.pressure``: the ``some`` line's avg60."""
    for line in read_small(path).splitlines():
        if line.startswith("some "):
            for token in line.split()[1:]:
                key, _, value = token.partition("=")
                if key == "avg60":
                    return float(value)
    raise ValueError(f"{path}: no 'some ... avg60=' line")


def page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def cpuset_controller(root: Path, mode: str) -> Path:
    """The directory the cpuset hierarchy starts at: the root on v2, ``<root>/cpuset`` on v1."""
    return root if mode == V2 else _v1_controller(root, "cpuset")
