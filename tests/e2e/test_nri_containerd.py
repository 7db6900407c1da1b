"""``numamem nri`` (the command, external mode) against the REAL containerd 1.7 and 2.x, pods
driven through the CRI as the kubelet drives them (tests/containerd), and the real daemon on
this machine's topology.

This machine has one NUMA node: every decision is node 0, so these tests prove the plumbing
(the runtime applies numamem's cpuset.mems, fails a creation with numamem's reason, carries
a resize to numamem, and numamem survives restarts of either side); the multi-node decisions
are proven on fake machines through the same code with the scripted runtime
(test_nri_kubelet_semantics.py, test_nri_lifecycle.py, test_nri_reconcile.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from numamem.api.convert import state_from_proto
from numamem.client import NumamemClient
from numamem.memorymanager.state.invariants import violations
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import podresources_pb2, podresources_pb2_grpc
from tests.containerd.cri import CriError, Resources
from tests.containerd.instance import Containerd, Distribution
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec, memory_capacity
from tests.daemon import REPO, STATIC_ARGS
from tests.e2e.nri_node import held

pytestmark = [pytest.mark.containerd, pytest.mark.e2e]

MIB = 1 << 20
EXITS = ("/bin/sh", "-c", "exit 0")


@dataclass
class Numamem:
    """The daemon (on this machine's /sys and cgroups) and ``numamem nri`` beside it."""

    root: Path
    daemon: DaemonProcess
    client: NumamemClient
    nri_socket: Path
    plugin: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start_plugin(self) -> None:
        self.log = self.root / f"nri-{time.monotonic_ns()}.log"
        with self.log.open("wb") as err:
            self.plugin = subprocess.Popen(
                [
                    sys.executable, "-m", "numamem", "nri",
                    "--nri-socket", str(self.nri_socket),
                    "--socket", self.daemon.socket,
                    "--log-format", "console",
                    "--log-level", "debug",
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )  # fmt: skip
        self.wait_log("NRI plugin registered", 1)

    def plugin_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None else ""

    def wait_log(self, text: str, count: int, timeout: float = 30.0) -> None:
        wait_until(
            lambda: self.plugin_log().count(text) >= count, f"{text!r} x{count}", timeout, self
        )

    def stop_plugin(self) -> int:
        assert self.plugin is not None
        self.plugin.send_signal(signal.SIGTERM)
        return self.plugin.wait(30)

    def held(self) -> dict[str, set[str]]:
        return held(self.client)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, nm: Numamem | None = None
) -> None:
    """Poll ``check`` (a bound against hanging, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tail = nm.plugin_log()[-3000:] if nm is not None else ""
            raise AssertionError(f"not within {timeout} s: {what}\n{tail}")
        time.sleep(0.05)


@contextmanager
def numamem_beside(containerd: Containerd, root: Path, *flags: str) -> Iterator[Numamem]:
    """The daemon on this machine's topology (Static, single-numa-node; ``flags`` more), its
    files under ``root``, and ``numamem nri`` (external) registered with ``containerd``;
    the plugin and the daemon are killed on exit."""
    args = [
        *STATIC_ARGS,
        "--sysfs-root", "/sys",
        "--cgroup-root", "/sys/fs/cgroup",
        "--topology-manager-policy", "single-numa-node",
        *flags,
    ]  # fmt: skip
    daemon = DaemonProcess(root, args).start()
    nm = Numamem(
        root, daemon, NumamemClient(daemon.socket, timeout=10), containerd.layout.nri_socket
    )
    try:
        nm.start_plugin()
        yield nm
    finally:
        if nm.plugin is not None and nm.plugin.poll() is None:
            nm.plugin.kill()
            nm.plugin.wait()
        nm.client.close()
        daemon.kill()


@pytest.fixture
def numamem(containerd: Containerd) -> Iterator[Numamem]:
    root = short_tmpdir()
    podresources = ["--podresources-socket", str(root / "podresources.sock")]
    with numamem_beside(containerd, root, *podresources, "--metric-interval", "0.2") as nm:
        yield nm


def podresources_names(nm: Numamem) -> set[tuple[str, str]]:
    with grpc.insecure_channel(f"unix://{nm.root / 'podresources.sock'}") as channel:
        listed = podresources_pb2_grpc.PodResourcesListerStub(channel).List(
            podresources_pb2.ListPodResourcesRequest(), timeout=10
        )
    return {(p.namespace, p.name) for p in listed.pod_resources}


def guaranteed(name: str, memory: int, *inits: ContainerSpec) -> PodSpec:
    return PodSpec(name, (ContainerSpec.guaranteed("app", 250, memory),), init_containers=inits)


def assert_pinned_to_node_0(kubelet: Kubelet, nm: Numamem, uid: str, cid: str) -> None:
    """numamem's decision is what the container got: host cgroup, the kernel, the CRI spec."""
    assert nm.client.get_memory_numa_nodes(uid, "app") == [0]
    reading = kubelet.cpuset(cid)
    assert (reading.cpuset_mems, reading.mems_allowed_list) == ("0", "0")
    assert kubelet.status_inside(cid)["Mems_allowed_list"] == "0"
    cpu = kubelet.cri.runtime_spec(cid)["linux"]["resources"]["cpu"]
    assert cpu["mems"] == "0"  # numamem's adjustment: the CRI request had none
    assert "cpus" not in cpu  # never touched: the kubelet's CPU manager's


def test_pods_are_pinned_rejected_and_resized_through_the_real_runtime(
    containerd: Containerd, kubelet: Kubelet, numamem: Numamem, report: list[str]
) -> None:
    nm = numamem
    pod = guaranteed("web", 64 * MIB, ContainerSpec.guaranteed("init", 250, 32 * MIB, EXITS))
    running = kubelet.run_pod(pod)
    cid = running.containers["app"]
    assert_pinned_to_node_0(kubelet, nm, pod.uid, cid)
    state = nm.client.get_state()
    assert (state.entries[pod.uid].namespace, state.entries[pod.uid].name) == ("default", "web")
    assert set(state.entries[pod.uid].containers) == {"app"}  # the init container was freed
    shown = subprocess.run(
        [sys.executable, "-m", "numamem", "state", "--socket", nm.daemon.socket],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert pod.uid in shown and "default/web" in shown
    with grpc.insecure_channel(f"unix://{nm.root / 'podresources.sock'}") as channel:
        listed = podresources_pb2_grpc.PodResourcesListerStub(channel).List(
            podresources_pb2.ListPodResourcesRequest(), timeout=10
        )
        got = podresources_pb2_grpc.PodResourcesListerStub(channel).Get(
            podresources_pb2.GetPodResourcesRequest(pod_name="web", pod_namespace="default"),
            timeout=10,
        )
    # Named from the sandbox's real names (what NFD and the merge with the kubelet key on).
    [entry] = [p for p in listed.pod_resources if p.name == "web"]
    assert entry.namespace == "default"
    assert [m.size for c in entry.containers if c.name == "app" for m in c.memory] == [64 * MIB]
    assert (got.pod_resources.namespace, got.pod_resources.name) == ("default", "web")
    wait_until(
        lambda: any(r.status == mm.RESIDENCY_MEASURED for r in nm.client.get_residency(pod.uid)),
        "a residency measurement of the app container",
        30,
        nm,
    )
    [residency] = nm.client.get_residency(pod.uid)
    assert (residency.pod_name, residency.pod_namespace, residency.container_id) == (
        "web",
        "default",
        cid,
    )
    assert list(residency.cpuset_mems) == [0]
    assert residency.cpuset_mems_state == mm.CPUSET_MEMS_MATCHES

    # A pod the policy rejects: more memory than node 0 has.
    too_big = guaranteed("too-big", memory_capacity() * 2)
    rejected = kubelet.run_pod(too_big, containers=False)
    with pytest.raises(CriError) as caught:
        kubelet.start(rejected, too_big.containers[0])
    details = caught.value.details
    for part in (
        "numamem did not admit container 'app'",
        f"default/too-big (uid {too_big.uid})",
        "memory",
        "numamem explain",
    ):
        assert part in details, (part, details)
    assert too_big.uid not in nm.held()
    kubelet.remove_pod(rejected)

    # An in-place resize is decided by numamem (and one it refuses fails with its reason).
    def resources(memory: int) -> Resources:
        return Resources(
            cpu_period=100_000, cpu_quota=25_000, cpu_shares=256, memory_limit_in_bytes=memory
        )

    kubelet.cri.update_container_resources(cid, resources(96 * MIB))
    assert [b.size for b in nm.client.get_memory(pod.uid, "app")] == [96 * MIB]
    assert kubelet.cpuset(cid).cpuset_mems == "0"
    with pytest.raises(CriError) as caught:
        kubelet.cri.update_container_resources(cid, resources(memory_capacity() * 2))
    assert "numamem refused the resize of container 'app'" in caught.value.details
    assert [b.size for b in nm.client.get_memory(pod.uid, "app")] == [96 * MIB]

    assert kubelet.remove_pod(running) == []
    assert nm.held() == {}
    assert nm.stop_plugin() == 0
    report.append(
        f"numamem nri on {containerd.dist.describe()}: pod with an init container "
        f"{running.seconds['sandbox']:.2f} s sandbox, init {running.seconds['init']:.2f} s, "
        f"app {running.seconds['app']:.2f} s (CreateContainer+StartContainer through numamem)"
    )


def test_daemon_sigkill_and_runtime_restart_lose_nothing(
    containerd: Containerd, kubelet: Kubelet, numamem: Numamem
) -> None:
    nm = numamem
    a, b = guaranteed("a", 64 * MIB), guaranteed("b", 64 * MIB)
    run_a, run_b = kubelet.run_pod(a), kubelet.run_pod(b)
    assert nm.held() == {a.uid: {"app"}, b.uid: {"app"}}

    nm.daemon.stop(signal.SIGKILL)  # the daemon dies while the pods run ...
    kubelet.remove_pod(run_b)  # ... and the runtime removes one: the release cannot be made
    nm.daemon.start()
    wait_until(lambda: nm.held() == {a.uid: {"app"}}, "b released by the reconciliation", 30, nm)

    containerd.restart()  # external plugins are dropped: it reconnects and resynchronizes
    nm.wait_log("NRI plugin registered", 2)
    assert nm.held() == {a.uid: {"app"}}
    assert_pinned_to_node_0(kubelet, nm, a.uid, run_a.containers["app"])
    c = guaranteed("c", 32 * MIB)
    run_c = kubelet.run_pod(c)
    assert_pinned_to_node_0(kubelet, nm, c.uid, run_c.containers["app"])
    machine, entries = state_from_proto(nm.client.get_state())
    assert violations(machine, entries) == []
    assert set(entries) == {a.uid, c.uid}
    assert podresources_names(nm) == {("default", "a"), ("default", "c")}  # kept across the kill
    assert nm.plugin is not None and nm.plugin.poll() is None  # never crashed
    assert "Traceback" not in nm.plugin_log()


def readme_nri_stanza() -> dict[str, object]:
    """The containerd 1.7 stanza docs/operator-guide.md gives (its TOML block after
    "containerd **1.7**")."""
    text = (REPO / "docs" / "operator-guide.md").read_text()
    after = text.split("containerd **1.7** needs", 1)[1]
    block = after.split("```toml\n", 1)[1].split("```", 1)[0]
    section: dict[str, object] = tomllib.loads(block)["plugins"]["io.containerd.nri.v1.nri"]
    return section


def test_the_readmes_nri_stanza_is_this_containerds_default_with_nri_enabled(
    containerd_dist: Distribution,
) -> None:
    """1.7: the operator guide's stanza is the build's own default section (same keys and values)
    with NRI enabled; 2.x: NRI is on in its default, so it needs none."""
    out = subprocess.run(
        [str(containerd_dist.bin / "containerd"), "config", "default"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    default = tomllib.loads(out)["plugins"]["io.containerd.nri.v1.nri"]
    if containerd_dist.major < 2:
        assert default["disable"] is True
        assert readme_nri_stanza() == {**default, "disable": False}
    else:
        assert default["disable"] is False
