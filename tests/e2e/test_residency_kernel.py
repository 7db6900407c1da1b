"""Residency against a real kernel: a private cgroup subtree, a process that touches 64 MiB,
the real daemon reading it, and ``--enforce-cpuset-mems`` writing the real cpuset.mems.

Needs root and the cgroup v1 memory and cpuset controllers (this project's machines have
them); skips with the reason elsewhere. Nothing of the machine's own cgroups is changed:
the test makes ``numamem-smoke-<id>`` at the top of the memory and cpuset hierarchies, and
points ``--cgroup-root`` at a private directory whose ``memory`` and ``cpuset`` entries are
symlinks to those two, so numamem sees a v1 host whose whole tree is the test's. Everything
created is removed, even on failure.

One NUMA node here (node 0): the residency is all on node 0, and the only other value
cpuset.mems can hold is the empty list, which the kernel allows only in a cpuset without
tasks. So the child process moves into the container's memory cgroup only (the one whose
memory.numa_stat is read) and stays in the top cpuset; the test empties the container's
cpuset.mems behind numamem's back, and the enforcing daemon writes node 0 back.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from numamem.client import NumamemClient
from numamem.metacache.metrics.cgroup import read_numa_stat
from numamem.metacache.metrics.residency import memory_types
from numamem.quantity import format_bytes as human_bytes
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS
from tests.unit.test_metrics import scrape_unix, value

pytestmark = [pytest.mark.smoke, pytest.mark.e2e]

MIB = 1 << 20
# The child's touched block, what it adds when told to grow, and how far below them the
# kernel's per-node LRU counts may read: a page just faulted in waits in its CPU's batch (up
# to 31 pages) until the batch fills, and compaction takes pages off their list while it moves
# them, so memory.numa_stat's ``anon`` can be some pages short of what the child holds, for as
# long as the child's CPU faults nothing more (CI read 64 MiB less 3 pages; up to 30 short
# were seen here). The child stays on one CPU, so one batch is the most it leaves out.
# numamem must still report a kernel reading exactly.
BLOCK = 64 * MIB
GROWTH = 16 * MIB
OFF_LRU_SLACK = 1 * MIB
POD_UID = "5e0d1c2b-0000-4000-8000-00000000c0de"
CHILD = """
import os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})   # one CPU: one batch off the LRU
def touched(size):
    block = bytearray(size)
    for i in range(0, size, 4096):      # touch every page
        block[i] = 1
    return block
sys.stdin.readline()                    # moved into the cgroup: allocate now
held = [touched(64 << 20)]              # BLOCK
print("ready", flush=True)
for line in sys.stdin:                  # "grow": GROWTH more; the end of input: exit
    held.append(touched(16 << 20))
    print("grown", flush=True)
"""
T = TypeVar("T")


def v1_mount(controller: str) -> Path | None:
    """The mount point of the cgroup v1 hierarchy that has ``controller``, or None."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fstype, _source, options = [*tail.split(), "", "", ""][:3]
        if fstype == "cgroup" and controller in options.split(","):
            return Path(fields.split()[4])
    return None


def requirements() -> tuple[Path, Path]:
    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root")
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo: not Linux")
    memory, cpuset = v1_mount("memory"), v1_mount("cpuset")
    if memory is None or cpuset is None:
        missing = [n for n, m in (("memory", memory), ("cpuset", cpuset)) if m is None]
        pytest.skip(
            f"no cgroup v1 {' and '.join(missing)} controller mounted (cgroup v2 only: this test "
            "makes v1 cgroups; v2 would need a delegated subtree)"
        )
    if not (memory / "memory.numa_stat").exists():
        pytest.skip(f"{memory}/memory.numa_stat is missing: a kernel without NUMA")
    return memory, cpuset


@dataclass
class Tree:
    """The cgroups this test made, deepest last."""

    memory: Path
    cpuset: Path
    rel: str
    made: list[Path]

    def container(self, controller: str) -> Path:
        return (self.memory if controller == "memory" else self.cpuset) / self.rel


def kernel_numa(path: Path) -> dict[str, dict[int, int]]:
    """memory.numa_stat's hierarchical lines in bytes, parsed here independently of numamem."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = {}
    for line in path.read_text().splitlines():
        name, *nodes = line.split()
        key = name.split("=")[0]
        if key.startswith("hierarchical_"):
            out[key.removeprefix("hierarchical_")] = {
                int(n.split("=")[0][1:]): int(n.split("=")[1]) * page for n in nodes
            }
    return out


@contextlib.contextmanager
def private_tree(memory_mount: Path, cpuset_mount: Path, cid: str) -> Iterator[Tree]:
    top = f"numamem-smoke-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rel = f"kubepods/pod{POD_UID}/{cid}"
    tree = Tree(memory_mount / top, cpuset_mount / top, rel, [])
    try:
        for base in (tree.memory, tree.cpuset):
            path = base
            for part in ("", *rel.split("/")):
                path = path / part if part else path
                try:
                    path.mkdir()
                except OSError as err:
                    pytest.skip(f"cannot create the cgroup {path}: {err.strerror}")
                tree.made.append(path)
                if base == tree.cpuset:  # a v1 cpuset starts empty: give it its parent's
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        (path / name).write_text((path.parent / name).read_text())
        yield tree
    finally:
        for path in reversed(tree.made):
            for _ in range(50):  # a just-emptied memory cgroup may be busy for a moment
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        left = [str(p) for p in tree.made if p.exists()]
        assert not left, f"could not remove the test's cgroups: {left}"


def tell(child: subprocess.Popen[str], line: str, answer: str, seconds: float = 60) -> None:
    """Send ``line`` to the child and wait (bounded) for it to print ``answer``."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(f"{line}\n")
    child.stdin.flush()
    ready, _, _ = select.select([child.stdout], [], [], seconds)
    assert ready and child.stdout.readline().strip() == answer, f"the child did not answer {line}"


