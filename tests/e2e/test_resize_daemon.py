"""In-place resize of pinned memory (issue 30) on the real daemon: the issue's "done when"
scenario (grow in the group, grow by extending it, shrink, SIGKILL, a kubelet-format
restore), every refusal's vocabulary, the CLI, and explain --resize."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import grpc
import pytest

from numamem.checkpoint import kubelet
from numamem.client import NumamemClient, error_reason
from numamem.config.model import FeatureGates
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.drift import EXACT
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.model import MemoryState
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS
from tests.e2e.test_memorymanager_daemon import check_state, cli

pytestmark = pytest.mark.e2e
GI = 1024**3
HP_1G = 1048576
EXACT_RESTORE = ["--memory-manager-policy-options", "memory-drift-tolerance=off"]


def start(root: Path, factory: list[DaemonProcess], state: str = "") -> DaemonProcess:
    """3 nodes of 8Gi with one 1Gi page each: memory allocatable 6Gi on node 0, 7Gi on 1, 2."""
    sysfs = root / "sys"
    if not sysfs.exists():
        write_sysfs(sysfs, standard_nodes(3, memory_gib=8, hugepages={HP_1G: (1, 1)}))
    d = DaemonProcess(root, ["--sysfs-root", str(sysfs), *STATIC_ARGS, *EXACT_RESTORE])
    if state:
        Path(d.state_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(state, Path(d.state_dir) / "memory_manager_state")
    factory.append(d)
    return d.start()


def pod(uid: str, memory: str, hugepages: str = "", cpu_limit: str = "1") -> mm.Pod:
    requests = {"cpu": "1", "memory": memory}
    if hugepages:
        requests["hugepages-1Gi"] = hugepages
    limits = dict(requests, cpu=cpu_limit)
    return mm.Pod(uid=uid, containers=[mm.Container(name="app", requests=requests, limits=limits)])


def refusal(client: NumamemClient, p: mm.Pod) -> tuple[grpc.StatusCode, str | None, str]:
    with pytest.raises(grpc.RpcError) as info:
        client.resize(p, "app")
    err = info.value
    return err.code(), error_reason(err), err.details() or ""


def reference_validate(state_file: Path) -> kubelet.Loaded:
    """The kubelet's validateState (drift tolerance off) on the written file."""
    loaded = kubelet.load(state_file.read_bytes())
    # The fake machine: what validateState's default state is built from.
    machine = Machine(tuple(NUMANode(i, 8 * GI, (HugePagePool(HP_1G, 1, 1),)) for i in range(3)))
    policy = StaticPolicy(machine, {0: {"memory": GI}}, options=StaticOptions(EXACT))
    restored = MemoryState(loaded.machine_state, loaded.assignments)
    work = restored.fork()
    policy.start(work)
    assert work.same_as(restored), "validateState changed the state"
    assert violations(loaded.machine_state, loaded.assignments) == []
    return loaded


