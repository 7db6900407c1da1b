"""Fake cgroup trees (v1, v2, hybrid; cgroupfs and systemd drivers) for collector tests.

``write_container(root, mode, driver, qos, pod_uid, container_id, values)``
writes the files the collector reads, with the values of a :class:`CgroupValues`,
and returns the container's relative cgroup path. Call it again with new values
to advance the counters between two samples.

The cpuset files (v1: the ``cpuset`` controller's ``cpuset.mems``,
``cpuset.effective_mems``, ``cpuset.memory_migrate``; v2: ``cpuset.mems``,
``cpuset.mems.effective``) are written when ``CgroupValues.mems`` is not None.
The effective file is a symlink to ``cpuset.mems``, so a write of ``cpuset.mems``
shows in it as on a kernel whose parent cgroups allow every node; with
``effective`` set it is a file of its own that a write does not change. On v2
the parent (the pod's cgroup) gets a ``cpuset.mems.effective`` too
(``parent_effective``, every node by default).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

V1, V2, HYBRID = "v1", "v2", "hybrid"
CGROUPFS, SYSTEMD = "cgroupfs", "systemd"
PAGE = 4096


@dataclass
class CgroupValues:
    usage_ns: int = 0
    user_ns: int = 0
    sys_ns: int = 0
    quota_us: int = -1
    period_us: int = 100000
    shares: int = 1024
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_ns: int = 0
    memory_usage: int = 0
    memory_limit: int | None = None
    rss: int = 0
    cache: int = 0
    shmem: int = 0
    dirty: int = 0
    writeback: int = 0
    mapped: int = 0
    pgfault: int = 0
    pgmajfault: int = 0
    swap: int = 0
    oom_kill: int = 0
    numa: dict[int, tuple[int, int]] = field(default_factory=dict)
    """NUMA node -> (anon bytes, file bytes)"""
    psi_avg60: float = 0.0
    numa_extra: dict[str, dict[int, int]] = field(default_factory=dict)
    """More ``memory.numa_stat`` lines, v2 only (name -> node -> bytes), e.g. shmem"""
    mems: str | None = None
    """``cpuset.mems`` (a node list; "" is empty); None: no cpuset files (no controller)"""
    effective: str | None = None
    """The effective node list when it is not ``mems`` itself (see the module docstring)"""
    parent_effective: str = "0-63"
    """v2: the parent's (the pod's) ``cpuset.mems.effective``, which enforcement checks"""
    hugetlb: dict[str, dict[int, int]] = field(default_factory=dict)
    """Huge page size (``2MB``) -> node -> bytes: the hugetlb controller's
    ``hugetlb.<size>.numa_stat`` (v1 in ``<root>/hugetlb``; none when empty)"""


def relative_path(
    driver: str, qos: str, pod_uid: str, container_id: str, runtime: str = "containerd"
) -> str:
    if driver == CGROUPFS:
        parent = "kubepods" if qos == "guaranteed" else f"kubepods/{qos}"
        return f"{parent}/pod{pod_uid}/{container_id}"
    uid = pod_uid.replace("-", "_")
    prefix = {"containerd": "cri-containerd-", "cri-o": "crio-", "docker": "docker-"}[runtime]
    if qos == "guaranteed":
        parent = f"kubepods.slice/kubepods-pod{uid}.slice"
    else:
        parent = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"
    return f"{parent}/{prefix}{container_id}.scope"


def _write(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_text(content)


def _write_cpuset(directory: Path, effective_name: str, v: CgroupValues, v1: bool) -> None:
    if v.mems is None:
        return
    files = {"cpuset.mems": f"{v.mems}\n"}
    if v1 and not (directory / "cpuset.memory_migrate").exists():
        files["cpuset.memory_migrate"] = "0\n"
    _write(directory, files)
    effective = directory / effective_name
    if effective.is_symlink() or effective.exists():
        effective.unlink()
    if v.effective is None:
        effective.symlink_to("cpuset.mems")
    else:
        effective.write_text(f"{v.effective}\n")


def _write_hugetlb(directory: Path, v: CgroupValues, v1: bool) -> None:
    if v.hugetlb:
        _write(
            directory,
            {
                f"hugetlb.{size}.numa_stat": hugetlb_numa_stat(nodes, v1)
                for size, nodes in v.hugetlb.items()
            },
        )


def numa_stat_v2(numa: dict[int, tuple[int, int]], extra: dict[str, dict[int, int]]) -> str:
    """A v2 ``memory.numa_stat``: anon and file lines (bytes) and the ``extra`` lines."""
    nodes = sorted(numa)
    lines = {"anon": {n: numa[n][0] for n in nodes}, "file": {n: numa[n][1] for n in nodes}}
    lines.update(extra)
    return "".join(
        name + " " + " ".join(f"N{n}={v}" for n, v in sorted(values.items())) + "\n"
        for name, values in lines.items()
    )


def hugetlb_numa_stat(nodes: dict[int, int], v1: bool) -> str:
    """A ``hugetlb.<size>.numa_stat`` as the kernel writes it (bytes; v1 adds the
    hierarchical line, here the same: no descendants)."""
    line = f"total={sum(nodes.values())} " + " ".join(f"N{n}={b}" for n, b in sorted(nodes.items()))
    return f"{line}\n" + (f"hierarchical_{line}\n" if v1 else "")


def write_container(
    root: Path,
    mode: str,
    driver: str,
    qos: str,
    pod_uid: str,
    container_id: str,
    values: CgroupValues,
    runtime: str = "containerd",
) -> str:
    rel = relative_path(driver, qos, pod_uid, container_id, runtime)
    v = values
    pressure = f"some avg10=0.00 avg60={v.psi_avg60:.2f} avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    if mode == V2:
        (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
        _write(
            root / rel,
            {
                "cpu.stat": f"usage_usec {v.usage_ns // 1000}\nuser_usec {v.user_ns // 1000}\nsystem_usec {v.sys_ns // 1000}\n"
                f"nr_periods {v.nr_periods}\nnr_throttled {v.nr_throttled}\nthrottled_usec {v.throttled_ns // 1000}\n",
                "cpu.max": f"{'max' if v.quota_us < 0 else v.quota_us} {v.period_us}\n",
                "cpu.weight": "100\n",
                "memory.current": f"{v.memory_usage}\n",
                "memory.max": f"{'max' if v.memory_limit is None else v.memory_limit}\n",
                "memory.swap.current": f"{v.swap}\n",
                "memory.stat": f"anon {v.rss}\nfile {v.cache}\nkernel 0\nshmem {v.shmem}\nfile_mapped {v.mapped}\n"
                f"file_dirty {v.dirty}\nfile_writeback {v.writeback}\npgfault {v.pgfault}\npgmajfault {v.pgmajfault}\n",
                "memory.events": f"low 0\nhigh 0\nmax 0\noom 0\noom_kill {v.oom_kill}\n",
                "memory.numa_stat": numa_stat_v2(v.numa, v.numa_extra),
                "memory.pressure": pressure,
            },
        )
        _write_cpuset(root / rel, "cpuset.mems.effective", v, v1=False)
        if v.mems is not None:
            _write((root / rel).parent, {"cpuset.mems.effective": f"{v.parent_effective}\n"})
        _write_hugetlb(root / rel, v, v1=False)
        return rel
    limit = (1 << 63) - 4096 if v.memory_limit is None else v.memory_limit
    _write(
        root / "cpu,cpuacct" / rel,
        {
            "cpuacct.usage": f"{v.usage_ns}\n",
            "cpuacct.usage_user": f"{v.user_ns}\n",
            "cpuacct.usage_sys": f"{v.sys_ns}\n",
            "cpu.cfs_quota_us": f"{v.quota_us}\n",
            "cpu.cfs_period_us": f"{v.period_us}\n",
            "cpu.shares": f"{v.shares}\n",
            "cpu.stat": f"nr_periods {v.nr_periods}\nnr_throttled {v.nr_throttled}\nthrottled_time {v.throttled_ns}\n",
        },
    )
    pages = {n: (a // PAGE, f // PAGE) for n, (a, f) in v.numa.items()}
    nodes = sorted(pages)

    def line(name: str, values: dict[int, int]) -> str:
        return (
            f"{name}={sum(values.values())} " + " ".join(f"N{n}={values[n]}" for n in nodes) + "\n"
        )

    _write(
        root / "memory" / rel,
        {
            "memory.usage_in_bytes": f"{v.memory_usage}\n",
            "memory.limit_in_bytes": f"{limit}\n",
            "memory.stat": f"cache {v.cache}\nrss {v.rss}\ndirty {v.dirty}\nwriteback {v.writeback}\npgfault {v.pgfault}\n"
            f"pgmajfault {v.pgmajfault}\ntotal_cache {v.cache}\ntotal_rss {v.rss}\ntotal_shmem {v.shmem}\n"
            f"total_mapped_file {v.mapped}\ntotal_swap {v.swap}\n",
            "memory.oom_control": f"oom_kill_disable 0\nunder_oom 0\noom_kill {v.oom_kill}\n",
            "memory.numa_stat": line("total", {n: a + f for n, (a, f) in pages.items()})
            + line("file", {n: f for n, (a, f) in pages.items()})
            + line("anon", {n: a for n, (a, f) in pages.items()})
            + line("hierarchical_total", {n: a + f for n, (a, f) in pages.items()}),
        },
    )
    _write_cpuset(root / "cpuset" / rel, "cpuset.effective_mems", v, v1=True)
    _write_hugetlb(root / "hugetlb" / rel, v, v1=True)
    if mode == HYBRID:
        _write(root / "unified", {"cgroup.controllers": "hugetlb\n"})
        _write(root / "unified" / rel, {"memory.pressure": pressure})
    return rel


def remove_container(root: Path, rel: str) -> None:
    """Remove every directory of the container (it stopped)."""
    for base in (
        root,
        root / "cpu,cpuacct",
        root / "memory",
        root / "cpuset",
        root / "hugetlb",
        root / "unified",
    ):
        shutil.rmtree(base / rel, ignore_errors=True)
