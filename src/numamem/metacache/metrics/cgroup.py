"""Reading container cgroups under ``--cgroup-root`` (default ``/sys/fs/cgroup``).

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

Placement (:mod:`numamem.metacache.metrics.placement`) reads ``memory.numa_stat``,
the hugetlb controller's ``hugetlb.<size>.numa_stat`` (:func:`read_hugetlb_numa_stats`)
and the enforced node list (v1 ``cpuset.effective_mems``, or ``cpuset.mems`` on
kernels without it, in the cpuset hierarchy; v2 ``cpuset.mems.effective``) and
may write ``cpuset.mems`` (and, on v1, ``cpuset.memory_migrate``) through the
functions at the end of this module, which write nothing unless the directory,
symlinks resolved, is a container's inside ``kubepods`` or ``kubepods.slice`` of
the controller (:func:`write_cgroup_file`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import PATH_QUOTE_BYTES, CgroupFormatError, CgroupPathError, quote
from numamem.metacache.metrics.numastat import V1_FORMAT, NumaStat, parse_mems, parse_numa_stat

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


@dataclass
class RawSample:
    """Counters and gauges read from one container's cgroup at one instant."""

    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    """cumulative values turned into rates: cpu_ns, user_ns, sys_ns"""


def sample(dirs: CgroupDirs, page_size: int, clk_tck: int) -> RawSample:
    """Read every supported file. A missing *directory* raises FileNotFoundError (the
    container is gone); a missing optional file only leaves its metrics out."""
    if not dirs.memory.is_dir() and not dirs.cpuacct.is_dir():
        raise FileNotFoundError(str(dirs.memory))
    s = RawSample()
    if dirs.mode == V2:
        _sample_v2(dirs.memory, s)
    else:
        _sample_v1(dirs, s, page_size, clk_tck)
    if dirs.pressure is not None and (dirs.pressure / "memory.pressure").exists():
        s.gauges["mem.psiavg60.container"] = read_psi_avg60(dirs.pressure / "memory.pressure")
    return s


def _sample_v2(d: Path, s: RawSample) -> None:
    g = s.gauges
    if (d / "cpu.stat").exists():
        stat = read_keyed(d / "cpu.stat")
        if "usage_usec" in stat:
            s.counters["cpu_ns"] = stat["usage_usec"] * 1000
        if "user_usec" in stat:
            s.counters["user_ns"] = stat["user_usec"] * 1000
        if "system_usec" in stat:
            s.counters["sys_ns"] = stat["system_usec"] * 1000
        for key, metric in (
            ("nr_throttled", "cpu.nr.throttled.container"),
            ("nr_periods", "cpu.nr.period.container"),
            ("throttled_usec", "cpu.throttled.time.container"),
        ):
            if key in stat:
                g[metric] = stat[key]
    if (d / "cpu.max").exists():
        quota, period = read_cpu_max(d / "cpu.max")
        g["cpu.quota.container"] = quota
        g["cpu.period.container"] = period
        if quota > 0 and period > 0:
            g["cpu.limit.container"] = quota / period
    if (d / "cpu.weight").exists():
        g["cpu.share.container"] = read_int(d / "cpu.weight")
    if (d / "memory.current").exists():
        g["mem.usage.container"] = read_int(d / "memory.current")
    if (d / "memory.max").exists():
        g["mem.limit.container"] = read_int(d / "memory.max")
    if (d / "memory.swap.current").exists():
        g["mem.swap.container"] = read_int(d / "memory.swap.current")
    if (d / "memory.stat").exists():
        stat = read_keyed(d / "memory.stat")
        for key, metric in (
            ("anon", "mem.rss.container"),
            ("file", "mem.cache.container"),
            ("shmem", "mem.shmem.container"),
            ("file_dirty", "mem.dirty.container"),
            ("file_writeback", "mem.writeback.container"),
            ("file_mapped", "mem.mapped.container"),
            ("pgfault", "mem.pgfault.container"),
            ("pgmajfault", "mem.pgmajfault.container"),
            ("kernel", "mem.usage.kern.container"),
        ):
            if key in stat:
                g[metric] = stat[key]
    if (d / "memory.events").exists():
        events = read_keyed(d / "memory.events")
        if "oom_kill" in events:
            g["mem.oom.container"] = events["oom_kill"]
    if (d / "memory.numa_stat").exists():
        numa = read_numa_stat(d / "memory.numa_stat", 1)
        nodes = set(numa.line("anon")) | set(numa.line("file"))
        for node in nodes:
            anon = numa.line("anon").get(node, 0)
            file = numa.line("file").get(node, 0)
            g[f"mem.anon.numa.container.{node}"] = anon
            g[f"mem.file.numa.container.{node}"] = file
            g[f"mem.total.numa.container.{node}"] = anon + file