@contextlib.contextmanager
def child_in(cgroup: Path, code: str = CHILD, *args: str) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdin is not None and proc.stdout is not None
            (cgroup / "cgroup.procs").write_text(f"{proc.pid}\n")
            tell(proc, "go", "ready")
            yield proc
        finally:
            proc.kill()
            proc.wait(10)


def eventually(what: str, probe: Callable[[], T | None], seconds: float = 30) -> T:
    """Poll ``probe`` (a bounded wait for the collector's next rounds) until it answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds}s: {what}")


def residency(client: NumamemClient, after_ns: int) -> Callable[[], mm.ContainerResidency | None]:
    """The container's residency, once a round that started after ``after_ns`` measured it."""

    def probe() -> mm.ContainerResidency | None:
        [row] = client.get_residency(POD_UID, "app")
        if row.status == mm.RESIDENCY_MEASURED and row.sampled_at.ToNanoseconds() > after_ns:
            return row
        assert row.status in (mm.RESIDENCY_PENDING, mm.RESIDENCY_MEASURED), row
        return None

    return probe


def reported(row: mm.ContainerResidency) -> dict[str, dict[int, int]]:
    """A residency row as ``kernel_numa`` reads the file: bytes by type, then by node."""
    types: dict[str, dict[int, int]] = {}
    for node in row.nodes:
        for name, size in node.types.items():
            types.setdefault(name, {})[node.node] = size
    return types


def matched_round(client: NumamemClient, stat: Path) -> mm.ContainerResidency:
    """A round measured after this call whose report equals the kernel's file at an instant of
    that round: as read just before or just after it.

    The child is idle, but on a loaded 2-core machine the kernel still moves a few pages now
    and then (a full `make test` on a clean clone missed ten rounds in a row once when only
    "before" counted, and the file changed during each), so up to twenty rounds are tried; the
    comparison stays exact."""
    readings = []
    for _ in range(20):
        before, since = kernel_numa(stat), time.time_ns()
        row = eventually("a measured round", residency(client, since))
        after = kernel_numa(stat)
        readings.append((before, after, reported(row)))
        if reported(row) in (before, after):
            return row
    raise AssertionError(f"no round matched a kernel reading: {readings[-3:]}")


def daemon(root: Path, cgroot: Path, *extra: str) -> DaemonProcess:
    args = ["--sysfs-root", "/sys", *STATIC_ARGS, "--cgroup-root", str(cgroot)]
    args += ["--metric-interval", "0.2", "--metrics-socket", str(root / "metrics.sock")]
    # With the podresources API on, the memory manager records pod names: residency shows them.
    args += ["--podresources-socket", str(root / "podresources.sock"), *extra]
    return DaemonProcess(root, args)


