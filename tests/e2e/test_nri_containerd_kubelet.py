"""``numamem nri`` against the REAL containerd 1.7 and 2.x where the kubelet does what a
plain pod does not show: its CPU manager's partial updates, Guaranteed containers without a
CFS quota, crash-looping containers across a runtime restart, a later plugin failing a
creation, and a pre-launched plugin's config and log. One containerd per version serves the
module (``shared_containerd``), with one daemon and one external plugin beside it; each test
removes its pods.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from numamem.errors import NriStatusError
from numamem.nri import status
from numamem.nri.handler import CallContext, Handler
from numamem.nri.plugin import Backoff, Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from tests.containerd.cri import CriError, Resources
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec
from tests.daemon import STATIC_ARGS
from tests.e2e.test_nri_containerd import MIB, Numamem, numamem_beside, wait_until

pytestmark = [pytest.mark.containerd, pytest.mark.e2e]

CRASH = ("/bin/sh", "-c", "exit 3")


@pytest.fixture(scope="module")
def nm(shared_containerd: Containerd) -> Iterator[Numamem]:
    """The daemon on this machine's topology and ``numamem nri`` (external) beside it."""
    with numamem_beside(shared_containerd, short_tmpdir()) as numamem:
        yield numamem


@pytest.fixture
def kubelet(shared_containerd: Containerd, nm: Numamem) -> Iterator[Kubelet]:
    yield Kubelet(shared_containerd)
    assert nm.held() == {}, "a test left pods behind"


def test_the_cpu_managers_cpuset_only_update_keeps_the_pinning(
    kubelet: Kubelet, nm: Numamem
) -> None:
    """The kubelet's static CPU manager updates containers with only ``cpuset_cpus`` (after
    every kubelet restart, and shared-pool containers whenever the pool changes): not a
    resize; the update goes through and numamem's decision stays."""
    pod = PodSpec("cpu-managed", (ContainerSpec.guaranteed("app", 250, 64 * MIB),))
    running = kubelet.run_pod(pod)
    cid = running.containers["app"]
    try:
        kubelet.cri.update_container_resources(cid, Resources(cpuset_cpus="0"))
        assert [b.size for b in nm.client.get_memory(pod.uid, "app")] == [64 * MIB]
        reading = kubelet.cpuset(cid)
        assert (reading.cpuset_mems, reading.cpuset_cpus) == ("0", "0")
    finally:
        kubelet.remove_pod(running)


@pytest.mark.parametrize(
    ("quota", "period"),
    [(-1, 100_000), (0, 0)],
    ids=["DisableCPUQuotaWithExclusiveCPUs", "cpuCFSQuota-false"],
)
def test_a_guaranteed_container_without_a_cfs_quota_is_pinned(
    kubelet: Kubelet, nm: Numamem, quota: int, period: int
) -> None:
    """An integer-CPU container under the static CPU manager gets ``cpu_quota = -1`` from a
    kubelet >= 1.33 (DisableCPUQuotaWithExclusiveCPUs); ``cpuCFSQuota: false`` sends none.
    The cgroup parent says Guaranteed; the CPU request comes from the shares."""
    pod = PodSpec("no-quota", (ContainerSpec.guaranteed("app", 1000, 64 * MIB),))
    running = kubelet.run_pod(pod, containers=False)
    config = kubelet.container_config(pod, pod.containers[0])
    config.linux.resources.cpu_quota = quota
    config.linux.resources.cpu_period = period
    (kubelet._log_dir(pod) / "app").mkdir(parents=True, exist_ok=True)
    cid = kubelet.cri.create_container(running.sandbox_id, config, running.sandbox_config)
    running.containers["app"] = cid
    try:
        kubelet.cri.start_container(cid)
        assert nm.held() == {pod.uid: {"app"}}
        assert kubelet.cpuset(cid).cpuset_mems == "0"
    finally:
        kubelet.remove_pod(running)


