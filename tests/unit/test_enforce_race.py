"""Issue 38: ``--enforce-cpuset-mems`` writes only the assignment committed at the moment of the
write, never the one a collector round started with (a resize or a release committed during
the round, which the runtime has applied already, must not be undone).

The interleaving is forced: the round's targets are taken first, then the committed state
changes (a hook inside the round, or a port that answers the new state), then the write."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem import logging as nlog
from numamem.cpuset import format_cpulist
from numamem.metacache.metrics import cgroup, cpusetfiles
from numamem.metacache.metrics import placement as pl
from numamem.testing.cgroups import CGROUPFS, SYSTEMD, V1, V2, CgroupValues, write_container
from numamem.testing.daemon import short_tmpdir
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_metrics import scrape_unix, value
from tests.unit.test_residency_service import collector_round, pod, serve

POD = "6f1c2a9e-0000-4000-8000-000000000001"
CID = "0123456789abcdef"
MI = 1 << 20
NOW = 1_700_000_000 * 10**9
SPLIT = {0: (64 * MI, 32 * MI), 1: (30 * MI, 2 * MI)}
SUPERSEDED = "not writing cpuset.mems (the assignment): "


def round_target(assigned: set[int]) -> pl.PlacementTarget:
    return pl.PlacementTarget(POD, "app", (CID,), frozenset(assigned))


def sampled(sampler: pl.PlacementSampler, assigned: set[int]) -> pl.Placement:
    sampler.sample([round_target(assigned)], NOW)
    assert sampler.last is not None
    return sampler.last.placements[(POD, "app")]


@pytest.mark.parametrize("mode", [V1, V2])
@pytest.mark.parametrize(
    ("committed", "applied"),
    [
        ({0, 1}, "0-1"),  # resized from node 0 to nodes 0-1; the runtime applied it
        ({1}, "1"),  # released and admitted again on node 1; the runtime applied it
        (set(), "0-1"),  # released: no longer pinned (the runtime's cpuset stays)
    ],
)
def test_a_write_the_committed_state_superseded_is_not_made(
    tmp_path: Path, mode: str, committed: set[int], applied: str
) -> None:
    rel = write_container(
        tmp_path, mode, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems=applied)
    )
    mems = tmp_path / ("" if mode == V2 else "cpuset") / rel / "cpuset.mems"
    asked: list[tuple[str, str]] = []

    def now_committed(pod_uid: str, name: str) -> frozenset[int]:
        asked.append((pod_uid, name))
        return frozenset(committed)

    sampler = pl.PlacementSampler(tmp_path, enforce=True, committed=now_committed)
    nlog.configure("info", "console", cache=False)
    try:
        with capture_logs() as logs:
            found = sampled(sampler, {0})  # the round's snapshot: node 0
    finally:
        nlog.configure("warning", "console", cache=False)  # as tests/conftest.py has it
    assert mems.read_text() == f"{applied}\n"  # the runtime's newer value stays
    assert asked == [(POD, "app")]  # asked just before the write
    assert found.write is None
    assert found.residency is not None and found.residency.cpuset_matches is False
    assert (sampler.stats.writes_ok, sampler.stats.writes_failed) == (0, 0)
    assert sampler.stats.writes_superseded == 1
    [logged] = [e for e in logs if e["event"].startswith(SUPERSEDED)]
    assert (logged["round_assigned"], logged["committed"]) == (
        "0",
        format_cpulist(committed) if committed else "none (released)",
    )
    if mode == V1:  # no write at all: memory_migrate is left alone too
        assert (mems.parent / "cpuset.memory_migrate").read_text() == "0\n"
    if committed:  # the next round's target is the committed one: in place, nothing written
        again = sampled(sampler, committed)
        assert again.write is None and again.residency is not None
        assert again.residency.cpuset_matches is True
        assert mems.read_text() == f"{applied}\n"


def test_a_write_of_the_committed_assignment_is_made(tmp_path: Path) -> None:
    """The port agrees with the round: the write is made as before (the check is no veto)."""
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="0-1")
    )
    sampler = pl.PlacementSampler(
        tmp_path, enforce=True, committed=lambda _uid, _name: frozenset({0})
    )
    found = sampled(sampler, {0})
    assert found.write is not None and found.write.ok
    assert (tmp_path / rel / "cpuset.mems").read_text() == "0\n"
    assert (sampler.stats.writes_ok, sampler.stats.writes_superseded) == (1, 0)


def test_a_write_back_the_committed_state_superseded_is_not_made(tmp_path: Path) -> None:
    """The write widened the enforced nodes (so the old value would be written back), but the
    assignment changed between the write and the write back: the old value is not restored
    over what the runtime may have applied since; the next round enforces the new target."""
    rel = write_container(
        tmp_path, V2, CGROUPFS, "guaranteed", POD, CID, CgroupValues(numa=SPLIT, mems="1")
    )
    cpuset = tmp_path / rel
    state = {"committed": frozenset({0})}
    written: list[str] = []
    real = cpusetfiles.write_cgroup_file

    def kernel(controller: Path, directory: Path, name: str, text: str) -> Path:
        path = real(controller, directory, name, text)
        if name == "cpuset.mems":
            written.append(text)
            (cpuset / "cpuset.mems.effective").write_text("0-2\n" if text == "0\n" else text)
            state["committed"] = frozenset({1})  # a resize commits during the write
        return path

    sampler = pl.PlacementSampler(
        tmp_path, enforce=True, committed=lambda _uid, _name: state["committed"]
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpusetfiles, "write_cgroup_file", kernel)
        found = sampled(sampler, {0})
    assert written == ["0\n"]  # no write back of '1'
    write = found.write
    assert write is not None and write.written_back is True
    assert "could not write back '1': the assignment changed meanwhile" in write.error
    assert sampler.stats.writes_superseded == 1
    # The next round's target is the new assignment: a fresh container, enforced again.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpusetfiles, "write_cgroup_file", kernel)
        fresh = sampled(sampler, {1})
    assert fresh.enforcement == "" and fresh.write is not None and fresh.write.ok
    assert written == ["0\n", "1\n"]


# --- through the daemon: the real memory manager commits during a real collector round ---


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def during_the_round(
    patch: pytest.MonkeyPatch, uid: str, act: Callable[[], None]
) -> list[Callable[[], None]]:
    """Run ``act`` once, inside the next placement round: after the round took its targets
    and read the container's numa_stat, just before it reads the enforced nodes (only the
    placement round reads them) and decides to write."""
    pending = [act]
    real = cpusetfiles.read_enforced_mems

    def hooked(dirs: cgroup.CgroupDirs) -> frozenset[int] | None:
        if pending and f"pod{uid}" in str(dirs.cpuset):
            pending.pop()()
        return real(dirs)

    patch.setattr(cpusetfiles, "read_enforced_mems", hooked)
    return pending


def test_a_resize_during_the_round_is_not_undone(root: Path) -> None:
    """The issue's case: a resize from node 0 to nodes 0-1 is acknowledged during a round, the
    runtime applies 0-1, and the round must not write its own snapshot's node 0 back."""
    cgroups = root / "cgroup"
    rel = write_container(
        cgroups, V1, SYSTEMD, "guaranteed", "p1", "aaa", CgroupValues(numa=SPLIT, mems="0")
    )
    mems = cgroups / "cpuset" / rel / "cpuset.mems"
    with serve(root, enforce_cpuset_mems=True) as server:  # type: ignore[attr-defined]
        c = server.client
        p1 = pod("p1")
        assert c.admit(p1).admitted
        c.add_container(p1, "app", "containerd://aaa")
        collector_round(server)
        [row] = c.get_residency()
        assert (row.cpuset_mems_state, list(row.assigned_numa_nodes)) == (
            mm.CPUSET_MEMS_MATCHES,
            [0],
        )

        def resize_and_apply() -> None:
            reply = c.resize(pod("p1", memory="20Gi"), "app")
            assert list(reply.numa_nodes) == [0, 1]
            mems.write_text("0-1\n")  # the runtime applies the acknowledged resize

        with pytest.MonkeyPatch.context() as patch:
            pending = during_the_round(patch, "p1", resize_and_apply)
            collector_round(server)
        assert pending == []  # the hook ran inside the round
        assert mems.read_text() == "0-1\n"  # without the check: '0' was written back
        [row] = c.get_residency()
        assert list(row.assigned_numa_nodes) == [0, 1]
        assert not row.HasField("cpuset_write")
        text = scrape_unix(str(root / "metrics.sock"))
        assert value(text, 'numamem_cpuset_mems_writes_total{result="superseded"}') == 1
        assert value(text, 'numamem_cpuset_mems_writes_total{result="ok"}') == 0
        collector_round(server)  # the next round: in place, nothing to write
        [row] = c.get_residency()
        assert row.cpuset_mems_state == mm.CPUSET_MEMS_MATCHES
        assert mems.read_text() == "0-1\n"