def _sample_v1(dirs: CgroupDirs, s: RawSample, page_size: int, clk_tck: int) -> None:
    g = s.gauges
    acct, cpu, mem = dirs.cpuacct, dirs.cpu, dirs.memory
    if (acct / "cpuacct.usage").exists():
        s.counters["cpu_ns"] = read_int(acct / "cpuacct.usage")
    if (acct / "cpuacct.usage_user").exists() and (acct / "cpuacct.usage_sys").exists():
        s.counters["user_ns"] = read_int(acct / "cpuacct.usage_user")
        s.counters["sys_ns"] = read_int(acct / "cpuacct.usage_sys")
    elif (acct / "cpuacct.stat").exists():
        stat = read_keyed(acct / "cpuacct.stat")
        if "user" in stat and "system" in stat:
            s.counters["user_ns"] = stat["user"] * 10**9 / clk_tck
            s.counters["sys_ns"] = stat["system"] * 10**9 / clk_tck
    if (cpu / "cpu.cfs_quota_us").exists() and (cpu / "cpu.cfs_period_us").exists():
        quota, period = read_int(cpu / "cpu.cfs_quota_us"), read_int(cpu / "cpu.cfs_period_us")
        g["cpu.quota.container"] = quota
        g["cpu.period.container"] = period
        if period > 0:
            g["cpu.limit.container"] = quota / period  # katalyst does not special-case -1 here
    if (cpu / "cpu.shares").exists():
        g["cpu.share.container"] = read_int(cpu / "cpu.shares")
    if (cpu / "cpu.stat").exists():
        stat = read_keyed(cpu / "cpu.stat")
        for key, metric in (
            ("nr_throttled", "cpu.nr.throttled.container"),
            ("nr_periods", "cpu.nr.period.container"),
        ):
            if key in stat:
                g[metric] = stat[key]
        if "throttled_time" in stat:
            g["cpu.throttled.time.container"] = stat["throttled_time"] / 1000
    if (mem / "memory.usage_in_bytes").exists():
        g["mem.usage.container"] = read_int(mem / "memory.usage_in_bytes")
    if (mem / "memory.limit_in_bytes").exists():
        g["mem.limit.container"] = read_int(mem / "memory.limit_in_bytes")
    if (mem / "memory.kmem.usage_in_bytes").exists():
        g["mem.usage.kern.container"] = read_int(mem / "memory.kmem.usage_in_bytes")
    if (mem / "memory.stat").exists():
        stat = read_keyed(mem / "memory.stat")
        for key, metric in (
            ("total_rss", "mem.rss.container"),
            ("total_cache", "mem.cache.container"),
            ("total_shmem", "mem.shmem.container"),
            ("dirty", "mem.dirty.container"),
            ("writeback", "mem.writeback.container"),
            ("total_mapped_file", "mem.mapped.container"),
            ("pgfault", "mem.pgfault.container"),
            ("pgmajfault", "mem.pgmajfault.container"),
            ("total_swap", "mem.swap.container"),
        ):
            if key in stat:
                g[metric] = stat[key]
    if (mem / "memory.oom_control").exists():
        control = read_keyed(mem / "memory.oom_control")
        if "oom_kill" in control:
            g["mem.oom.container"] = control["oom_kill"]
    if (mem / "memory.numa_stat").exists():
        numa = read_numa_stat(mem / "memory.numa_stat", page_size)
        for stat_name, metric in (
            ("total", "mem.total.numa.container"),
            ("anon", "mem.anon.numa.container"),
            ("file", "mem.file.numa.container"),
        ):
            for node, value in numa.line(stat_name).items():
                g[f"{metric}.{node}"] = value


def page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


# --- placement: the enforced NUMA nodes, and writing them -------------------------------------