def test_a_crash_looping_container_keeps_its_memory_across_a_runtime_restart(
    shared_containerd: Containerd, kubelet: Kubelet, nm: Numamem
) -> None:
    """containerd's Synchronize lists no exited container: the plugin keeps the name of a
    pod the runtime still runs (the kubelet keeps its memory until the pod is gone), and
    the kubelet's restart of it (restartCount 1, same sandbox) is pinned again."""
    spec = ContainerSpec.guaranteed("app", 250, 64 * MIB, CRASH)
    pod = PodSpec("crashy", (spec,))
    running = kubelet.run_pod(pod)
    try:
        kubelet.wait_exited(running.containers["app"])
        assert nm.held() == {pod.uid: {"app"}}
        registered = nm.plugin_log().count("NRI plugin registered")
        done = nm.plugin_log().count("NRI reconciliation done")
        shared_containerd.restart()  # drops the external plugin: it reconnects
        nm.wait_log("NRI plugin registered", registered + 1)
        nm.wait_log("NRI reconciliation done", done + 1)
        assert nm.held() == {pod.uid: {"app"}}
        restarted = kubelet.create(running, spec)  # the kubelet's restart after a back-off
        assert kubelet.cri.runtime_spec(restarted)["linux"]["resources"]["cpu"]["mems"] == "0"
        assert nm.held() == {pod.uid: {"app"}}
    finally:
        kubelet.remove_pod(running)


class Failer(Handler):
    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        raise NriStatusError(status.UNKNOWN, "a later plugin says no")


def test_a_creation_a_later_plugin_fails_holds_nothing(
    shared_containerd: Containerd, kubelet: Kubelet, nm: Numamem
) -> None:
    """numamem admits at CreateContainer, then a plugin after it (idx 60) fails the
    creation; containerd undoes it with StopContainer + RemoveContainer (seen on 1.7 and
    2.x), and numamem releases what it admitted."""
    failer = Plugin(
        Failer(),
        name="failer",
        idx="60",
        socket_path=str(shared_containerd.layout.nri_socket),
        backoff=Backoff(0.05, 0.2),
    )
    thread = threading.Thread(target=failer.run)
    thread.start()
    pod = PodSpec("undone", (ContainerSpec.guaranteed("app", 250, 64 * MIB),))
    try:
        assert failer.wait_registered(20)
        running = kubelet.run_pod(pod, containers=False)
        with pytest.raises(CriError, match="a later plugin says no"):
            kubelet.start(running, pod.containers[0])
        running.containers.clear()  # never created
        wait_until(lambda: nm.held() == {}, "the undone creation released", 10, nm)
        kubelet.remove_pod(running)
    finally:
        failer.stop()
        thread.join(10)


def test_a_prelaunched_plugin_with_a_bad_config_key_logs_it_and_serves(
    containerd_factory: Callable[..., Containerd],
    short_root: Path,
    daemon_factory: list[DaemonProcess],
) -> None:
    """containerd 1.7 exits when a pre-launched plugin fails to configure ("failed to start
    NRI interface"), 2.x drops the plugin: numamem never refuses its config. It logs the bad
    key (naming it, its value and the file) where someone reads it (containerd gives a
    pre-launched plugin /dev/null for stdio: its fds 1 and 2 are the log file too) and
    serves with the flags' value."""
    d = DaemonProcess(short_root, list(STATIC_ARGS))
    daemon_factory.append(d)
    d.start()
    inst = containerd_factory(start=False)
    inst.layout.plugin_path.mkdir(parents=True, exist_ok=True)
    inst.layout.plugin_config_path.mkdir(parents=True, exist_ok=True)
    log = inst.layout.base / "numamem-nri.log"
    plugin = inst.layout.plugin_path / "50-numamem"
    numamem = Path(sys.executable).parent / "numamem"
    # containerd passes no environment but NRI_*: the wrapper says where to log, as the
    # default (/dev/log, else /var/log/numamem-nri.log) must not be used by a test
    plugin.write_text(f"#!/bin/sh\nNUMAMEM_NRI_LOG_FILE={log} exec {numamem}\n")
    plugin.chmod(0o755)
    (inst.layout.plugin_config_path / "50-numamem.conf").write_text(
        f"socket: {d.socket}\non-reject: sometimes\nlog-format: console\n"
    )
    inst.start(timeout=30)  # containerd 1.7 exited here when the plugin refused its config
    wait_until(
        lambda: log.exists() and "NRI plugin configured" in log.read_text(), "configured", 30
    )
    text = log.read_text()
    assert "on-reject: 'sometimes' is not one of fail, unpinned" in text
    assert "plugin_config_path/50-numamem.conf or numamem.conf" in text
    assert inst.proc is not None
    stderr = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:  # this containerd's plugin only: other tests run numamem beside this one
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == inst.proc.pid and str(numamem).encode() in cmdline:
                stderr.append(os.readlink(f"/proc/{pid}/fd/2"))
        except OSError:
            continue
    assert stderr == [str(log)]
