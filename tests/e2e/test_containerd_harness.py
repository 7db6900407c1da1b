"""The containerd harness itself, on the real containerd 1.7 and 2.x (tests/containerd).

Each test runs once per build (the ``containerd_dist`` parameter) on a private instance,
and the fixture's teardown fails the test if the instance left anything behind.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.containerd import cgroups
from tests.containerd.cleanup import mounts_under
from tests.containerd.cri import Resources
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec, QOSClass

pytestmark = pytest.mark.containerd

MiB = 1 << 20


def _root_cpuset() -> tuple[str, str]:
    """The machine's (mems, cpus): what a container gets when nothing narrows it."""
    h = cgroups.cpuset_hierarchy()
    assert h is not None
    if h.version == 1:
        return (
            (h.mount / "cpuset.mems").read_text().strip(),
            (h.mount / "cpuset.cpus").read_text().strip(),
        )
    return (
        (h.mount / "cpuset.mems.effective").read_text().strip(),
        (h.mount / "cpuset.cpus.effective").read_text().strip(),
    )


def _memory_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, rel = line.split(":", 2)
        for h in cgroups.hierarchies():
            if h.version == 1 and "memory" in h.controllers and "memory" in names.split(","):
                return int((h.mount / rel.lstrip("/") / "memory.limit_in_bytes").read_text())
            if h.version == 2 and "memory" in h.controllers and names == "":
                return int((h.mount / rel.lstrip("/") / "memory.max").read_text())
    raise AssertionError(f"no memory cgroup for pid {pid}")


def test_guaranteed_pod_runs_updates_and_is_removed(
    containerd: Containerd, kubelet: Kubelet, report: list[str]
) -> None:
    dist = containerd.dist
    version = containerd.cri().version()
    assert version.runtime_name == "containerd"
    upstream = dist.containerd.version.split("~")[0].split("+")[0]  # 1.7.24~ds1-6 / 2.1.9+ds1-5
    assert version.runtime_version.startswith(upstream), (version, dist.describe())
    with socket.socket(socket.AF_UNIX) as s:  # NRI is enabled: its socket listens
        s.connect(str(containerd.layout.nri_socket))

    pod = PodSpec("guaranteed", (ContainerSpec.guaranteed("app", cpu=500, memory=64 * MiB),))
    assert pod.qos() is QOSClass.GUARANTEED
    running = kubelet.run_pod(pod)
    cid = running.containers["app"]
    status = kubelet.cri.container_status(cid)
    assert status.state == "CONTAINER_RUNNING"
    assert status.labels == {
        "io.kubernetes.pod.name": "guaranteed",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": pod.uid,
        "io.kubernetes.container.name": "app",
    }
    reading = kubelet.cpuset(cid)
    h = cgroups.cpuset_hierarchy()
    assert h is not None
    assert reading.cgroup == h.mount / "kubepods" / f"pod{pod.uid}" / cid
    mems, cpus = _root_cpuset()
    assert (reading.effective_mems, reading.mems_allowed_list) == (mems, mems)
    assert reading.cpus_allowed_list == cpus
    inside = kubelet.status_inside(cid)
    assert inside["Mems_allowed_list"] == mems
    assert inside["Cpus_allowed_list"] == cpus
    assert _memory_limit(reading.pid) == 64 * MiB

    first_cpu, first_mem = cpus.split(",")[0].split("-")[0], mems.split(",")[0].split("-")[0]
    kubelet.cri.update_container_resources(
        cid,
        Resources(
            cpu_period=100_000,
            cpu_quota=50_000,
            cpu_shares=512,
            memory_limit_in_bytes=96 * MiB,
            cpuset_cpus=first_cpu,
            cpuset_mems=first_mem,
        ),
    )
    updated = kubelet.cpuset(cid)
    assert (updated.cpuset_cpus, updated.cpus_allowed_list) == (first_cpu, first_cpu)
    assert (updated.cpuset_mems, updated.mems_allowed_list) == (first_mem, first_mem)
    assert _memory_limit(updated.pid) == 96 * MiB
    recorded = kubelet.cri.container_status(cid).resources
    assert recorded is not None
    assert recorded.memory_limit_in_bytes == 96 * MiB

    assert kubelet.remove_pod(running) == []
    assert kubelet.cri.list_containers() == []
    assert kubelet.cri.list_pod_sandboxes() == []
    assert cgroups.existing(pod.cgroup_parent()) == []
    assert not cgroups.alive(reading.pid)
    report.append(
        f"containerd harness, {dist.describe()}: start {containerd.start_seconds[0]:.2f} s, "
        f"RunPodSandbox {running.seconds['sandbox']:.2f} s, "
        f"CreateContainer+StartContainer {running.seconds['app']:.2f} s"
    )


