"""Placement rounds on fake cgroup trees: every mode, driver and runtime naming; missing
controllers, vanishing cgroups, malformed files; cpuset.mems checks and enforcement."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from numamem import errors
from numamem import logging as nlog
from numamem.cpuset import format_cpulist
from numamem.errors import NotFoundError
from numamem.metacache.metrics import cgroup, cpusetfiles, enforcement, numastat
from numamem.metacache.metrics import placement as pl
from numamem.metacache.metrics.collector import Collector
from numamem.metacache.metrics.store import MetricStore
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
from tests.properties import examples

POD = "6f1c2a9e-0000-4000-8000-000000000001"
CID = "0123456789abcdef"
MI = 1 << 20
NOW = 1_700_000_000 * 10**9
# 96Mi on the assigned node 0, 32Mi on node 1: a quarter outside.
SPLIT = {0: (64 * MI, 32 * MI), 1: (30 * MI, 2 * MI)}


def target(*ids: str, assigned: set[int] | None = None, pod: str = POD) -> pl.PlacementTarget:
    return pl.PlacementTarget(pod, "app", ids, frozenset(assigned or {0}))


def one(sampler: pl.PlacementSampler, *targets: pl.PlacementTarget) -> pl.Placement:
    sampler.sample(targets or (target(f"containerd://{CID}"),), NOW)
    assert sampler.last is not None
    return sampler.last.placements[(POD, "app")]


@pytest.mark.parametrize("runtime", ["containerd", "cri-o"])
@pytest.mark.parametrize("driver", [CGROUPFS, SYSTEMD])
@pytest.mark.parametrize("mode", [V1, V2, HYBRID])
def test_measured_in_every_layout(tmp_path: Path, mode: str, driver: str, runtime: str) -> None:
    rel = write_container(
        tmp_path,
        mode,
        driver,
        "guaranteed",
        POD,
        CID,
        CgroupValues(numa=SPLIT, mems="0"),
        runtime=runtime,
    )
    sampler = pl.PlacementSampler(tmp_path, page_size=4096)
    found = one(sampler, target(f"{runtime}://{CID}"))
    assert (found.status, found.message, found.container_id) == (
        pl.MEASURED,
        "",
        f"{runtime}://{CID}",
    )
    assert found.cgroup == str(tmp_path / ("" if mode == V2 else "memory") / rel).replace("//", "/")
    res = found.residency
    assert res is not None
    assert {n: t["total"] for n, t in res.nodes.items()} == {0: 96 * MI, 1: 32 * MI}
    assert res.nodes[1]["anon"] == 30 * MI
    assert (res.total_bytes, res.outside_bytes, res.outside_share) == (128 * MI, 32 * MI, 0.25)
    assert (res.enforced, res.cpuset_matches) == (frozenset({0}), True)
    assert sampler.last is not None and sampler.last.mode == mode


def test_v2_reports_every_byte_type(tmp_path: Path) -> None:
    extra = {
        "shmem": {0: 4096, 1: 0},
        "kernel_stack": {0: 16384, 1: 0},
        "workingset_refault_anon": {0: 9, 1: 0},
    }
    write_container(
        tmp_path, V2, SYSTEMD, "burstable", POD, CID, CgroupValues(numa=SPLIT, numa_extra=extra)
    )
    res = one(pl.PlacementSampler(tmp_path)).residency
    assert res is not None
    assert res.nodes[0] == {
        "anon": 64 * MI,
        "file": 32 * MI,
        "kernel_stack": 16384,
        "shmem": 4096,
        "total": 96 * MI,
    }


def test_missing_cpuset_controller_leaves_the_cpuset_unknown(tmp_path: Path) -> None:
    write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    found = one(pl.PlacementSampler(tmp_path))
    assert found.status == pl.MEASURED
    assert found.residency is not None and found.residency.cpuset_matches is None
    assert found.message == f"no {tmp_path}/cpuset/kubepods/pod{POD}/{CID}/cpuset.mems"


def test_missing_memory_controller(tmp_path: Path) -> None:
    write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    remove_container(tmp_path / "memory", "")  # the whole controller: unmounted
    found = one(pl.PlacementSampler(tmp_path))
    assert (found.status, found.message) == (
        pl.NO_NUMA_STAT,
        f"no memory controller at {tmp_path}/memory",
    )


def test_no_numa_stat_file(tmp_path: Path) -> None:
    rel = write_container(tmp_path, V2, CGROUPFS, "burstable", POD, CID, CgroupValues())
    (tmp_path / rel / "memory.numa_stat").unlink()
    found = one(pl.PlacementSampler(tmp_path))
    assert found.status == pl.NO_NUMA_STAT
    assert found.message.startswith(f"{tmp_path}/{rel}/memory.numa_stat does not exist")


def test_no_cgroup_is_not_an_error(tmp_path: Path) -> None:
    write_container(tmp_path, V2, CGROUPFS, "burstable", "other", "x", CgroupValues())
    sampler = pl.PlacementSampler(tmp_path)
    found = one(sampler, target("containerd://missing"))
    assert found.status == pl.NO_CGROUP
    assert found.message == f"no cgroup under {tmp_path} for container id 'containerd://missing'"
    assert sampler.stats.errors == 0


def test_the_newest_id_with_a_cgroup_wins(tmp_path: Path) -> None:
    write_container(tmp_path, V2, CGROUPFS, "guaranteed", POD, "old", CgroupValues(numa=SPLIT))
    sampler = pl.PlacementSampler(tmp_path)
    assert one(sampler, target("new", "old")).container_id == "old"  # new not started yet
    write_container(tmp_path, V2, CGROUPFS, "guaranteed", POD, "new", CgroupValues(numa=SPLIT))
    assert one(sampler, target("newer", "new", "old")).container_id == "new"


def test_a_cgroup_that_vanishes_between_rounds(tmp_path: Path) -> None:
    rel = write_container(tmp_path, V1, SYSTEMD, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    sampler = pl.PlacementSampler(tmp_path)
    assert one(sampler).status == pl.MEASURED
    remove_container(tmp_path, rel)
    found = one(sampler)
    assert found.status == pl.NO_CGROUP
    assert "the container stopped" in found.message
    assert (sampler.stats.gone, sampler.stats.errors) == (1, 0)


@pytest.mark.parametrize("mode", [V1, V2])
def test_a_cgroup_that_vanishes_mid_read(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container stops after its cgroup was found and before its numa_stat is read."""
    rel = write_container(
        tmp_path, mode, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT)
    )
    real = cgroup.read_numa_stat

    def stop_then_read(path: Path, page_size: int) -> object:
        remove_container(tmp_path, rel)
        return real(path, page_size)

    monkeypatch.setattr(cgroup, "read_numa_stat", stop_then_read)
    sampler = pl.PlacementSampler(tmp_path)
    assert sampler.sample([target(CID)], NOW) == 0
    assert sampler.last is not None
    found = sampler.last.placements[(POD, "app")]
    assert (found.status, found.message) == (
        pl.NO_CGROUP,
        "the cgroup disappeared while it was read: the container stopped",
    )
    assert (sampler.stats.gone, sampler.stats.errors) == (1, 0)