def test_done_when_grow_extend_shrink_kill_restore(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    state_file = Path(d.state_dir) / "memory_manager_state"
    with NumamemClient(d.socket) as client:
        assert client.admit(pod("p", "4Gi")).admitted
        assert client.get_memory_numa_nodes("p", "app") == [0]
        # 1. grow in its group: node 0 holds 6Gi
        grown = client.resize(pod("p", "6Gi"), "app")
        assert grown.action == mm.RESIZE_GROWN_IN_GROUP
        assert (grown.previous_memory, grown.memory) == (4 * GI, 6 * GI)
        assert list(grown.numa_nodes) == [0] and not grown.affinity_changed
        assert [(list(b.numa_affinity), b.size) for b in grown.blocks] == [([0], 6 * GI)]
        reference_validate(state_file)
        # 2. a size that needs a second node: the group extends to {0,1}
        wider = client.resize(pod("p", "10Gi"), "app")
        assert wider.action == mm.RESIZE_GROWN_BY_EXTENSION
        assert wider.affinity_changed
        assert (list(wider.previous_numa_nodes), list(wider.numa_nodes)) == ([0], [0, 1])
        assert [(r.pod_uid, r.container_name) for r in wider.moved] == [("p", "app")]
        assert client.get_memory_numa_nodes("p", "app") == [0, 1]
        state = client.get_state()
        check_state(state)
        assert list(state.machine_state[1].cells) == [0, 1]
        assert state.machine_state[1].number_of_assignments == 1
        assert state.machine_state[1].memory_map["memory"].reserved == 4 * GI
        loaded = reference_validate(state_file)
        assert loaded.assignments["p"]["app"][0].numa_affinity == (0, 1)
        # Another pod takes node 2: growing further is Deferred (it fits once that pod leaves).
        assert client.admit(pod("q", "5Gi")).admitted
        assert client.get_memory_numa_nodes("q", "app") == [2]
        code, reason, message = refusal(client, pod("p", "16Gi"))
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESIZE_DEFERRED")
        assert message.startswith("Deferred: pod 'p', container 'app': memory 10Gi -> 16Gi")
        assert "no node outside [0, 1] can join it (node 2 is used by the group [2])" in message
        # More than the machine holds even alone: Infeasible, with the most it could get.
        code, reason, message = refusal(client, pod("p", "30Gi"))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RESIZE_INFEASIBLE")
        assert "even if every other pod left" in message
        assert "resize to at most 20Gi (21474836480)" in message
        # The API server's rules: no hugepage resize, no QoS change.
        code, reason, message = refusal(client, pod("p", "10Gi", hugepages="1Gi"))
        assert reason == "RESIZE_INFEASIBLE"
        assert "the API server does not allow hugepage resize" in message
        code, reason, message = refusal(client, pod("p", "10Gi", cpu_limit="2"))
        assert reason == "RESIZE_INFEASIBLE"
        assert "QoS class is Burstable, it was Guaranteed" in message
        before_refusals = state_file.read_bytes()
        # 3. shrink back: the blocks shrink, the group stays {0,1}
        shrunk = client.resize(pod("p", "4Gi"), "app")
        assert shrunk.action == mm.RESIZE_SHRUNK
        assert list(shrunk.numa_nodes) == [0, 1]
        assert state_file.read_bytes() != before_refusals
        after = state_file.read_bytes()
        # Idempotent: the same size again writes nothing.
        same = client.resize(pod("p", "4Gi"), "app")
        assert same.action == mm.RESIZE_UNCHANGED
        assert state_file.read_bytes() == after
        final = client.get_state()
        check_state(final)
        reference_validate(state_file)
    # 4. SIGKILL: the restart restores exactly what was acknowledged
    d.stop(signal.SIGKILL)
    d.start()
    with NumamemClient(d.socket) as client:
        assert client.get_state() == final
        assert client.get_memory_numa_nodes("p", "app") == [0, 1]
    # 5. a kubelet-format restore: only the kubelet's file, in a new state dir, validated
    # as the kubelet does (drift tolerance off)
    other = start(short_root / "kubelet", daemon_factory, state=str(state_file))
    with NumamemClient(other.socket) as client:
        restored = client.get_state()
        assert restored.machine_state == final.machine_state
        assert restored.entries["p"].containers == final.entries["p"].containers
        # and it resizes on from there: back to 10Gi in the extended group
        again = client.resize(pod("p", "10Gi"), "app")
        assert again.action == mm.RESIZE_GROWN_IN_GROUP
        assert list(again.numa_nodes) == [0, 1]


def test_cli_resize_and_explain_resize(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    example = "examples/pod-resize.yaml"
    uid = "6f1c2a9e-0000-4000-8000-00000000d0b0"
    assert cli(d, "admit", "-f", example).returncode == 0
    why = cli(d, "explain", "--resize", "-f", example, "--memory", "10Gi")
    assert why.returncode == 0, why.stderr
    assert "the resize would be:" in why.stdout
    assert "grown by extending its NUMA group" in why.stdout
    rows = [line.split(None, 2) for line in why.stdout.splitlines() if line.startswith("  0,")]
    assert rows == [
        ["0,1", "yes", "taken: the narrowest superset that fits"],
        ["0,2", "no", "fits, but [0, 1] is a lower mask"],
    ]
    explained = json.loads(
        cli(d, "explain", "--resize", "-f", example, "--memory", "10Gi", "--json").stdout
    )
    assert explained["decision"]["action"] == "RESIZE_GROWN_BY_EXTENSION"
    assert cli(d, "state", "--json").returncode == 0
    out = cli(d, "resize", "-f", example, "--memory", "6Gi")
    assert out.returncode == 0, out.stderr
    assert "grown in its NUMA group" in out.stdout
    assert "memory: 4Gi -> 6Gi" in out.stdout
    out = cli(d, "resize", "-f", example, "--memory", "10Gi")
    assert out.returncode == 0, out.stderr
    assert "affinity changed: 0 -> 0,1" in out.stdout
    assert f"new cpuset.mems 0,1 for: {uid}/db" in out.stdout
    refused = cli(d, "resize", "-f", example, "--memory", "64Gi")
    assert refused.returncode == 3
    assert refused.stdout.startswith("Infeasible: pod ")
    why = cli(d, "explain", "--resize", "-f", example, "--memory", "64Gi")
    assert why.returncode == 3
    assert "the resize would be refused: Infeasible: " in why.stdout
    assert cli(d, "resize", "-f", example).stdout.startswith("shrunk")  # the manifest's 4Gi
    bad = cli(d, "resize", "-f", example, "--container", "nope", "--memory", "1Gi")
    assert bad.returncode == 2
    assert "--container 'nope' is not in the pod" in bad.stderr


POD_LEVEL = [
    "--feature-gates",
    "PodLevelResources=true,PodLevelResourceManagers=true",
    "--topology-manager-policy",
    "best-effort",
    "--topology-manager-scope",
    "pod",
]


def pod_level_pod(budget: str, db: str) -> mm.Pod:
    """A pod-level pod: db has memory of its own, web shares the rest of the budget."""
    own = {"cpu": "1", "memory": db}
    return mm.Pod(
        uid="plp",
        namespace="ns",
        name="plp",
        containers=[
            mm.Container(name="db", requests=own, limits=dict(own)),
            mm.Container(name="web"),
        ],
        requests={"cpu": "4", "memory": budget},
        limits={"cpu": "4", "memory": budget},
    )


def test_pod_level_budget_grow_kill_restart(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """The budget of a pod allocated as a whole grows (in its group, then by extension),
    SIGKILL, and the restart reads the V3 file back exactly; the kubelet's validateState
    (replaying the pod-level blocks) passes on it."""
    sysfs = short_root / "sys"
    write_sysfs(sysfs, standard_nodes(3, memory_gib=8, hugepages={HP_1G: (1, 1)}))
    d = DaemonProcess(
        short_root, ["--sysfs-root", str(sysfs), *STATIC_ARGS, *EXACT_RESTORE, *POD_LEVEL]
    )
    daemon_factory.append(d)
    d.start()
    state_file = Path(d.state_dir) / "memory_manager_state"
    with NumamemClient(d.socket) as client:
        assert client.admit(pod_level_pod("4Gi", "1Gi")).admitted
        grown = client.resize(pod_level_pod("6Gi", "1Gi"), "")
        assert grown.action == mm.RESIZE_GROWN_IN_GROUP and grown.pod_level
        assert (grown.previous_pod_memory, grown.pod_memory) == (4 * GI, 6 * GI)
        wider = client.resize(pod_level_pod("9Gi", "2Gi"), "db")
        assert wider.action == mm.RESIZE_GROWN_BY_EXTENSION
        assert list(wider.numa_nodes) == [0, 1]
        assert [(r.pod_uid, r.container_name) for r in wider.moved] == [
            ("plp", "db"),
            ("plp", "web"),
        ]
        assert [(list(b.numa_affinity), b.size) for b in wider.blocks] == [([0, 1], 2 * GI)]
        data = state_file.read_bytes()
        loaded = kubelet.load(data)
        assert [(b.numa_affinity, b.size) for b in loaded.pod_entries["plp"]] == [((0, 1), 9 * GI)]
        machine = Machine(
            tuple(NUMANode(i, 8 * GI, (HugePagePool(HP_1G, 1, 1),)) for i in range(3))
        )
        gates = FeatureGates(True, True)
        policy = StaticPolicy(
            machine, {0: {"memory": GI}}, options=StaticOptions(EXACT), gates=gates
        )
        restored = MemoryState(loaded.machine_state, loaded.assignments, loaded.pod_entries)
        work = restored.fork()
        policy.start(work)
        assert work.same_as(restored), "validateState changed the state"
        assert violations(loaded.machine_state, loaded.assignments, loaded.pod_entries) == []
        final = client.get_state()
        # the API server's rules still refuse what it would: the pool emptied
        with pytest.raises(grpc.RpcError) as info:
            client.resize(pod_level_pod("9Gi", "9Gi"), "db")
        assert error_reason(info.value) == "RESIZE_INFEASIBLE"
        assert "EmptyPodSharedPoolError" in (info.value.details() or "")
        assert state_file.read_bytes() == data
    d.stop(signal.SIGKILL)
    d.start()
    with NumamemClient(d.socket) as client:
        assert client.get_state() == final
        assert client.get_memory_numa_nodes("plp", "web") == [0, 1]
        same = client.resize(pod_level_pod("9Gi", "2Gi"), "")
        assert same.action == mm.RESIZE_UNCHANGED
        shrunk = client.resize(pod_level_pod("5Gi", "2Gi"), "")
        assert shrunk.action == mm.RESIZE_SHRUNK and list(shrunk.numa_nodes) == [0, 1]
    # The CLI: a pod-level pod not admitted has no budget pinned; the resize would do
    # nothing, so explain exits as resize would: 1 (issue 38).
    out = cli(d, "explain", "--resize", "-f", "examples/pod-level.yaml", "--pod-memory", "9Gi")
    assert out.returncode == 1, out.stderr
    assert "not pinned" in out.stdout