def test_restart_keeps_containers_and_takes_new_ones(
    containerd: Containerd, kubelet: Kubelet, report: list[str]
) -> None:
    pod = PodSpec("besteffort", (ContainerSpec("first"), ContainerSpec("second")))
    assert pod.qos() is QOSClass.BEST_EFFORT
    running = kubelet.run_pod(pod, containers=False)
    first = kubelet.start(running, pod.containers[0])
    pid = kubelet.cpuset(first).pid
    h = cgroups.cpuset_hierarchy()
    assert h is not None
    assert (
        kubelet.cpuset(first).cgroup
        == h.mount / "kubepods" / "besteffort" / f"pod{pod.uid}" / first
    )

    began = time.monotonic()
    containerd.restart()  # SIGTERM: the shims and the containers live on
    restart = time.monotonic() - began
    assert kubelet.cri.container_status(first).state == "CONTAINER_RUNNING"
    assert kubelet.cpuset(first).pid == pid
    assert containerd.layout.nri_socket.is_socket()
    second = kubelet.start(running, pod.containers[1])
    assert kubelet.cri.container_status(second).state == "CONTAINER_RUNNING"

    containerd.kill()  # a crash, then a start: the same again
    containerd.start()
    assert {c.id for c in kubelet.cri.list_containers(running.sandbox_id)} == {first, second}
    assert kubelet.cpuset(first).pid == pid
    report.append(
        f"containerd harness, containerd {containerd.dist.containerd.version}: "
        f"stop (SIGTERM) + start {restart:.2f} s, starts {[round(s, 2) for s in containerd.start_seconds]}"
    )


def test_cleanup_after_a_crash_leaves_nothing_and_spares_another_instance(
    containerd_factory: Callable[..., Containerd],
) -> None:
    crashed, other = containerd_factory(), containerd_factory()
    pod = PodSpec.of(QOSClass.BURSTABLE, "burstable", memory=16 * MiB, cpu=100)
    assert pod.qos() is QOSClass.BURSTABLE
    running = Kubelet(crashed).run_pod(pod)
    survivor = Kubelet(other)
    other_pod = survivor.run_pod(PodSpec("other", (ContainerSpec("app"),)))
    fp = crashed.remains.footprint()
    cid = running.containers["app"]
    container_pid = survivor.cri.container_status(other_pod.containers["app"]).pid
    assert container_pid
    # What the crashed instance has outside its processes, before: the cleanup must remove it.
    assert len(fp.pids) >= 3  # containerd, its shim(s), the pause and app processes
    assert any(p.is_socket() for p in fp.sockets)  # the shim's, in /run/containerd/s
    assert f"{pod.cgroup_parent()}/{cid}" in fp.cgroups
    assert cgroups.existing(pod.cgroup_parent())
    assert mounts_under(crashed.base)

    crashed.kill()  # nothing can be removed through the CRI now
    assert any(cgroups.alive(p) for p in fp.pids)
    assert crashed.cleanup() == []
    assert not any(cgroups.alive(p) for p in fp.pids)
    assert not any(os.path.lexists(p) for p in fp.sockets)
    assert all(cgroups.existing(rel) == [] for rel in fp.cgroups)
    assert not crashed.base.exists()

    # The other instance and its pod are untouched, and it still runs pods.
    assert survivor.cri.container_status(other_pod.containers["app"]).pid == container_pid
    assert cgroups.existing(other_pod.spec.cgroup_parent())
    more = survivor.run_pod(PodSpec("more", (ContainerSpec("app"),)))
    assert survivor.cri.container_status(more.containers["app"]).state == "CONTAINER_RUNNING"