def test_enodev_from_a_removed_cgroup_is_a_container_that_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))

    def removed(path: Path, page_size: int) -> object:
        raise OSError(errno.ENODEV, "No such device", str(path))

    monkeypatch.setattr(cgroup, "read_numa_stat", removed)
    assert one(pl.PlacementSampler(tmp_path)).status == pl.NO_CGROUP


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        (
            "memory.numa_stat",
            "anon N0=12 N1=x\n",
            "line 1 'anon N0=12 N1=x': 'N1=x' is not N<node>=<value>",
        ),
        (
            "memory.numa_stat",
            "anon N0=1\ntotal=1 N0=1\n",
            "line 2 'total=1 N0=1': a v1 line in a v2-format file",
        ),
        ("memory.numa_stat", "\xff\n", "not ASCII text"),
        ("cpuset.mems", "0-\n", "invalid cpulist '0-\\n': bad element '0-'"),
        ("cpuset.mems", "\xff\n", "not ASCII text"),
    ],
)
def test_malformed_files_are_unreadable_naming_the_file(
    tmp_path: Path, file: str, content: str, message: str
) -> None:
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0")
    )
    write_container(tmp_path, V2, CGROUPFS, "guaranteed", "p2", "fine", CgroupValues(numa=SPLIT))
    (tmp_path / rel / file).write_bytes(content.encode("latin-1"))
    sampler = pl.PlacementSampler(tmp_path)
    errors = sampler.sample([target(CID), target("fine", pod="p2")], NOW)
    assert errors == 1
    assert sampler.last is not None
    broken = sampler.last.placements[(POD, "app")]
    shown = tmp_path / rel / ("cpuset.mems.effective" if file == "cpuset.mems" else file)
    assert broken.status == pl.UNREADABLE
    assert broken.message == f"{shown}: {message}"
    assert sampler.last.placements[("p2", "app")].status == pl.MEASURED
    assert sampler.stats.errors == 1


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path) -> None:
    rel = write_container(tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    stat = tmp_path / rel / "memory.numa_stat"
    stat.unlink()
    stat.mkdir()  # reading it fails with EISDIR
    found = one(pl.PlacementSampler(tmp_path))
    assert (found.status, found.message) == (pl.UNREADABLE, f"{stat}: Is a directory")


def test_a_mismatch_is_logged_once_and_not_written_without_enforce(tmp_path: Path) -> None:
    rel = write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    sampler = pl.PlacementSampler(tmp_path)

    def warnings(logs: list[dict[str, object]]) -> list[dict[str, object]]:
        return [
            e
            for e in logs
            if e["event"] == "cpuset.mems differs from the memory manager's assignment"
        ]

    with capture_logs() as logs:
        for _ in range(3):
            found = one(sampler)
            assert found.residency is not None and found.residency.cpuset_matches is False
            assert found.write is None
    assert (tmp_path / "cpuset" / rel / "cpuset.mems").read_text() == "0-1\n"
    [warning] = warnings(logs)
    assert (warning["assigned"], warning["enforced"], warning["pod_uid"]) == ("0", "0-1", POD)
    assert warning["file"] == str(tmp_path / "cpuset" / rel / "cpuset.effective_mems")
    # Fixed by someone else, then changed again: a new warning.
    write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0")
    )
    with capture_logs() as logs:
        assert one(sampler).residency.cpuset_matches  # type: ignore[union-attr]
    assert warnings(logs) == []
    write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )
    with capture_logs() as logs:
        one(sampler)
        one(sampler)
    assert len(warnings(logs)) == 1