def test_a_release_and_readmission_elsewhere_during_the_round_is_not_undone(root: Path) -> None:
    cgroups = root / "cgroup"
    rel = write_container(
        cgroups, V2, SYSTEMD, "guaranteed", "p1", "aaa", CgroupValues(numa=SPLIT, mems="0-1")
    )
    mems = cgroups / rel / "cpuset.mems"
    with serve(root, enforce_cpuset_mems=True) as server:  # type: ignore[attr-defined]
        c = server.client
        p1 = pod("p1")
        assert c.admit(p1).admitted
        assert c.get_memory_numa_nodes("p1", "app") == [0]
        c.add_container(p1, "app", "containerd://aaa")

        def move_to_node_1() -> None:
            assert c.release_pod("p1")
            assert c.admit(pod("filler", memory="10Gi")).admitted  # node 0 is full now
            assert c.admit(p1).admitted
            assert c.get_memory_numa_nodes("p1", "app") == [1]
            c.add_container(p1, "app", "containerd://aaa")
            mems.write_text("1\n")  # the runtime applies the new assignment

        with pytest.MonkeyPatch.context() as patch:
            pending = during_the_round(patch, "p1", move_to_node_1)
            collector_round(server)
        assert pending == []
        assert mems.read_text() == "1\n"  # without the check: '0' was written
        text = scrape_unix(str(root / "metrics.sock"))
        assert value(text, 'numamem_cpuset_mems_writes_total{result="superseded"}') == 1
        assert value(text, 'numamem_cpuset_mems_writes_total{result="ok"}') == 0