def cli(socket: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "numamem", "residency", "--socket", socket, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_residency_and_enforcement_on_a_real_cgroup(daemon_factory: list[DaemonProcess]) -> None:
    memory_mount, cpuset_mount = requirements()
    cid = uuid.uuid4().hex * 2
    root = short_tmpdir()
    try:
        with (
            private_tree(memory_mount, cpuset_mount, cid) as tree,
            child_in(tree.container("memory")) as child,
        ):
            cgroot = root / "cgroup"
            cgroot.mkdir()
            (cgroot / "memory").symlink_to(tree.memory)
            (cgroot / "cpuset").symlink_to(tree.cpuset)
            watching = daemon(root, cgroot)
            daemon_factory.append(watching)
            watching.start()
            res = {"cpu": "1", "memory": "256Mi"}
            pod = mm.Pod(
                uid=POD_UID,
                namespace="smoke",
                name="residency",
                containers=[mm.Container(name="app", requests=res, limits=res)],
            )
            with NumamemClient(watching.socket) as client:
                assert client.admit(pod).admitted
                assert client.get_memory_numa_nodes(POD_UID, "app") == [0]
                client.add_container(pod, "app", f"containerd://{cid}")
                stat = tree.container("memory") / "memory.numa_stat"
                row = matched_round(client, stat)
                # Each node's bytes are the kernel's ``total`` line (matched just above).
                assert {n.node: n.bytes for n in row.nodes} == reported(row)["total"]
                assert row.nodes[0].types["anon"] >= BLOCK - OFF_LRU_SLACK
                assert (row.outside_bytes, row.outside_share) == (0, 0.0)
                assert (row.cgroup_mode, row.cgroup) == ("v1", str(cgroot / "memory" / tree.rel))
                assert (row.cpuset_mems_state, list(row.cpuset_mems)) == (
                    mm.CPUSET_MEMS_MATCHES,
                    [0],
                )
                # The child grows: a later round reports the new size (a report stuck at an
                # earlier round would still equal the file of an idle child, not of this one).
                tell(child, "grow", "grown")
                row = matched_round(client, stat)
                assert row.nodes[0].types["anon"] >= BLOCK + GROWTH - OFF_LRU_SLACK
                # The table shows the size of the round it was printed from, in two decimals
                # of MiB, where three pages show: it must be the daemon's report just before or
                # just after the command (up to ten tries, as the rounds go on meanwhile).
                for _ in range(10):
                    before = client.get_residency(POD_UID, "app")[0].nodes[0].bytes
                    table = cli(watching.socket)
                    after = client.get_residency(POD_UID, "app")[0].nodes[0].bytes
                    line = table.splitlines()[1].split()
                    if line[5] in (human_bytes(before), human_bytes(after)):
                        break
                else:
                    raise AssertionError(f"{line[5]} is neither {before} nor {after} bytes")
                print(table)
                assert line[:4] == ["smoke/residency", f"({POD_UID})", "app", "0"]
                assert line[4] == "0*:"
                assert line[6:] == ["0", "(0.0%)", "0", "ok", "measured"]
                assert "containers" in cli(watching.socket, "--json")
                # cpuset.mems changed behind numamem's back: caught, reported, left alone.
                mems = tree.container("cpuset") / "cpuset.mems"
                mems.write_text("\n")
                changed = time.time_ns()
                row = eventually(
                    "the mismatch",
                    lambda: (
                        r
                        if (r := residency(client, changed)()) is not None
                        and r.cpuset_mems_state == mm.CPUSET_MEMS_DIFFERS
                        else None
                    ),
                )
                assert list(row.cpuset_mems) == [] and not row.HasField("cpuset_write")
                print(cli(watching.socket))
                text = scrape_unix(str(root / "metrics.sock"))
                assert "numamem_container_cpuset_mems_mismatch{" in text
                assert mems.read_text() == "\n"
            assert watching.stop() == 0
            # The same state, with --enforce-cpuset-mems: node 0 is written back and read back.
            enforcing = daemon(root, cgroot, "--enforce-cpuset-mems")
            daemon_factory.append(enforcing)
            enforcing.start()
            with NumamemClient(enforcing.socket) as client:
                started = time.time_ns()
                row = eventually("the write", residency(client, started))
                write = row.cpuset_write
                assert (list(write.before), list(write.written), list(write.after)) == (
                    [],
                    [0],
                    [0],
                )
                assert (write.error, write.file) == (
                    "",
                    str(cgroot / "cpuset" / tree.rel / "cpuset.mems"),
                )
                assert write.memory_migrate_enabled
                assert mems.read_text() == "0\n"
                assert (mems.parent / "cpuset.memory_migrate").read_text() == "1\n"
                assert row.cpuset_mems_state == mm.CPUSET_MEMS_MATCHES
                assert (
                    value(
                        scrape_unix(str(root / "metrics.sock")),
                        'numamem_cpuset_mems_writes_total{result="ok"}',
                    )
                    == 1
                )
                shown = cli(enforcing.socket)
                print(shown)
                assert "wrote cpuset.mems 0 to " in shown
                assert row.nodes[0].types["anon"] >= BLOCK + GROWTH - OFF_LRU_SLACK
            assert enforcing.stop() == 0
    finally:
        for d in daemon_factory:
            d.kill()
        subprocess.run(["rm", "-rf", str(root)], check=False)


SHM_CHILD = """
import sys
sys.stdin.readline()                    # moved into the cgroup: write now
with open(sys.argv[1], "wb") as f:      # a tmpfs file: shared memory, not page cache
    f.write(b"x" * (32 << 20))
print("ready", flush=True)
sys.stdin.read()
"""


def test_v1_counts_shared_memory_as_anon() -> None:
    """What docs/residency.md says of shared memory, on this kernel: 32 MiB written to
    /dev/shm by a process in a v1 memory cgroup are ``anon`` in memory.numa_stat, not
    ``file`` (so v1's outside ``file`` is page cache; its ``anon`` may be shared memory)."""
    memory_mount, cpuset_mount = requirements()
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    shm = Path(f"/dev/shm/numamem-smoke-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with private_tree(memory_mount, cpuset_mount, uuid.uuid4().hex) as tree:
        try:  # the file goes before its cgroup does (it holds the charge)
            with child_in(tree.container("memory"), SHM_CHILD, str(shm)):
                path = tree.container("memory") / "memory.numa_stat"
                types = memory_types(read_numa_stat(path, os.sysconf("SC_PAGE_SIZE")))
                anon, file = sum(types["anon"].values()), sum(types["file"].values())
                assert anon >= 28 * MIB, types  # a few pages may be charged before the move
                assert file < 4 * MIB, types
        finally:
            shm.unlink(missing_ok=True)