@pytest.mark.parametrize("mode", [V1, V2, HYBRID])
def test_enforce_writes_the_assignment_and_reads_it_back(tmp_path: Path, mode: str) -> None:
    rel = write_container(
        tmp_path, mode, SYSTEMD, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    cpuset = tmp_path / ("" if mode == V2 else "cpuset") / rel
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    nlog.configure("info", "console", cache=False)  # the write is an info line
    try:
        with capture_logs() as logs:
            found = one(sampler)
    finally:
        nlog.configure("warning", "console", cache=False)  # as tests/conftest.py has it
    write = found.write
    assert write is not None and write.ok, write
    [logged] = [e for e in logs if e["event"] == "wrote cpuset.mems (--enforce-cpuset-mems)"]
    assert (logged["before"], logged["written"], logged["file"]) == ("0-1", "0", write.path)
    assert logged["memory_migrate_enabled"] is (mode != V2)
    assert (write.before, write.written, write.after) == ({0, 1}, {0}, {0})
    assert write.path == str(cpuset / "cpuset.mems")
    assert write.time_ns == NOW
    assert (cpuset / "cpuset.mems").read_text() == "0\n"
    assert found.residency is not None and found.residency.cpuset_matches is True
    if mode == V2:
        assert not write.migrate_enabled
        assert not (cpuset / "cpuset.memory_migrate").exists()
    else:
        assert write.migrate_enabled
        assert (cpuset / "cpuset.memory_migrate").read_text() == "1\n"
    assert (sampler.stats.writes_ok, sampler.stats.writes_failed) == (1, 0)
    # The next round matches: no new write; the last one stays reported.
    again = one(sampler)
    assert again.write == write
    assert sampler.stats.writes_ok == 1


def test_enforce_reports_a_kernel_that_enforces_less(tmp_path: Path) -> None:
    """v2: the parent's cpuset.mems.effective does not allow node 1; effective stays 0."""
    write_container(
        tmp_path,
        V2,
        CGROUPFS,
        "guaranteed",
        POD,
        CID,
        CgroupValues(numa=SPLIT, mems="0", effective="0"),
    )
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    write = one(sampler, target(CID, assigned={0, 1})).write
    assert write is not None and not write.ok
    assert write.after == {0}
    assert "the kernel enforces '0' after the write" in write.error
    assert sampler.stats.writes_failed == 1


def test_enforce_reports_a_failed_write(tmp_path: Path) -> None:
    rel = write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )
    mems = tmp_path / "cpuset" / rel / "cpuset.mems"
    effective = mems.with_name("cpuset.effective_mems")
    effective.unlink()
    effective.write_text("1\n")
    mems.unlink()
    mems.mkdir()  # the write fails (EISDIR)
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    with capture_logs() as logs:
        write = one(sampler).write
        assert one(sampler).write is not None  # retried
    assert write is not None
    assert write.error == f"{mems}: Is a directory"
    assert write.after == {1}
    assert sampler.stats.writes_failed == 2
    [logged] = [e for e in logs if e["event"].startswith("cannot enforce cpuset.mems")]
    assert logged["error"] == write.error


def test_enforce_without_a_cpuset_controller_writes_nothing(tmp_path: Path) -> None:
    write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    found = one(pl.PlacementSampler(tmp_path, enforce=True))
    assert found.write is None
    assert not (tmp_path / "cpuset").exists()


NODES = st.frozensets(st.integers(0, 7), max_size=8)


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    assigned=NODES.filter(bool),
    enforced=NODES,
    parent=NODES.filter(bool),
    mode=st.sampled_from([V1, V2]),
)
def test_enforce_never_writes_beyond_the_assignment(
    tmp_path: Path,
    assigned: frozenset[int],
    enforced: frozenset[int],
    parent: frozenset[int],
    mode: str,
) -> None:
    """Every write, as it is made (not only the file's last state): ``cpuset.mems`` gets
    exactly the assignment, never empty, at most once while it holds; v1 sets
    memory_migrate first; v2 writes nothing when the parent lacks an assigned node."""
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / mode  # hypothesis may replay an example
    rel = write_container(
        root,
        mode,
        CGROUPFS,
        "guaranteed",
        POD,
        CID,
        CgroupValues(
            numa=SPLIT, mems=format_cpulist(enforced), parent_effective=format_cpulist(parent)
        ),
    )
    mems = root / ("" if mode == V2 else "cpuset") / rel / "cpuset.mems"
    writes: list[tuple[str, str]] = []
    real = cpusetfiles.write_cgroup_file

    def recording(controller: Path, directory: Path, name: str, text: str) -> Path:
        writes.append((name, text))
        return real(controller, directory, name, text)

    sampler = pl.PlacementSampler(root, enforce=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpusetfiles, "write_cgroup_file", recording)
        found = one(sampler, target(CID, assigned=set(assigned)))
        again = one(sampler, target(CID, assigned=set(assigned)))
    assert found.residency is not None
    mems_writes = [text for name, text in writes if name == "cpuset.mems"]
    assert all(numastat.parse_mems(text, "w") == assigned for text in mems_writes)
    disallowed = mode == V2 and not assigned <= parent
    if enforced == assigned or disallowed:
        assert writes == [] and found.write is None and again.write is None
        assert numastat.parse_mems(mems.read_text(), str(mems)) == enforced
        assert found.residency.cpuset_matches is (enforced == assigned)
        if disallowed and enforced != assigned:
            assert (found.enforcement, again.enforcement) == (enforcement.PARENT_DISALLOWS,) * 2
            missing = format_cpulist(assigned - parent)
            assert f"without the assigned node{'s' * (len(assigned - parent) > 1)} '{missing}'" in (
                found.enforcement_message
            )
        else:
            assert found.enforcement == ""
        return
    assert mems_writes == [format_cpulist(assigned) + "\n"]  # once: the next round holds
    if mode == V1:
        assert writes == [("cpuset.memory_migrate", "1\n"), ("cpuset.mems", mems_writes[0])]
    else:
        assert len(writes) == 1
    write = found.write
    assert write is not None and write.ok and not write.written_back
    assert (write.before, write.written, write.after) == (enforced, assigned, assigned)
    assert found.residency.cpuset_matches is True and found.enforcement == ""
    assert again.write == write and again.residency is not None
    assert again.residency.cpuset_matches is True
    assert numastat.parse_mems(mems.read_text(), str(mems)) == assigned


