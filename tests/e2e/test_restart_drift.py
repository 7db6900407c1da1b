"""Restarts on a machine that changed, through the real daemon: every change x every tolerance.

The state is written once on a 3-node machine (16Gi per node, 512 x 2Mi and
4 x 1Gi hugepages): pod p0 pinned to node 0 (4Gi memory), pod p1 pinned to
node 1 (2Gi memory, 1Gi of 1Gi pages), node 2 unused. Each cell copies that
state, changes the machine (or the reservation) and restarts under one
``memory-drift-tolerance``: ``fit`` (the default), ``off`` (the kubelet's
rule), ``auto`` (a fake /proc/iomem whose kernel image spans 48Mi: bound
112Mi) and ``128Mi``. An accepted start must keep every assignment, hold the
new machine's totals, and need no change at a second restart; a refused one
must name the node, resource and field, the containers concerned and the fix,
and leave the file as it was.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from numamem.api.convert import state_from_proto
from numamem.client import NumamemClient
from numamem.testing.daemon import STATIC_ARGS, DaemonProcess, short_tmpdir
from numamem.testing.sysfs import HP_1G, HP_2M, FakeNode, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_memorymanager_service import container, pod

pytestmark = pytest.mark.e2e
GI_KB = 1024 * 1024
MI_KB = 1024
GI = 1024**3
IOMEM = (
    "00000000-00000fff : Reserved\n"
    "01000000-01ffffff : Kernel code\n"
    "02000000-02bfffff : Kernel data\n"
    "02c00000-03ffffff : Kernel bss\n"
)
TOLERANCES = {
    "fit": [],
    "off": ["--memory-manager-policy-options", "memory-drift-tolerance=off"],
    "auto": ["--memory-manager-policy-options", "memory-drift-tolerance=auto"],
    "128Mi": ["--memory-manager-policy-options", "memory-drift-tolerance=128Mi"],
}


def nodes(**changes: object) -> list[FakeNode]:
    """The base machine, with ``memory_kb{N}``, ``hp1g{N}`` or ``gone`` changed."""
    out = []
    for n in range(3):
        if n in changes.get("gone", ()):  # type: ignore[operator]
            continue
        memory = changes.get(f"memory_kb{n}", 16 * GI_KB)
        pages = {HP_2M: (512, 512), HP_1G: (changes.get(f"hp1g{n}", 4),) * 2}
        out.append(FakeNode(n, memory, f"{n * 2}-{n * 2 + 1}", pages))  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class Change:
    machine: dict[str, object]
    flags: tuple[str, ...] = ()
    accepted_by: tuple[str, ...] = ()
    refusal: tuple[str, ...] = ()
    """Fragments every refusal of this change contains."""


CHANGES = {
    # The trial that opened the issue: MemTotal +640Mi on node 0, a pod pinned there.
    "memory-grows": Change(
        {"memory_kb0": 16 * GI_KB + 640 * MI_KB},
        accepted_by=("fit",),
        refusal=(
            "node 0 memory TotalMemSize: stored 16Gi (17179869184), now 16.62Gi (17850957824)",
            "p0/app",
        ),
    ),
    "memory-drifts-32Mi": Change(
        {"memory_kb0": 16 * GI_KB + 32 * MI_KB},
        accepted_by=("fit", "auto", "128Mi"),
        refusal=("node 0 memory TotalMemSize", "memory-drift-tolerance=auto or 32Mi or fit"),
    ),
    "memory-shrinks-fits": Change(
        {"memory_kb0": 14 * GI_KB},
        accepted_by=("fit",),
        refusal=("node 0 memory Allocatable: stored", "p0/app"),
    ),
    "memory-shrinks-below": Change(
        {"memory_kb0": 8 * GI_KB},
        refusal=(
            "(pod: p0, container: app) the memory assignment does not fit the machine state: "
            "4Gi memory on nodes [0], 2Gi more than they have free now",
            "no drift tolerance accepts this",
        ),
    ),
    "hugepages-grow": Change(
        {"hp1g1": 6}, accepted_by=("fit",), refusal=("node 1 hugepages-1Gi TotalMemSize", "p1/app")
    ),
    "hugepages-shrink-fits": Change(
        {"hp1g1": 2}, accepted_by=("fit",), refusal=("node 1 hugepages-1Gi TotalMemSize",)
    ),
    "hugepages-shrink-below": Change(
        {"hp1g1": 0},
        refusal=("(pod: p1, container: app) the memory assignment does not fit", "p1/app"),
    ),
    "empty-node-gone": Change(
        {"gone": (2,)},
        accepted_by=("fit",),
        refusal=("node 2 node: stored present, now absent; containers with blocks there: none",),
    ),
    "used-node-gone": Change(
        {"gone": (1,)},
        refusal=("uses the NUMA that does not exist",),
    ),
    "reservation-changes": Change(
        {},
        flags=("--reserved-memory=0:memory=2Gi", "--system-reserved=memory=1948Mi"),
        accepted_by=("fit",),
        refusal=("node 0 memory SystemReserved: stored 1Gi (1073741824), now 2Gi (2147483648)",),
    ),
}


@pytest.fixture(scope="module")
def written_state() -> Iterator[tuple[Path, dict[str, list[tuple[str, str, int]]]]]:
    """The state directory after p0 and p1 were pinned, and their blocks."""
    root = short_tmpdir()
    write_sysfs(root / "sys", nodes())
    d = DaemonProcess(root, ["--sysfs-root", str(root / "sys"), *STATIC_ARGS])
    d.start()
    try:
        with NumamemClient(d.socket, timeout=10) as client:
            client.allocate(
                pod("p0", container("app", "4Gi")), "app", mm.TopologyHint(numa_nodes=[0])
            )
            p1 = pod("p1", container("app", "2Gi", hugepages={"hugepages-1Gi": "1Gi"}))
            client.allocate(p1, "app", mm.TopologyHint(numa_nodes=[1]))
            blocks = blocks_of(client)
    finally:
        d.stop()
    yield root / "state", blocks
    shutil.rmtree(root, ignore_errors=True)


def blocks_of(client: NumamemClient) -> dict[str, list[tuple[str, str, int]]]:
    _, assignments = state_from_proto(client.get_state())
    return {
        f"{p}/{c}": sorted((b.type, ",".join(map(str, b.numa_affinity or ())), b.size) for b in bl)
        for p, ctrs in assignments.items()
        for c, bl in ctrs.items()
    }


@pytest.mark.parametrize("tolerance", list(TOLERANCES))
@pytest.mark.parametrize("change", list(CHANGES))
def test_restart_matrix(
    written_state: tuple[Path, dict[str, list[tuple[str, str, int]]]],
    short_root: Path,
    daemon_factory: list[DaemonProcess],
    change: str,
    tolerance: str,
) -> None:
    state_dir, blocks = written_state
    spec = CHANGES[change]
    shutil.copytree(state_dir, short_root / "state")
    (short_root / "state").chmod(0o700)
    write_sysfs(short_root / "sys", nodes(**spec.machine))
    (short_root / "proc").mkdir()
    (short_root / "proc" / "iomem").write_text(IOMEM)
    flags = (
        [*STATIC_ARGS, *spec.flags]
        if not spec.flags
        else [*STATIC_ARGS[:1], *spec.flags, STATIC_ARGS[3]]
    )
    args = ["--sysfs-root", str(short_root / "sys"), "--proc-root", str(short_root / "proc")]
    args += [*flags, *TOLERANCES[tolerance]]
    file = short_root / "state" / "memory_manager_state"
    before = file.read_bytes()
    d = DaemonProcess(short_root, args)
    daemon_factory.append(d)
    if tolerance not in spec.accepted_by:
        out = d.run_to_exit(*args)
        assert out.returncode == 1, out.stderr
        refusal = out.stderr[out.stderr.rindex("numamem: ") :]
        assert (
            refusal.startswith(
                "numamem: [memorymanager] the expected machine state is different from the real one"
            )
            or "(pod: p1, container: app) the memory assignment uses the NUMA that does not exist"
            in refusal
        ), refusal
        assert str(file) in refusal
        for fragment in spec.refusal:
            assert fragment in refusal, refusal
        assert "drain the node, remove" in refusal
        assert file.read_bytes() == before, "a refused start changes nothing"
        return
    d.start()
    with NumamemClient(d.socket, timeout=10) as client:
        assert blocks_of(client) == blocks, "every assignment is kept"
        machine, _ = state_from_proto(client.get_state())
        for node in nodes(**spec.machine):
            memory = machine[node.id].memory_map["memory"]  # type: ignore[index, union-attr]
            assert memory.total == node.memory_kb * 1024
        for n, expect in ((0, 4 * GI), (1, 2 * GI)):
            if n in machine:
                assert machine[n].memory_map["memory"].reserved == expect  # type: ignore[union-attr, index]
        first = client.get_state()
    d.stop()
    rebaselined = file.read_bytes()
    assert rebaselined != before
    again = DaemonProcess(short_root, args)
    daemon_factory.append(again)
    again.start()
    with NumamemClient(again.socket, timeout=10) as client:
        assert client.get_state() == first
    again.stop()
    assert file.read_bytes() == rebaselined, "the second restart needs no change"
