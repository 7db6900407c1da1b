"""Container metrics from fake cgroup trees: every mode, driver and QoS class; rates, expiry, errors."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.errors import FailedPreconditionError, NotFoundError
from numamem.metacache.metrics import cgroup, cgroupsample
from numamem.metacache.metrics.collector import Collector
from numamem.metacache.metrics.store import MetricStore, insurance_period_ns
from numamem.testing.cgroups import (
    CGROUPFS,
    HYBRID,
    SYSTEMD,
    V1,
    V2,
    CgroupValues,
    remove_container,
    write_container,
)

S = 10**9
POD = "6f1c2a9e-0000-4000-8000-000000000001"
CID = "0123456789abcdef"
MI = 1024**2


class Clock:
    def __init__(self, now: int = 1_700_000_000 * S) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def collector(
    root: Path, targets: list[tuple[str, str, str]], clock: Clock, insurance: int = 0
) -> Collector:
    return Collector(
        MetricStore(insurance),
        root,
        lambda: targets,
        clock=clock,
        page_size=4096,
        clk_tck=100,
        node_memory=lambda: (64 * MI, 32 * MI, 30 * MI, 2 * MI),
    )


FIRST = CgroupValues(
    usage_ns=100 * S,
    user_ns=60 * S,
    sys_ns=40 * S,
    quota_us=200000,
    period_us=100000,
    nr_periods=50,
    nr_throttled=5,
    throttled_ns=7_000_000,
    memory_usage=512 * MI,
    memory_limit=1024 * MI,
    rss=300 * MI,
    cache=200 * MI,
    shmem=4 * MI,
    dirty=1 * MI,
    writeback=2 * MI,
    mapped=3 * MI,
    pgfault=1000,
    pgmajfault=10,
    swap=0,
    oom_kill=1,
    numa={0: (200 * MI, 150 * MI), 1: (100 * MI, 50 * MI)},
    psi_avg60=1.25,
)
SECOND = CgroupValues(
    **{
        **FIRST.__dict__,
        "usage_ns": 115 * S,
        "user_ns": 70 * S,
        "sys_ns": 45 * S,
        "nr_throttled": 8,
        "memory_usage": 600 * MI,
        "oom_kill": 2,
    }
)


@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
@pytest.mark.parametrize("driver", [CGROUPFS, SYSTEMD])
@pytest.mark.parametrize("mode", [V1, V2, HYBRID])
def test_values_and_rates_match_the_files(tmp_path: Path, mode: str, driver: str, qos: str) -> None:
    clock = Clock()
    write_container(tmp_path, mode, driver, qos, POD, CID, FIRST)
    c = collector(tmp_path, [(POD, "app", f"containerd://{CID}")], clock)
    assert c.mode == mode
    c.sample_once()
    with pytest.raises(
        NotFoundError, match=r"\[MetricStore\] load value failed, metric=cpu.usage.container"
    ):
        c.store.get_container_metric(
            POD, "app", "cpu.usage.container", clock.now
        )  # a rate needs two samples
    clock.now += 10 * S
    write_container(tmp_path, mode, driver, qos, POD, CID, SECOND)
    c.sample_once()

    def m(name: str) -> float:
        value = c.store.get_container_metric(POD, "app", name, clock.now)
        assert value.time_ns == clock.now
        return value.value

    assert m("cpu.usage.container") == 1.5  # 15 s of CPU in 10 s
    assert m("cpu.usage.user.container") == 1.0
    assert m("cpu.usage.sys.container") == 0.5
    assert (m("cpu.quota.container"), m("cpu.period.container"), m("cpu.limit.container")) == (
        200000,
        100000,
        2.0,
    )
    assert m("cpu.usage.ratio.container") == 0.75
    assert m("cpu.nr.throttled.container") == 8
    assert m("cpu.throttled.time.container") == 7000  # microseconds
    assert m("mem.usage.container") == 600 * MI
    assert m("mem.limit.container") == 1024 * MI
    for name, value in (
        ("rss", 300),
        ("cache", 200),
        ("shmem", 4),
        ("dirty", 1),
        ("writeback", 2),
        ("mapped", 3),
    ):
        assert m(f"mem.{name}.container") == value * MI
    assert (m("mem.pgfault.container"), m("mem.pgmajfault.container"), m("mem.swap.container")) == (
        1000,
        10,
        0,
    )
    assert m("mem.oom.container") == 2
    assert (m("mem.anon.numa.container.0"), m("mem.file.numa.container.0")) == (200 * MI, 150 * MI)
    assert m("mem.total.numa.container.1") == 150 * MI
    assert m("mem.updatetime.container") == clock.now / S
    if mode == V1:
        with pytest.raises(NotFoundError, match="load value failed"):
            m("mem.psiavg60.container")
    else:
        assert m("mem.psiavg60.container") == 1.25
    assert c.store.get_node_metric("mem.available.system", clock.now).value == 32 * MI


def test_unlimited_values(tmp_path: Path) -> None:
    clock = Clock()
    write_container(tmp_path, V2, CGROUPFS, "burstable", POD, CID, CgroupValues())
    write_container(tmp_path / "v1", V1, CGROUPFS, "burstable", POD, CID, CgroupValues())
    for root in (tmp_path, tmp_path / "v1"):
        c = collector(root, [(POD, "app", CID)], clock)
        c.sample_once()
        assert (
            c.store.get_container_metric(POD, "app", "cpu.quota.container", clock.now).value == -1
        )
        limit = c.store.get_container_metric(POD, "app", "mem.limit.container", clock.now).value
        assert limit >= (1 << 63) - 4096  # v2 "max" and v1's page-aligned maximum
    with pytest.raises(NotFoundError):  # v2: no limit from an unlimited quota
        collector(tmp_path, [(POD, "app", CID)], clock).store.get_container_metric(
            POD, "app", "cpu.limit.container", 0
        )


@pytest.mark.parametrize("runtime", ["containerd", "cri-o", "docker"])
def test_systemd_scope_names_per_runtime_and_bare_ids(tmp_path: Path, runtime: str) -> None:
    clock = Clock()
    write_container(
        tmp_path, V2, SYSTEMD, "burstable", POD, CID, CgroupValues(memory_usage=7), runtime=runtime
    )
    for cid in (f"{runtime}://{CID}", CID):
        c = collector(tmp_path, [(POD, "app", cid)], clock)
        c.sample_once()
        assert c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now).value == 7


def test_container_without_an_id_or_cgroup_has_no_metrics(tmp_path: Path) -> None:
    clock = Clock()
    c = collector(tmp_path, [(POD, "noid", ""), (POD, "nocgroup", "containerd://missing")], clock)
    c.sample_once()
    for name in ("noid", "nocgroup"):
        with pytest.raises(
            NotFoundError,
            match=rf"\[MetricStore\] empty map, metric=mem.usage.container, podUID={POD}, containerName={name}",
        ):
            c.store.get_container_metric(POD, name, "mem.usage.container", clock.now)
    assert c.stats.errors == 0


def test_disappearing_container_is_dropped_without_error(tmp_path: Path) -> None:
    clock = Clock()
    rel = write_container(tmp_path, V1, SYSTEMD, "besteffort", POD, CID, FIRST)
    c = collector(tmp_path, [(POD, "app", CID)], clock)
    c.sample_once()
    assert (
        c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now).value == 512 * MI
    )
    remove_container(tmp_path, rel)
    clock.now += S
    c.sample_once()
    with pytest.raises(NotFoundError, match="empty map"):
        c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now)
    assert (c.stats.gone, c.stats.errors) == (1, 0)


def test_unreadable_file_is_counted_and_the_loop_goes_on(tmp_path: Path) -> None:
    clock = Clock()
    rel = write_container(tmp_path, V2, CGROUPFS, "burstable", POD, CID, FIRST)
    write_container(tmp_path, V2, CGROUPFS, "burstable", "other-pod", "other", FIRST)
    (tmp_path / rel / "memory.current").write_text("garbage\n")
    c = collector(tmp_path, [(POD, "app", CID), ("other-pod", "x", "other")], clock)
    c.sample_once()
    assert c.stats.errors == 1
    assert (
        c.store.get_container_metric("other-pod", "x", "mem.usage.container", clock.now).value
        == 512 * MI
    )


def test_malformed_numa_stat_drops_the_containers_metrics_naming_the_file(
    tmp_path: Path,
) -> None:
    clock = Clock()
    rel = write_container(tmp_path, V1, CGROUPFS, "burstable", POD, CID, FIRST)
    stat = tmp_path / "memory" / rel / "memory.numa_stat"
    stat.write_text("total=1 N0=1 N1=two\n")
    c = collector(tmp_path, [(POD, "app", CID)], clock)
    with capture_logs() as logs:
        c.sample_once()
    assert c.stats.errors == 1
    [warning] = [e for e in logs if e["event"] == "cannot read container cgroup"]
    assert (
        warning["error"] == f"{stat}: line 1 'total=1 N0=1 N1=two': 'N1=two' is not N<node>=<value>"
    )
    with pytest.raises(NotFoundError, match="empty map"):
        c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now)


def test_metrics_expire_after_the_insurance_period(tmp_path: Path) -> None:
    clock = Clock()
    write_container(tmp_path, V2, CGROUPFS, "burstable", POD, CID, FIRST)
    c = collector(tmp_path, [(POD, "app", CID)], clock, insurance=insurance_period_ns(10))
    c.sample_once()
    assert c.store.insurance_ns == 60 * S  # raised to the 60 s minimum
    assert (
        c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now + 60 * S).value
        == 512 * MI
    )
    with pytest.raises(FailedPreconditionError, match=r"^metric data expired$"):
        c.store.get_container_metric(POD, "app", "mem.usage.container", clock.now + 61 * S)
    assert insurance_period_ns(0) == 0


def test_removed_targets_lose_their_metrics(tmp_path: Path) -> None:
    clock = Clock()
    write_container(tmp_path, V2, CGROUPFS, "burstable", POD, CID, FIRST)
    targets = [(POD, "app", CID)]
    c = Collector(
        MetricStore(), tmp_path, lambda: list(targets), clock=clock, page_size=4096, clk_tck=100
    )
    c.sample_once()
    targets.clear()
    c.sample_once()
    assert c.store.containers() == []


def test_the_loop_survives_a_failing_round(tmp_path: Path) -> None:
    rounds: list[int] = []

    def targets() -> list[tuple[str, str, str]]:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("bug")
        return []

    c = Collector(MetricStore(), tmp_path, targets, interval_s=0.01)
    c.start()
    try:
        deadline = 200
        while len(rounds) < 3 and deadline:
            deadline -= 1
            time.sleep(0.01)
    finally:
        c.stop()
    assert len(rounds) >= 3
    assert c.stats.errors >= 1


@pytest.mark.smoke
def test_smoke_reads_this_process_cgroup() -> None:
    """Smoke test on the real host: the collector's reader on the cgroup of the test process.

    Holds on any Linux machine: cgroup v1, v2 or hybrid, a process in a nested
    cgroup or at the root of its cgroup namespace (where v2 has no
    ``memory.current``), and no cgroup file system at all.
    """
    root = Path("/sys/fs/cgroup")
    mode = cgroup.detect_mode(root)
    rel = "/"
    for line in Path(f"/proc/{os.getpid()}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (mode == cgroup.V2 and controllers == "") or "memory" in controllers.split(","):
            rel = path
    dirs = cgroup.path_dirs(root, mode, rel)
    if not dirs.memory.is_dir() and not dirs.cpuacct.is_dir():
        # No cgroup directory for this process: the reader reports a missing container.
        with pytest.raises(FileNotFoundError):
            cgroupsample.sample(dirs, cgroup.page_size(), cgroupsample.clock_ticks())
        return
    raw = cgroupsample.sample(dirs, cgroup.page_size(), cgroupsample.clock_ticks())
    usage = dirs.memory / ("memory.current" if mode == cgroup.V2 else "memory.usage_in_bytes")
    if usage.exists():
        assert raw.gauges["mem.usage.container"] > 0
    else:
        assert "mem.usage.container" not in raw.gauges
    values = [*raw.gauges.values(), *raw.counters.values()]
    assert all(math.isfinite(v) for v in values), raw
    assert all(v >= 0 for name, v in raw.gauges.items() if name != "cpu.quota.container"), raw