def test_targets_that_leave_are_forgotten(tmp_path: Path) -> None:
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    assert one(sampler).write is not None
    sampler.sample([], NOW)
    assert sampler.last is not None and sampler.last.placements == {}
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0")
    )
    assert one(sampler).write is None  # a new life: no old write reported


def test_the_collector_runs_placement_every_round_and_survives_its_failure(tmp_path: Path) -> None:
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, memory_usage=7)
    )
    sampler = pl.PlacementSampler(tmp_path)
    collector = Collector(
        MetricStore(),
        tmp_path,
        lambda: [(POD, "app", CID)],
        clock=lambda: NOW,
        node_memory=lambda: (1, 1, 0, 1),
    )
    seen: list[int] = []
    collector.rounds.append(lambda now: sampler.sample([target(CID)], now))
    collector.rounds.append(lambda now: seen.append(now) or 1 // 0)
    collector.rounds.append(lambda now: seen.append(now) or 0)
    collector.sample_once()
    assert sampler.last is not None and sampler.last.time_ns == NOW
    assert seen == [NOW, NOW]
    assert collector.stats.errors == 1
    assert collector.store.get_container_metric(POD, "app", "mem.usage.container", NOW).value == 7


# --- finding 1 of the issue-29 review: client ids never lead out of the containers' tree ---

HOSTILE_UIDS = ["victim/../..", "victim/../../..", "../..", "a/b", "/", "", "p\x00"]


def system_slice(root: Path, mode: str) -> Path:
    """A cgroup that is no container's, with cpuset files a traversal would write."""
    where = root / ("" if mode == V2 else "cpuset") / "system.slice"
    where.mkdir(parents=True)
    (where / "cpuset.mems").write_text("0-1\n")
    (where / "cpuset.memory_migrate").write_text("0\n")
    memory = root / ("" if mode == V2 else "memory") / "system.slice"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "memory.numa_stat").write_text(
        "anon N0=4096 N1=4096\nfile N0=0 N1=0\n"
        if mode == V2
        else "total=2 N0=1 N1=1\nhierarchical_total=2 N0=1 N1=1\n"
    )
    return where


@pytest.mark.parametrize("uid", HOSTILE_UIDS)
def test_a_pod_uid_that_is_not_one_path_component_never_resolves(tmp_path: Path, uid: str) -> None:
    assert cgroup.candidate_paths(uid, "containerd://system.slice") == []
    for mode in (V1, V2):
        root = tmp_path / mode
        write_container(root, mode, CGROUPFS, "guaranteed", "victim", "c", CgroupValues(mems="0"))
        system_slice(root, mode)
        assert cgroup.resolve(root, mode, uid, "containerd://system.slice") is None


@pytest.mark.parametrize("cid", ["", ".", "..", "a/b", "a\x00b", "containerd://", "docker://.."])
def test_a_container_id_that_is_not_one_path_component_never_resolves(cid: str) -> None:
    assert cgroup.candidate_paths(POD, cid) == []


def test_dots_in_a_pod_uid_are_a_plain_name() -> None:
    """``pod..`` is one directory name: a uid of dots stays inside the pod level."""
    paths = cgroup.candidate_paths("..", "containerd://c")
    assert paths[0] == "kubepods/pod../c"
    assert "kubepods.slice/kubepods-pod...slice/cri-containerd-c.scope" in paths
    assert all(".." not in Path(p).parts for p in paths)


@pytest.mark.parametrize("mode", [V1, V2])
def test_enforcement_never_writes_through_a_hostile_pod_uid(tmp_path: Path, mode: str) -> None:
    """The reviewer's d1: uid ``victim/../..`` and id ``containerd://system.slice``."""
    write_container(
        tmp_path, mode, CGROUPFS, "guaranteed", "victim", "vvv", CgroupValues(mems="0-1")
    )
    slice_dir = system_slice(tmp_path, mode)
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    hostile = pl.PlacementTarget(
        "victim/../..", "app", ("containerd://system.slice",), frozenset({0})
    )
    sampler.sample([hostile], NOW)
    assert sampler.last is not None
    found = sampler.last.placements[hostile.key]
    assert (found.status, found.write, found.cgroup) == (pl.NO_CGROUP, None, "")
    assert (slice_dir / "cpuset.mems").read_text() == "0-1\n"
    assert (slice_dir / "cpuset.memory_migrate").read_text() == "0\n"
    collector = Collector(
        MetricStore(),
        tmp_path,
        lambda: [("victim/../..", "app", "containerd://system.slice")],
        clock=lambda: NOW,
        node_memory=lambda: (1, 1, 0, 1),
    )
    collector.sample_once()
    with pytest.raises(NotFoundError):
        collector.store.get_container_metric("victim/../..", "app", "mem.usage.container", NOW)


