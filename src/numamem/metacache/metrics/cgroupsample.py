"""One sample of a container's cgroup counters, for the metrics collector: v2, or v1 (and hybrid).

:func:`sample` reads every supported file of the directories
:func:`~numamem.metacache.metrics.cgroup.resolve` found (cpu usage and throttling, quota
and shares, memory usage, limit, swap, ``memory.stat``, OOM kills, per-node usage from
``memory.numa_stat``, and on hybrid hosts memory pressure from the unified tree) into a
:class:`RawSample` named by katalyst's metric names. Cumulative counters stay counters
(the collector turns them into rates). A missing container directory raises
FileNotFoundError (the container is gone); a missing optional file only leaves its metrics
out; a malformed one raises what the reader raises. Reads only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from numamem.metacache.metrics.cgroup import (
    V2,
    CgroupDirs,
    read_cpu_max,
    read_int,
    read_keyed,
    read_numa_stat,
    read_psi_avg60,
)


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


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")
