"""The MemoryManager service on the real daemon (subprocess): walk-through, restarts, refusals,
concurrency."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest

from numamem.api.convert import state_from_proto
from numamem.checkpoint import kubelet
from numamem.client import NumamemClient
from numamem.memorymanager.state.invariants import violations
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import FakeNode, standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import REPO, STATIC_ARGS, grpcurl, run_together, serve_to_exit

pytestmark = pytest.mark.e2e
GI = 1024**3


def start(
    root: Path,
    factory: list[DaemonProcess],
    nodes: list[FakeNode] | None = None,
    extra: list[str] | None = None,
) -> DaemonProcess:
    sysfs = root / "sys"
    if not sysfs.exists():
        write_sysfs(sysfs, nodes or standard_nodes(2))
    d = DaemonProcess(root, ["--sysfs-root", str(sysfs), *STATIC_ARGS, *(extra or [])])
    factory.append(d)
    return d.start()


def cli(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numamem", *args, "--socket", d.socket],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_readme_walk_through(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    """topology, admit the example pod, see its blocks and the table, release it; then with grpcurl."""
    d = start(short_root, daemon_factory)
    assert cli(d, "topology").returncode == 0
    out = cli(d, "admit", "-f", "examples/pod-guaranteed.yaml")
    assert out.returncode == 0, out.stderr
    assert "pod 6f1c2a9e-0000-4000-8000-000000000001 admitted" in out.stdout
    assert any(
        line.split()[:2] == ["app", "any"] and "memory 1Gi on 0" in line
        for line in out.stdout.splitlines()
    )
    state = cli(d, "state").stdout
    assert "6f1c2a9e-0000-4000-8000-000000000001  app" in state
    assert "setup" not in state.split("POD", 1)[1]  # starting the app freed the init container
    [ids_line] = [line for line in out.stdout.splitlines() if line.startswith("container ids: ")]
    ids = ids_line.removeprefix("container ids: ").split()
    assert ids == [  # the init container's memory went when the app started
        "6f1c2a9e-0000-4000-8000-000000000001/app",
        "6f1c2a9e-0000-4000-8000-000000000001/sidecar-log",
    ]
    assert cli(d, "release", *ids).returncode == 0
    assert "POD" not in cli(d, "state").stdout
    # The same through grpcurl.
    body = json.dumps(
        {
            "pod": {
                "uid": "g1",
                "containers": [
                    {
                        "name": "c",
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    }
                ],
            }
        }
    )
    admit = grpcurl(d.socket, "numamem.v1.MemoryManager/Admit", opts=["-d", body])
    assert json.loads(admit.stdout)["admitted"] is True
    state_json = json.loads(grpcurl(d.socket, "numamem.v1.MemoryManager/GetState").stdout)
    assert state_json["entries"]["g1"]["containers"]["c"]["blocks"][0]["size"] == str(GI)
    big = cli(d, "admit", "-f", "examples/pod-too-big.yaml")
    assert big.returncode == 3
    assert "rejected: UnexpectedAdmissionError" in big.stdout
    why = cli(d, "explain", "-f", "examples/pod-too-big.yaml")
    assert why.returncode == 3, why.stderr
    assert "would be rejected: UnexpectedAdmissionError" in why.stdout
    assert "{0,1}  no       memory: 21Gi allocatable < 64Gi requested" in why.stdout
    why_json = json.loads(cli(d, "explain", "-f", "examples/pod-too-big.yaml", "--json").stdout)
    assert why_json["decision"]["admitted"] is False
    assert len(why_json["containers"][0]["masks"]) == 3
    explained = json.loads(
        grpcurl(d.socket, "numamem.v1.MemoryManager/Explain", opts=["-d", body]).stdout
    )
    assert explained["decision"]["admitted"] is True
    nope = cli(d, "release", "nope", "--json")
    assert nope.returncode == 1
    assert json.loads(nope.stdout) == {"released": [], "not_found": ["nope"]}
    # grpcurl prints proto3 JSON, which leaves out `admitted: false`: the result enum shows.
    too_big = json.dumps(
        {
            "pod": {
                "uid": "huge",
                "containers": [
                    {
                        "name": "c",
                        "requests": {"memory": "64Gi"},
                        "limits": {"memory": "64Gi", "cpu": "1"},
                    }
                ],
            }
        }
    ).replace('"requests": {"memory": "64Gi"}', '"requests": {"memory": "64Gi", "cpu": "1"}')
    rejected = json.loads(
        grpcurl(d.socket, "numamem.v1.MemoryManager/Admit", opts=["-d", too_big]).stdout
    )
    assert rejected["result"] == "REJECTED" and "admitted" not in rejected
    assert rejected["reason"] == "UnexpectedAdmissionError"
    assert json.loads(admit.stdout)["result"] == "ADMITTED"


def test_validation_error_through_grpcurl(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    body = json.dumps(
        {
            "pod": {"uid": "p", "containers": [{"name": "a", "limits": {"memory": "1Gb"}}]},
            "container_name": "a",
        }
    )
    out = grpcurl(d.socket, "numamem.v1.MemoryManager/Allocate", opts=["-d", body])
    assert out.returncode == 64 + 3
    assert (
        'pod.containers[0].limits[\\"memory\\"]' in out.stderr
        or 'pod.containers[0].limits["memory"]' in out.stderr
    )


def guaranteed(uid: str, memory: str, containers: int = 1) -> mm.Pod:
    """A Guaranteed pod of ``containers`` containers ``c0``, ``c1``...: 1 CPU and ``memory`` each."""
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(
        uid=uid,
        containers=[
            mm.Container(name=f"c{i}", requests=res, limits=res) for i in range(containers)
        ],
    )


def admit(client: NumamemClient, uid: str, memory: str, containers: int = 1) -> mm.AdmitResponse:
    return client.admit(guaranteed(uid, memory, containers))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_restart_in_the_middle_restores_identical_state(
    short_root: Path, daemon_factory: list[DaemonProcess], sig: int
) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as client:
        for i in range(4):
            assert admit(client, f"p{i}", "2Gi", containers=2).admitted
        pod0 = guaranteed("p0", "2Gi", containers=2)  # as admitted
        client.add_container(pod0, "c0", "id-p0-c0")
        before = client.get_state()
    d.stop(sig)
    d.start()
    with NumamemClient(d.socket) as client:
        assert client.get_state() == before
        client.remove_container("id-p0-c0")  # the container map survived the restart
        assert client.get_memory("p0", "c0") == []
        assert client.get_memory("p0", "c1") != []


def test_corrupt_state_refuses_start_with_the_fix(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    d.stop()
    state_file = Path(d.state_dir) / "memory_manager_state"
    state_file.write_bytes(state_file.read_bytes().replace(b'"checksum":', b'"checksum":1'))
    out = d.run_to_exit("--sysfs-root", str(short_root / "sys"), *STATIC_ARGS)
    assert out.returncode == 1
    line = out.stderr.strip().splitlines()[-1]
    assert "could not restore state from checkpoint: checkpoint is corrupted" in line
    assert (
        f'please drain this node and delete the memory manager checkpoint file "{state_file}"'
        in line
    )


def test_policy_change_refuses_start(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    d = start(short_root, daemon_factory)
    d.stop()
    out = d.run_to_exit("--sysfs-root", str(short_root / "sys"))
    assert out.returncode == 1
    assert (
        '[memorymanager] configured policy "None" differs from state checkpoint policy "Static"'
        in out.stderr
    )


def test_changed_machine_refuses_start_only_with_the_kubelets_rule(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """A node whose MemTotal changed (kubernetes#131253) no longer validates under
    memory-drift-tolerance=off; the default (fit) restarts (tests/e2e/test_restart_drift.py
    has every change and tolerance)."""
    d = start(short_root, daemon_factory)
    d.stop()
    write_sysfs(short_root / "sys", standard_nodes(2, memory_gib=15))
    off = ["--memory-manager-policy-options", "memory-drift-tolerance=off"]
    out = d.run_to_exit("--sysfs-root", str(short_root / "sys"), *STATIC_ARGS, *off)
    assert out.returncode == 1
    assert "[memorymanager] the expected machine state is different from the real one" in out.stderr
    assert (
        "node 0 memory TotalMemSize: stored 16Gi (17179869184), now 15Gi (16106127360)"
        in out.stderr
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--reserved-memory", "0:memory=2Gi", "--system-reserved", "memory=924Mi"],
            'the total amount "2Gi" of type "memory" is not equal to the value "1Gi" determined by Node Allocatable feature',
        ),
        (
            ["--reserved-memory", "0:memory=1Gi"],
            'the total amount "1Gi" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature',
        ),
        (
            ["--reserved-memory", "5:memory=100Mi"],
            "the reserved memory configuration references a NUMA node 5 that does not exist on this machine",
        ),
        (
            ["--reserved-memory", "0:memory=100Mi,cpu=1"],
            'invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted',
        ),
        (
            ["--reserved-memory", "0:memory=0;0:memory=100Mi"],
            '[invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory", '
            'invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory"]',
        ),
        (["--eviction-hard", ""], "[memorymanager] you should specify the system reserved memory"),
        (
            [
                "--reserved-memory",
                "0:memory=100Mi",
                "--topology-manager-policy-options",
                "max-allowable-numa-nodes=4",
            ],
            'the minimum value of "max-allowable-numa-nodes" should not be less than 8',
        ),
    ],
)
def test_configuration_refusals(short_root: Path, flags: list[str], message: str) -> None:
    """Rules across values refuse the start (exit 1, ``numamem: ``); one flag's value that is
    out of range is a usage error (exit 2, ``numamem serve: error: ``), the kubelet's text in
    both."""
    out = serve_to_exit(short_root, "--memory-manager-policy", "Static", *flags)  # 2 fake nodes
    usage = "max-allowable-numa-nodes" in message  # the one flag value out of range here
    assert out.returncode == (2 if usage else 1), out.stderr
    lines = out.stderr.strip().splitlines()
    prefix = "numamem serve: error: " if usage else "numamem: "
    refusal = next(line for line in reversed(lines) if line.startswith(prefix))
    assert message in refusal
    if "determined by Node Allocatable feature" in message:
        assert lines[-1].startswith("  fix: this passes: --reserved-memory '0:memory=")


def test_concurrent_admissions_never_overcommit(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """8 client threads admit and release pods on a small machine; the final state is what they were told."""
    nodes = standard_nodes(2, memory_gib=6, hugepages={})
    d = start(short_root, daemon_factory, nodes, ["--topology-manager-policy", "best-effort"])
    admitted: set[str] = set()
    lock = threading.Lock()
    errors: list[str] = []

    def worker(n: int) -> None:
        rng = random.Random(n)
        with NumamemClient(d.socket) as client:
            mine: list[str] = []
            for i in range(25):
                if mine and rng.random() < 0.4:
                    uid = mine.pop(rng.randrange(len(mine)))
                    pod = mm.Pod(uid=uid, containers=[mm.Container(name="c0")])
                    client.add_container(pod, "c0", uid)
                    client.remove_container(uid)
                    with lock:
                        admitted.discard(uid)
                    continue
                uid = f"w{n}-{i}"
                try:
                    resp = admit(client, uid, f"{rng.choice([256, 512, 1024, 1536])}Mi")
                except grpc.RpcError as err:
                    errors.append(f"{uid}: {err.code()} {err.details()}")
                    continue
                if resp.admitted:
                    mine.append(uid)
                    with lock:
                        admitted.add(uid)
                state = client.get_state()
                check_state(state)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    run_together(threads)
    assert errors == []
    with NumamemClient(d.socket) as client:
        final = client.get_state()
    check_state(final)
    assert set(final.entries) == admitted
    # And the file on disk says the same.
    loaded = kubelet.load((Path(d.state_dir) / "memory_manager_state").read_bytes())
    assert set(loaded.assignments) == admitted


def check_state(state: mm.GetStateResponse) -> None:
    machine, entries = state_from_proto(state)
    problems = violations(machine, entries)
    assert problems == [], problems
    for node in machine.values():
        for table in (node.memory_map or {}).values() if node else ():
            assert table.reserved <= table.allocatable  # never over-committed