def _escape_at(root: Path, mode: str, level: str) -> tuple[Path, Path]:
    """A fake container whose cpuset directory (``level`` = container or pod) or cpuset.mems
    file (``level`` = file) is a symlink to a directory outside the tree; returns (that
    directory, the container's cpuset directory as numamem sees it)."""
    rel = write_container(
        root, mode, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    controller = root / ("" if mode == V2 else "cpuset")
    outside = root.parent / f"outside-{mode}-{level}"
    outside.mkdir()
    container = controller / rel
    if level == "file":
        (outside / "cpuset.mems").write_text("0-1\n")
        (container / "cpuset.mems").unlink()
        (container / "cpuset.mems").symlink_to(outside / "cpuset.mems")
        return outside, container
    moved = container if level == "container" else container.parent
    target_dir = outside / moved.name
    shutil.copytree(moved, target_dir, symlinks=True)
    shutil.rmtree(moved)
    moved.symlink_to(target_dir)
    return (target_dir if level == "container" else target_dir / container.name), container


@pytest.mark.parametrize("level", ["container", "pod", "file"])
@pytest.mark.parametrize("mode", [V1, V2])
def test_enforcement_never_writes_through_a_symlink_out_of_the_tree(
    tmp_path: Path, mode: str, level: str
) -> None:
    root = tmp_path / "cgroup"
    outside, container = _escape_at(root, mode, level)
    before = {p.name: p.read_text() for p in outside.iterdir() if p.name.startswith("cpuset.")}
    sampler = pl.PlacementSampler(root, enforce=True)
    found = one(sampler)
    assert found.status == pl.MEASURED  # reading through it is allowed: only writes are refused
    write = found.write
    assert write is not None and not write.ok
    if level == "file":
        assert write.error == f"{container / 'cpuset.mems'}: Too many levels of symbolic links"
    else:
        assert write.error.startswith(f"refusing to write in '{outside}': not a container's cgroup")
    assert {
        p.name: p.read_text() for p in outside.iterdir() if p.name.startswith("cpuset.")
    } == before
    assert sampler.stats.writes_failed == 1


def test_a_symlinked_controller_is_resolved_before_the_check(tmp_path: Path) -> None:
    """The real-kernel smoke test's layout: ``<cgroup-root>/cpuset`` is a symlink to the
    real hierarchy; the container's directory inside it is still written."""
    real = tmp_path / "real"
    rel = write_container(
        real, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    root = tmp_path / "cgroup"
    root.mkdir()
    for controller in ("cpuset", "memory", "cpu,cpuacct"):
        (root / controller).symlink_to(real / controller)
    write = one(pl.PlacementSampler(root, enforce=True)).write
    assert write is not None and write.ok, write
    assert (real / "cpuset" / rel / "cpuset.mems").read_text() == "0\n"


@pytest.mark.parametrize(
    "where", ["kubepods", "kubepods/podx", "kubepods.slice", "system.slice/x", "", "kubepods-x/y/z"]
)
def test_only_cgroups_below_the_kubepods_level_are_writable(tmp_path: Path, where: str) -> None:
    directory = tmp_path / where
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpuset.mems").write_text("0-1\n")
    with pytest.raises(errors.CgroupPathError, match="not a container's cgroup"):
        cpusetfiles.write_cgroup_file(tmp_path, directory, "cpuset.mems", "0\n")
    assert (directory / "cpuset.mems").read_text() == "0-1\n"
    container = tmp_path / "kubepods" / "podx" / "c"
    container.mkdir(parents=True, exist_ok=True)
    (container / "cpuset.mems").write_text("0-1\n")
    cpusetfiles.write_cgroup_file(tmp_path, container, "cpuset.mems", "0\n")
    assert (container / "cpuset.mems").read_text() == "0\n"
    with pytest.raises(ValueError, match="never writes"):
        cpusetfiles.write_cgroup_file(tmp_path, container, "cgroup.procs", "1\n")
    with pytest.raises(FileNotFoundError, match=r"cpuset\.memory_migrate"):  # never created
        cpusetfiles.write_cgroup_file(tmp_path, container, "cpuset.memory_migrate", "1\n")


# --- finding 8: one container's bad file or unexpected error never aborts the round ---


def test_an_undecodable_cpuset_mems_does_not_abort_the_round(tmp_path: Path) -> None:
    """The reviewer's d7: ``\\xff`` in one container's cpuset.mems.effective; the other
    container's new figures are published by the same collector round."""
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", "pa", "a", CgroupValues(numa=SPLIT, mems="0")
    )
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", "pb", "b", CgroupValues(numa=SPLIT, mems="0")
    )
    sampler = pl.PlacementSampler(tmp_path)
    targets = [target("a", pod="pa"), target("b", pod="pb")]
    collector = Collector(
        MetricStore(), tmp_path, list, clock=lambda: NOW + 1, node_memory=lambda: (1, 1, 0, 1)
    )
    collector.rounds.append(lambda now: sampler.sample(targets, now))
    sampler.sample(targets, NOW)
    effective = tmp_path / rel / "cpuset.mems.effective"
    effective.unlink()
    effective.write_bytes(b"\xff\n")
    write_container(
        tmp_path,
        V2,
        CGROUPFS,
        "guaranteed",
        "pb",
        "b",
        CgroupValues(numa={0: (9 * MI, 0)}, mems="0"),
    )
    collector.sample_once()
    assert sampler.last is not None and sampler.last.time_ns == NOW + 1
    broken = sampler.last.placements[("pa", "app")]
    assert (broken.status, broken.message) == (pl.UNREADABLE, f"{effective}: not ASCII text")
    healthy = sampler.last.placements[("pb", "app")].residency
    assert healthy is not None and healthy.total_bytes == 9 * MI
    assert (collector.stats.errors, sampler.stats.errors) == (1, 1)


def test_an_unexpected_error_for_one_container_is_that_containers_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for pod, cid in (("pa", "a"), ("pb", "b")):
        write_container(
            tmp_path, V1, CGROUPFS, "guaranteed", pod, cid, CgroupValues(numa=SPLIT, mems="0")
        )
    real = cpusetfiles.read_enforced_mems

    def buggy(dirs: cgroup.CgroupDirs) -> frozenset[int] | None:
        if "/podpa/" in str(dirs.cpuset):
            raise RuntimeError("bug\x1b[2K")
        return real(dirs)

    monkeypatch.setattr(cpusetfiles, "read_enforced_mems", buggy)
    sampler = pl.PlacementSampler(tmp_path)
    with capture_logs() as logs:
        errors = sampler.sample([target("a", pod="pa"), target("b", pod="pb")], NOW)
    assert errors == 1
    assert sampler.last is not None
    broken = sampler.last.placements[("pa", "app")]
    assert broken.status == pl.UNREADABLE
    assert broken.message.startswith(
        "unexpected error reading the container's cgroup: RuntimeError: bug\\x1b[2K"
    )
    assert sampler.last.placements[("pb", "app")].status == pl.MEASURED
    [logged] = [e for e in logs if e["log_level"] == "error"]
    assert (logged["pod_uid"], logged["container"]) == ("pa", "app")