def enforced_mems_file(dirs: CgroupDirs) -> Path:
    """The file holding the nodes the kernel enforces for the cgroup."""
    if dirs.mode == V2:
        return dirs.cpuset / "cpuset.mems.effective"
    effective = dirs.cpuset / "cpuset.effective_mems"
    return effective if effective.exists() else dirs.cpuset / "cpuset.mems"


def read_enforced_mems(dirs: CgroupDirs) -> frozenset[int] | None:
    """The enforced nodes, or None when the cgroup has no such file (no cpuset controller)."""
    path = enforced_mems_file(dirs)
    try:
        text = read_small(path)
    except FileNotFoundError:
        return None
    return parse_mems(text, str(path))


def cpuset_controller(root: Path, mode: str) -> Path:
    """The directory the cpuset hierarchy starts at: the root on v2, ``<root>/cpuset`` on v1."""
    return root if mode == V2 else _v1_controller(root, "cpuset")


_WRITABLE = frozenset({"cpuset.mems", "cpuset.memory_migrate"})
_CONTAINER_TOPS = ("kubepods", "kubepods.slice")


def _real_dir(fd: int, directory: Path) -> str:
    """The real path of the open directory ``fd`` (what it is, not what its name says now)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the name resolved now (open to a rename in between)
        return os.path.realpath(directory)


def check_container_dir(controller: Path, real: str) -> None:
    """Raise :class:`~numamem.errors.CgroupPathError` unless ``real`` (a resolved directory)
    is a container's (or a pod's) cgroup: at least two levels inside
    ``<controller>/kubepods`` or ``<controller>/kubepods.slice``, the controller resolved."""
    base = Path(os.path.realpath(controller))
    path = Path(real)
    for top in _CONTAINER_TOPS:
        if path.is_relative_to(base / top) and len(path.relative_to(base / top).parts) >= 2:
            return
    raise CgroupPathError(
        f"refusing to write in {quote(real, limit=PATH_QUOTE_BYTES)}: not a container's cgroup "
        f"inside {base}/kubepods or {base}/kubepods.slice (a symlink or a hostile id; check "
        "--cgroup-root and the container's directory)"
    )


def write_cgroup_file(controller: Path, directory: Path, name: str, text: str) -> Path:
    """Write ``text`` to the existing file ``name`` (``cpuset.mems`` or
    ``cpuset.memory_migrate``) of the cgroup ``directory``, in one write; returns the file.

    Before anything is written, the directory, opened (so that it cannot be swapped
    afterwards), must resolve to a container's cgroup inside the controller's
    ``kubepods`` tree (:func:`check_container_dir`); the file is opened without following
    a symlink and never created. An OSError names the file."""
    if name not in _WRITABLE:
        raise ValueError(f"numamem never writes {quote(name)}")
    path = directory / name
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(directory)) from None
    try:
        check_container_dir(controller, _real_dir(dir_fd, directory))
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from None
        try:
            os.write(fd, text.encode("ascii"))
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from None
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return path


def enable_memory_migrate(root: Path, dirs: CgroupDirs) -> bool:
    """v1: set ``cpuset.memory_migrate`` to 1 (so a new ``cpuset.mems`` moves the pages the
    tasks already have); True when this call changed it. v2 always migrates."""
    path = dirs.cpuset / "cpuset.memory_migrate"
    if dirs.mode == V2 or not path.exists() or read_small(path).strip() == "1":
        return False
    write_cgroup_file(cpuset_controller(root, dirs.mode), dirs.cpuset, path.name, "1\n")
    return True


def write_mems(root: Path, dirs: CgroupDirs, nodes: frozenset[int]) -> Path:
    """Write ``cpuset.mems`` (exactly ``nodes``, which must not be empty); returns the file."""
    if not nodes:
        raise ValueError("refusing to write an empty cpuset.mems")
    return write_cgroup_file(
        cpuset_controller(root, dirs.mode), dirs.cpuset, "cpuset.mems", format_cpulist(nodes) + "\n"
    )


def restore_mems(root: Path, dirs: CgroupDirs, text: str) -> Path:
    """Write back a ``cpuset.mems`` value read before a write (it may be empty: on v2 that
    means the parent's nodes). It must be a node list; returns the file."""
    nodes = parse_mems(text, str(dirs.cpuset / "cpuset.mems"))
    return write_cgroup_file(
        cpuset_controller(root, dirs.mode),
        dirs.cpuset,
        "cpuset.mems",
        format_cpulist(nodes) + "\n",
    )
