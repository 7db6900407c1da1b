"""Pod-level resources (KEP-5526) on the real daemon with the feature gates on: a Guaranteed pod
with pod-level memory and hugepages and a mix of exclusive, shared, init and sidecar containers
is admitted in the pod scope, partitioned as spec section 5.2 says, listed by podresources,
restored after SIGKILL, and released at its last container; memory_manager_state is the V3 file
the kubelet writes for the same state (tests/kubelet_v3.py). With the gates off the same pod is
skipped; a kubelet-written V3 file with pod entries is taken over, and refused with the gates
off."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from numamem.api.convert import pod_entries_from_proto, state_from_proto
from numamem.client import NumamemClient, error_reason
from numamem.memorymanager.state.invariants import violations
from numamem.memtypes import Block, MemoryTable, NUMANodeState
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests import kubelet_v3
from tests.daemon import REPO, STATIC_ARGS

pytestmark = pytest.mark.e2e

GI = 1024**3
MI = 1024**2
HP = "hugepages-2Mi"
GATES = ["--feature-gates", "PodLevelResources=true,PodLevelResourceManagers=true"]
UID = "6f1c2a9e-0000-4000-8000-0000000005e5"


def own(cpu: str, memory: str, hugepages: str = "") -> dict[str, str]:
    res = {"cpu": cpu, "memory": memory}
    if hugepages:
        res[HP] = hugepages
    return res


def mixed_pod() -> mm.Pod:
    """Budget 8Gi + 256Mi of hugepages-2Mi; log-agent (sidecar) and db exclusive, setup (a
    regular init container) and mesh (a sidecar) and exporter without requests of their own."""
    budget = own("4", "8Gi", "256Mi")
    return mm.Pod(
        uid=UID,
        namespace="default",
        name="pod-level-demo",
        requests=budget,
        limits=budget,
        init_containers=[
            mm.Container(name="log-agent", requests=own("1", "512Mi"), limits=own("1", "512Mi"),
                         restart_policy="Always"),
            mm.Container(name="setup"),
            mm.Container(name="mesh", restart_policy="Always"),
        ],
        containers=[
            mm.Container(name="db", requests=own("2", "4Gi", "128Mi"),
                         limits=own("2", "4Gi", "128Mi")),
            mm.Container(name="exporter"),
        ],
    )  # fmt: skip


def blocks(memory: int, hugepages: int = 0) -> list[tuple[str, int, list[int]]]:
    out = [("memory", memory, [0])]
    if hugepages:
        out.append((HP, hugepages, [0]))
    return sorted(out)


POOL = blocks(8 * GI - 512 * MI - 4 * GI, 128 * MI)
EXPECTED = {  # spec 5.2 step 6 on the mask {0}
    "log-agent": blocks(512 * MI),
    "setup": blocks(8 * GI - 512 * MI, 256 * MI),  # the budget minus the sidecars before it
    "mesh": POOL,
    "db": blocks(4 * GI, 128 * MI),
    "exporter": POOL,
}
ISOLATION = {
    "log-agent": mm.RESOURCE_ISOLATION_CONTAINER,
    "setup": mm.RESOURCE_ISOLATION_POD,
    "mesh": mm.RESOURCE_ISOLATION_POD,
    "db": mm.RESOURCE_ISOLATION_CONTAINER,
    "exporter": mm.RESOURCE_ISOLATION_POD,
}


def daemon_args(root: Path, *extra: str) -> list[str]:
    if not (root / "sys").exists():
        write_sysfs(root / "sys", standard_nodes(2, memory_gib=16, hugepages={2048: (512, 512)}))
    return [
        "--sysfs-root",
        str(root / "sys"),
        *STATIC_ARGS,
        "--topology-manager-policy",
        "single-numa-node",
        "--topology-manager-scope",
        "pod",
        "--podresources-socket",
        str(root / "pr" / "podresources.sock"),
        *extra,
    ]


def start(root: Path, factory: list[DaemonProcess], *extra: str) -> DaemonProcess:
    d = DaemonProcess(root, daemon_args(root, *extra))
    factory.append(d)
    return d.start()


def listed(root: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.podresources_upstream", "call",
         str(root / "pr" / "podresources.sock"), "List"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    [pod] = json.loads(out.stdout)["response"]["pod_resources"]
    return dict(pod)


def memory(entries: list[dict[str, Any]]) -> list[tuple[str, int, list[int]]]:
    return sorted(
        (m["memory_type"], int(m["size"]), [int(n.get("ID", 0)) for n in m["topology"]["nodes"]])
        for m in entries
    )


def served(c: NumamemClient) -> tuple[Any, ...]:
    state = c.get_state()
    machine, entries = state_from_proto(state)
    pods = pod_entries_from_proto(state)
    assert violations(machine, entries, pods) == []
    isolation = {
        (uid, ctr): b.isolation
        for uid, e in state.entries.items()
        for ctr, b in e.containers.items()
    }
    return machine, entries, pods, isolation


def on_disk_equals_the_kubelets_encoding(d: DaemonProcess, c: NumamemClient) -> None:
    machine, entries, pods, _ = served(c)
    data = (Path(d.state_dir) / "memory_manager_state").read_bytes()
    assert data == kubelet_v3.encode("Static", machine, entries, pods)


def test_a_mixed_pod_is_admitted_partitioned_listed_restored_and_released(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory, *GATES)
    pod = mixed_pod()
    with NumamemClient(d.socket) as c:
        default = served(c)[0]
        resp = c.admit(pod)
        assert resp.admitted, resp.message
        assert sorted((b.type, b.size, list(b.numa_affinity)) for b in resp.pod_blocks) == blocks(
            8 * GI, 256 * MI
        )
        got = {
            a.container_name: sorted((b.type, b.size, list(b.numa_affinity)) for b in a.blocks)
            for a in resp.containers
        }
        assert got == EXPECTED
        machine, entries, pods, isolation = served(c)
        assert {k[1]: v for k, v in isolation.items()} == ISOLATION
        node0 = machine[0]
        assert node0.memory_map is not None
        # The budget is reserved once; the containers' blocks are not reserved again.
        assert node0.memory_map["memory"].reserved == 8 * GI
        assert node0.memory_map[HP].reserved == 256 * MI
        assert node0.number_of_assignments == 2
        assert c.get_memory_numa_nodes(UID, "exporter") == [0]  # shares the pod's pool
        assert c.get_pod_memory(UID).allocated
        on_disk_equals_the_kubelets_encoding(d, c)
        data = json.loads((Path(d.state_dir) / "memory_manager_state").read_bytes())
        assert set(json.loads(data["data"])["podEntries"]) == {UID}
        assert "podEntries" not in data  # pod entries exist only inside data
        # podresources: the pod-level memory, and only the exclusive containers' own memory.
        pr = listed(short_root)
        assert memory(pr["memory"]) == blocks(8 * GI, 256 * MI)
        containers = {x["name"]: memory(x.get("memory", [])) for x in pr["containers"]}
        assert containers == {
            "log-agent": EXPECTED["log-agent"],
            "db": EXPECTED["db"],
            "setup": [],
            "mesh": [],
            "exporter": [],
        }
        # The containers start: the app containers' AddContainer frees the init container's entry.
        for name in ["log-agent", "setup", "mesh", "db", "exporter"]:
            c.add_container(pod, name, f"cid-{name}")
        before_kill = served(c)
        assert set(before_kill[1][UID]) == {"log-agent", "mesh", "db", "exporter"}
        assert before_kill[0][0].memory_map["memory"].reserved == 8 * GI  # type: ignore[index]
    d.stop(signal.SIGKILL)
    d.start()
    with NumamemClient(d.socket) as c:
        assert served(c) == before_kill
        on_disk_equals_the_kubelets_encoding(d, c)
        assert c.admit(pod).admitted  # AllocatePod is idempotent (#141077): nothing changes
        assert served(c) == before_kill
        hints = c.get_pod_topology_hints(pod)  # regenerated from the pod blocks (#141070)
        assert {
            name: [(list(h.numa_nodes), h.preferred) for h in lst.hints]
            for name, lst in hints.hints.items()
        } == {"memory": [([0], True)], HP: [([0], True)]}
        # Release: nothing until the last container goes, then the whole budget.
        for name in ["log-agent", "mesh", "db"]:
            assert c.remove_container(f"cid-{name}")
            assert served(c)[0][0].memory_map["memory"].reserved == 8 * GI
        assert c.remove_container("cid-exporter")
        machine, entries, pods, _ = served(c)
        assert (machine, entries, pods) == (default, {}, {})
        on_disk_equals_the_kubelets_encoding(d, c)


def test_with_the_gates_off_the_pod_is_skipped_and_v1_is_written(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as c:
        default = served(c)
        resp = c.admit(mixed_pod())
        assert resp.admitted  # "Allocation skipped, pod is using pod-level resources"
        assert list(resp.pod_blocks) == []
        assert all(list(a.blocks) == [] for a in resp.containers)
        assert served(c) == default
    data = json.loads((Path(d.state_dir) / "memory_manager_state").read_bytes())
    assert set(data) == {"policyName", "machineState", "checksum"}  # V1, as before


def kubelet_file() -> bytes:
    """What a kubelet (master, gates on) leaves for the mixed pod on this machine: written by
    the test-side kubelet encoder from the partition of spec 5.2, not by numamem."""
    alloc_memory = 16 * GI - GI - GI  # reserved 1Gi on node 0, 1Gi of hugepages per node
    hp = 512 * 2 * MI
    machine = {
        0: NUMANodeState(
            2,
            {
                HP: MemoryTable(hp, 0, hp, 256 * MI, hp - 256 * MI),
                "memory": MemoryTable(16 * GI, GI, alloc_memory, 8 * GI, alloc_memory - 8 * GI),
            },
            [0],
        ),
        1: NUMANodeState(
            0,
            {
                HP: MemoryTable(hp, 0, hp, 0, hp),
                "memory": MemoryTable(16 * GI, 0, 15 * GI, 0, 15 * GI),
            },
            [1],
        ),
    }
    containers = {
        name: [Block((0,), t, size) for t, size, _ in EXPECTED[name]]
        for name in ["log-agent", "mesh", "db", "exporter"]
    }
    pod_blocks = [Block((0,), "memory", 8 * GI), Block((0,), HP, 256 * MI)]
    return kubelet_v3.encode("Static", machine, {UID: containers}, {UID: pod_blocks})


def test_a_kubelet_written_v3_file_is_taken_over_and_refused_with_the_gates_off(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    state_dir = short_root / "state"
    state_dir.mkdir(mode=0o700)
    written = kubelet_file()
    (state_dir / "memory_manager_state").write_bytes(written)
    refused = DaemonProcess(short_root).run_to_exit(*daemon_args(short_root))
    assert refused.returncode != 0
    assert "pod-level memory assignments" in refused.stderr and UID in refused.stderr
    assert "PodLevelResourceManagers=true" in refused.stderr
    assert (state_dir / "memory_manager_state").read_bytes() == written
    d = start(short_root, daemon_factory, *GATES)
    with NumamemClient(d.socket) as c:
        _, entries, pods, isolation = served(c)
        assert pods == {UID: [Block((0,), "memory", 8 * GI), Block((0,), HP, 256 * MI)]}
        assert set(entries[UID]) == {"log-agent", "mesh", "db", "exporter"}
        # Nothing changed, so nothing was rewritten: the kubelet's bytes stay.
        assert (state_dir / "memory_manager_state").read_bytes() == written
        # The kubelet's file does not say which containers hold memory of their own: all are
        # reported as sharing the pod's pool (the pod-level memory is reported once).
        assert set(isolation.values()) == {mm.RESOURCE_ISOLATION_POD}
        assert c.admit(mixed_pod()).admitted  # idempotent on the taken-over entry
        assert served(c)[2] == pods


def cli(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numamem", *args, "--socket", d.socket],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
    )  # fmt: skip


def test_the_cli_reads_spec_resources_and_explain_shows_the_budget_and_a_refusal(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory, *GATES)
    explained = cli(d, "explain", "-f", "examples/pod-level.yaml")
    assert explained.returncode == 0, explained.stderr
    assert "pod-level budget: memory 8Gi" in explained.stdout
    assert "memory of their own: log-agent (memory 512Mi), db (memory 4Gi)" in explained.stdout
    assert "sharing: setup, mesh, exporter" in explained.stdout
    assert "shared pool: memory 3.50Gi" in explained.stdout
    out = cli(d, "admit", "--no-start", "-f", "examples/pod-level.yaml")
    assert out.returncode == 0, out.stderr
    assert "pod-level allocation (the pod's budget): memory 8Gi on 0" in out.stdout
    with NumamemClient(d.socket) as c:
        [uid] = c.get_state().entries
        assert c.get_pod_memory(uid).allocated
        # A budget its exclusive containers use up, with a shared container: refused by the
        # pod-scope hints (no possible affinity) or by AllocatePod, with the kubelet's reason.
        full = mixed_pod()
        full.uid = "full"
        for key in ("memory",):
            full.requests[key] = full.limits[key] = "4608Mi"  # 512Mi + 4Gi, nothing shared
        explanation = c.explain(full)
        assert explanation.pod_level.rejection == (
            "pod rejected, sum of exclusive container memory requests equals pod budget, "
            "leaving no memory for shared containers"
        )
        resp = c.admit(full)
        assert not resp.admitted
        assert resp.reason == "TopologyAffinityError"  # single-numa-node: the empty hint lists
        assert "full" not in c.get_state().entries
        # AllocatePod itself (the kubelet's admit reason EmptyPodSharedPoolError), and a regular
        # init container without requests when the sidecars use up the budget.
        init_starved = mixed_pod()
        init_starved.uid = "init-starved"
        init_starved.requests["memory"] = init_starved.limits["memory"] = "512Mi"
        del (
            init_starved.containers[0].requests["memory"],
            init_starved.containers[0].limits["memory"],
        )
        del init_starved.containers[0].requests[HP], init_starved.containers[0].limits[HP]
        for pod, text in [
            (full, explanation.pod_level.rejection),
            (
                init_starved,
                "pod rejected, pod has shared init containers but no memory available for them",
            ),
        ]:
            with pytest.raises(grpc.RpcError) as info:
                c.allocate_pod(pod)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error_reason(info.value) == "EMPTY_POD_SHARED_POOL"
            assert info.value.details() == text
        assert set(c.get_state().entries) == {uid}