# --- finding 7: a container that leaves during the write has left; no write failed ---


@pytest.mark.parametrize(
    ("mode", "step", "errno_"),
    [
        (V1, "enable_memory_migrate", None),  # the reviewer's d6: gone before the write
        (V1, "write_cgroup_file", errno.ENODEV),  # kernfs: the open file's cgroup was removed
        (V2, "write_cgroup_file", errno.ENOENT),
        (V2, "read_enforced_mems", None),  # gone between the write and the read back
    ],
)
def test_a_container_that_leaves_during_the_write_has_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, step: str, errno_: int | None
) -> None:
    rel = write_container(
        tmp_path, mode, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    real = getattr(cpusetfiles, step)
    calls = []
    leave_at = 2 if step == "read_enforced_mems" else 1  # the first read is before the write

    def leave_then(*args: object) -> object:
        calls.append(args)
        if len(calls) != leave_at:
            return real(*args)
        remove_container(tmp_path, rel)  # runc removes the container's cgroups right here
        if errno_ is not None:
            raise OSError(errno_, os.strerror(errno_), str(tmp_path / rel / "cpuset.mems"))
        return real(*args)

    monkeypatch.setattr(cpusetfiles, step, leave_then)
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    with capture_logs() as logs:
        found = one(sampler)
    assert (found.status, found.write, found.residency) == (pl.NO_CGROUP, None, None)
    assert found.message == "the cgroup disappeared while it was read: the container stopped"
    assert (sampler.stats.writes_ok, sampler.stats.writes_failed, sampler.stats.errors) == (0, 0, 0)
    assert sampler.stats.gone == 1
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "cpuset.mems differs from the memory manager's assignment"  # before the write
    ]


def test_a_failed_write_in_a_cgroup_that_is_still_there_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )

    def refused(*args: object) -> object:
        raise OSError(errno.ENOENT, "No such file or directory", "cpuset.mems")

    monkeypatch.setattr(cpusetfiles, "write_cgroup_file", refused)
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    found = one(sampler)
    assert found.status == pl.MEASURED
    assert found.write is not None and found.write.error == "cpuset.mems: No such file or directory"
    assert sampler.stats.writes_failed == 1


# --- finding 2: NO_CGROUP lists a few quoted ids; only the newest ids are looked up ---


def test_the_no_cgroup_message_lists_a_few_quoted_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's d2: 4,300 ids of 1,000 characters made GetResidency exceed gRPC's
    message limit; one with ESC and a newline forged lines in ``numamem residency``."""
    (tmp_path / "kubepods").mkdir()
    hostile = "containerd://\x1b[31mRED\x1b[0m\nfake line: wrote cpuset.mems 0"
    ids = tuple(f"containerd://{i:06d}" + "a" * 1000 for i in range(4300))
    looked_up: list[str] = []
    real = cgroup.resolve

    def counting(root: Path, mode: str, pod_uid: str, cid: str) -> cgroup.CgroupDirs | None:
        looked_up.append(cid)
        return real(root, mode, pod_uid, cid)

    monkeypatch.setattr(cgroup, "resolve", counting)
    sampler = pl.PlacementSampler(tmp_path, mode=V1)
    newest_first = (hostile, *reversed(ids))
    for _ in range(3):
        found = one(sampler, target(*newest_first))
    assert found.status == pl.NO_CGROUP
    assert looked_up == list(newest_first[:4]) * 3  # the newest 4, each round
    assert found.message.startswith(
        f"no cgroup under {tmp_path} for container ids "
        "'containerd://\\x1b[31mRED\\x1b[0m\\nfake line: wrote cpuset.mems 0', "
        "'containerd://004299aaaa"
    )
    assert found.message.endswith(" and 1 more (only the newest 4 of its 4301 ids are looked up)")
    assert found.message.isprintable()
    assert len(found.message.encode()) < 600
    assert "004298" in found.message and "004297" not in found.message


def test_log_fields_naming_a_container_are_quoted(tmp_path: Path) -> None:
    write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    sampler = pl.PlacementSampler(tmp_path)
    hostile = pl.PlacementTarget(POD, "app\x1b[2K\rx", (CID,), frozenset({0}))
    with capture_logs() as logs:
        sampler.sample([hostile], NOW)
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert (warning["pod_uid"], warning["container"]) == (POD, "app\\x1b[2K\\rx")


@pytest.mark.parametrize("uid", ["p\n1", "p\x1b[2K"])
def test_ids_with_control_characters_name_no_cgroup(tmp_path: Path, uid: str) -> None:
    (tmp_path / "kubepods" / f"pod{uid}" / "c").mkdir(parents=True)
    assert cgroup.resolve(tmp_path, V2, uid, "c") is None
    (tmp_path / "kubepods" / "podp" / "c\n").mkdir(parents=True)
    assert cgroup.resolve(tmp_path, V2, "p", "c\n") is None


# --- finding 6: v2 enforcement never widens; a write that widens is written back ---


def test_v2_does_not_write_when_the_parent_lacks_an_assigned_node(tmp_path: Path) -> None:
    """Writing 0 under a parent whose effective nodes are 1 would make the kernel enforce
    the parent's 1 (v2 falls back to the parent's nodes): not written, reported, logged
    once; written once the parent allows node 0."""
    values = CgroupValues(numa=SPLIT, mems="1", parent_effective="1")
    rel = write_container(tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, values)
    parent = (tmp_path / rel).parent / "cpuset.mems.effective"
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    with capture_logs() as logs:
        rounds = [one(sampler) for _ in range(3)]
    for found in rounds:
        assert (found.write, found.enforcement) == (None, enforcement.PARENT_DISALLOWS)
        assert found.residency is not None and found.residency.cpuset_matches is False
    assert rounds[0].enforcement_message == (
        f"{parent} is '1', without the assigned node "
        "'0': the kernel would enforce other nodes than the assignment; not written. Allow them "
        "in the pod's (and its QoS class's) cpuset.mems, or fix the assignment"
    )
    assert (tmp_path / rel / "cpuset.mems").read_text() == "1\n"
    held = [e for e in logs if e["event"].startswith("not enforcing cpuset.mems")]
    assert len(held) == 1 and held[0]["reason"] == rounds[0].enforcement_message
    assert (sampler.stats.writes_ok, sampler.stats.writes_failed) == (0, 0)
    parent.write_text("0-1\n")
    found = one(sampler)
    assert found.write is not None and found.write.ok and found.enforcement == ""
    assert (tmp_path / rel / "cpuset.mems").read_text() == "0\n"


def test_v2_without_the_parents_nodes_does_not_write(tmp_path: Path) -> None:
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )
    parent = (tmp_path / rel).parent / "cpuset.mems.effective"
    parent.unlink()
    found = one(pl.PlacementSampler(tmp_path, enforce=True))
    assert (found.write, found.enforcement) == (None, enforcement.PARENT_DISALLOWS)
    assert found.enforcement_message == (
        f"{parent} does not exist: cannot tell which nodes the parent allows; not written"
    )
    assert (tmp_path / rel / "cpuset.mems").read_text() == "1\n"


@pytest.mark.parametrize("mode", [V1, V2])
def test_a_write_that_widens_is_written_back_and_enforcement_stops(
    tmp_path: Path, mode: str
) -> None:
    """A kernel that enforces 0-2 once 0 is written (as v2 does when the parent grants none
    of the written nodes): the previous cpuset.mems is written back, and never again."""
    rel = write_container(
        tmp_path,
        mode,
        CGROUPFS,
        "guaranteed",
        POD,
        CID,
        CgroupValues(numa=SPLIT, mems="1", effective="1"),
    )
    cpuset = tmp_path / ("" if mode == V2 else "cpuset") / rel
    effective = cpuset / ("cpuset.mems.effective" if mode == V2 else "cpuset.effective_mems")
    written: list[str] = []
    real = cpusetfiles.write_cgroup_file

    def kernel(controller: Path, directory: Path, name: str, text: str) -> Path:
        path = real(controller, directory, name, text)
        if name == "cpuset.mems":
            written.append(text)
            effective.write_text("0-2\n" if text == "0\n" else text)
        return path

    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    with pytest.MonkeyPatch.context() as patch, capture_logs() as logs:
        patch.setattr(cpusetfiles, "write_cgroup_file", kernel)
        found = one(sampler)
        later = [one(sampler) for _ in range(3)]
    assert written == ["0\n", "1\n"]  # the write, then the write back; nothing after
    assert (cpuset / "cpuset.mems").read_text() == "1\n"
    write = found.write
    assert write is not None and write.written_back and not write.ok
    assert (write.before, write.written, write.after) == ({1}, {0}, {0, 1, 2})
    assert write.error == (
        "the kernel enforces '0-2' after writing '0', not within the assignment (the parent "
        "cgroup's cpuset.mems.effective grants none of the assigned nodes?); wrote back '1'. "
        "numamem no longer writes this container's cpuset.mems (until it restarts or is "
        "re-pinned): allow the assigned nodes in the pod's cpuset.mems"
    )
    assert found.residency is not None and found.residency.enforced == {1}  # as written back
    assert (found.enforcement, found.enforcement_message) == (enforcement.STOPPED, write.error)
    for again in later:
        assert (again.write, again.enforcement) == (write, enforcement.STOPPED)
    assert (sampler.stats.writes_ok, sampler.stats.writes_failed) == (0, 1)
    [logged] = [e for e in logs if e["event"] == "cpuset.mems written back; no longer enforced"]
    assert logged["error"] == write.error
    # A restart (a new runtime id) is a new container: enforced again.
    write_container(
        tmp_path, mode, CGROUPFS, "guaranteed", POD, "new", CgroupValues(numa=SPLIT, mems="1")
    )
    fresh = one(sampler, target("new", CID))
    assert fresh.write is not None and fresh.write.ok and fresh.enforcement == ""


# --- finding 5: a container whose cpuset.mems another agent keeps is not rewritten each round ---


def test_a_contested_cpuset_is_written_with_exponential_backoff(tmp_path: Path) -> None:
    """The reviewer's d9: another agent writes 0-1 before every round. numamem writes in
    rounds 0, 1 and 2, finds the third undone in round 3 (contested), then writes after 2,
    4, 8, 16, 32 rounds, and 64 at most; when the agent stops, the next round finds the
    write in place and the contest is over."""
    rel = write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    mems = tmp_path / "cpuset" / rel / "cpuset.mems"
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    wrote: list[int] = []
    states: list[str] = []
    nlog.configure("info", "console", cache=False)
    try:
        with capture_logs() as logs:
            for rnd in range(200):
                if rnd < 66 or rnd in (70, 71):  # the other agent's writes, between rounds
                    mems.write_text("0-1\n")
                ok_before = sampler.stats.writes_ok
                found = one(sampler)
                if sampler.stats.writes_ok > ok_before:
                    wrote.append(rnd)
                states.append(found.enforcement)
                if rnd == 4:
                    assert found.enforcement_message == (
                        "cpuset.mems was written 3 times in a row and changed back before the "
                        "next round each time (another agent, or the runtime, keeps its own "
                        "cpuset.mems): numamem backs off and writes it again in 1 round (the wait doubles "
                        "each time, up to 64 rounds). Make the other agent apply the memory "
                        "manager's nodes (GetMemoryNUMANodes), or leave cpuset.mems to one of them"
                    )
                    assert found.residency is not None
                    assert found.residency.cpuset_matches is False
    finally:
        nlog.configure("warning", "console", cache=False)
    assert wrote == [0, 1, 2, 5, 9, 17, 33, 65, 70, 71]
    assert states[:3] == ["", "", ""]
    assert set(states[3:66]) == {enforcement.CONTESTED}
    assert set(states[66:]) == {""}  # round 66 found round 65's write in place
    assert sampler.stats.writes_failed == 0
    events = [e["event"] for e in logs]
    contested = [e for e in logs if e["event"].startswith("cpuset.mems is contested")]
    assert len(contested) == 1 and contested[0]["retry_in_rounds"] == 2
    assert events.count("cpuset.mems holds again: no longer contested") == 1
    assert mems.read_text() == "0\n"


def test_the_backoff_is_bounded(tmp_path: Path) -> None:
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    mems = tmp_path / rel / "cpuset.mems"
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    wrote = []
    for rnd in range(400):
        mems.write_text("0-1\n")
        ok_before = sampler.stats.writes_ok
        one(sampler)
        if sampler.stats.writes_ok > ok_before:
            wrote.append(rnd)
    gaps = [b - a for a, b in itertools.pairwise(wrote)]
    assert gaps == [1, 1, 3, 4, 8, 16, 32, 64, 64, 64, 64, 64]


def test_an_occasional_undo_is_no_contest(tmp_path: Path) -> None:
    """A runtime that resets cpuset.mems now and then (a write holds in between) is
    corrected in the next round every time."""
    rel = write_container(
        tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    mems = tmp_path / "cpuset" / rel / "cpuset.mems"
    sampler = pl.PlacementSampler(tmp_path, enforce=True)
    for rnd in range(30):
        if rnd % 3 == 0:
            mems.write_text("0-1\n")
        found = one(sampler)
        assert found.enforcement == ""
        assert found.residency is not None and found.residency.cpuset_matches is True
    assert sampler.stats.writes_ok == 10


# --- finding 4: hugetlb pages (not charged to the memory controller) are in the residency ---


@pytest.mark.parametrize("mode", [V1, V2, HYBRID])
def test_hugetlb_pages_on_another_node_are_outside(tmp_path: Path, mode: str) -> None:
    """The reviewer's d8: 1 GiB of 2 MiB pages on node 1, assigned node 0, was 0 outside."""
    values = CgroupValues(
        numa={0: (8 * MI, 0), 1: (0, 0)}, mems="0", hugetlb={"2MB": {0: 0, 1: 1 << 30}}
    )
    write_container(tmp_path, mode, CGROUPFS, "guaranteed", POD, CID, values)
    res = one(pl.PlacementSampler(tmp_path)).residency
    assert res is not None
    assert res.nodes[1] == {"anon": 0, "file": 0, "hugetlb_2MB": 1 << 30, "total": 1 << 30}
    assert (res.total_bytes, res.outside_bytes) == (8 * MI + (1 << 30), 1 << 30)
    assert res.outside_share == (1 << 30) / (8 * MI + (1 << 30))


def test_no_hugetlb_controller_means_no_hugetlb_types(tmp_path: Path) -> None:
    write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT))
    res = one(pl.PlacementSampler(tmp_path)).residency
    assert res is not None and not any(k.startswith("hugetlb") for k in res.nodes[0])


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("anon N0=1\n", "no 'total=<bytes> N0=<bytes> ...' line"),
        ("total=1 N0=x\n", "line 1 'total=1 N0=x': 'N0=x' is not N<node>=<value>"),
        ("\xff\n", "not ASCII text"),
    ],
)
def test_a_malformed_hugetlb_file_is_unreadable_naming_it(
    tmp_path: Path, content: str, why: str
) -> None:
    values = CgroupValues(numa=SPLIT, hugetlb={"1GB": {0: 1 << 30}})
    rel = write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, values)
    path = tmp_path / "hugetlb" / rel / "hugetlb.1GB.numa_stat"
    path.write_bytes(content.encode("latin-1"))
    found = one(pl.PlacementSampler(tmp_path))
    assert (found.status, found.message) == (pl.UNREADABLE, f"{path}: {why}")


def test_a_hugetlb_cgroup_that_vanishes_mid_read_is_a_container_that_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = CgroupValues(numa=SPLIT, hugetlb={"2MB": {0: 2 << 20}})
    rel = write_container(tmp_path, V1, CGROUPFS, "guaranteed", POD, CID, values)
    real = cgroup.read_numa_stat

    def stop_then_read(path: Path, page_size: int) -> object:
        if path.name.startswith("hugetlb."):
            shutil.rmtree(tmp_path / "hugetlb" / rel)  # runc removes the hugetlb cgroup first
        return real(path, page_size)

    monkeypatch.setattr(cgroup, "read_numa_stat", stop_then_read)
    sampler = pl.PlacementSampler(tmp_path)
    assert one(sampler).status == pl.NO_CGROUP
    assert (sampler.stats.gone, sampler.stats.errors) == (1, 0)
