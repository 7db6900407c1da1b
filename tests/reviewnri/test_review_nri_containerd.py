"""REVIEW (reviewnri): demonstrations against the REAL containerd 1.7.24 and 2.1.9 of defects in
``numamem nri`` found by the hostile review. Each test asserts the kubelet's behaviour (or the
README's claim) and FAILS on main as of 673a7f0.
"""

from __future__ import annotations

import pytest

from tests.containerd.cri import CriError, Resources
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec
from tests.e2e.test_nri_containerd import MIB, Numamem, numamem  # noqa: F401 - the fixture

pytestmark = [pytest.mark.containerd, pytest.mark.e2e]


def test_cpu_manager_cpuset_only_update_keeps_the_pinning(
    containerd: Containerd,
    kubelet: Kubelet,
    numamem: Numamem,  # noqa: F811
) -> None:
    """The kubelet's CPU manager (static policy) reconciles exclusive and shared-pool CPUs with
    UpdateContainerResources carrying ONLY ``cpuset_cpus`` (cpumanager ``updateContainerCPUSet``:
    "patch-like partial resources"); it does so for every container after a kubelet restart and
    for every shared-pool container whenever the shared pool changes. That is not a resize:
    numamem must keep the container's memory and let the update through."""
    nm = numamem
    pod = PodSpec("web", (ContainerSpec.guaranteed("app", 250, 64 * MIB),))
    running = kubelet.run_pod(pod)
    cid = running.containers["app"]
    assert [b.size for b in nm.client.get_memory(pod.uid, "app")] == [64 * MIB]
    try:
        kubelet.cri.update_container_resources(cid, Resources(cpuset_cpus="0"))
    except CriError as err:
        pytest.fail(f"the CPU manager's cpuset-only update failed: {err.details}")
    finally:
        held = [b.size for b in nm.client.get_memory(pod.uid, "app")]
        print("after a cpuset-only update numamem holds", held)
    assert held == [64 * MIB], "numamem's decision changed by a cpuset-only update"
    assert kubelet.cpuset(cid).cpuset_mems == "0"


@pytest.mark.parametrize(
    ("quota", "period", "why"),
    [
        (-1, 100_000, "DisableCPUQuotaWithExclusiveCPUs (beta, on by default since 1.33)"),
        (0, 0, "cpuCFSQuota: false"),
    ],
)
def test_guaranteed_container_without_cfs_quota_is_pinned(
    containerd: Containerd,
    kubelet: Kubelet,
    numamem: Numamem,  # noqa: F811
    quota: int,
    period: int,
    why: str,
) -> None:
    """A Guaranteed pod's container whose CPU limit the kubelet does not enforce with a CFS
    quota: with the CPU manager's static policy and an integer CPU request the kubelet sends
    ``cpu_quota = -1`` (``DisableCPUQuotaWithExclusiveCPUs``), and a kubelet with
    ``cpuCFSQuota: false`` sends no quota at all. The pod is still Guaranteed (its cgroup
    parent says so) and the kubelet's memory manager pins it; numamem leaves it alone."""
    nm = numamem
    pod = PodSpec("exclusive", (ContainerSpec.guaranteed("app", 1000, 64 * MIB),))
    running = kubelet.run_pod(pod, containers=False)
    config = kubelet.container_config(pod, pod.containers[0])
    config.linux.resources.cpu_quota = quota
    config.linux.resources.cpu_period = period
    (kubelet._log_dir(pod) / "app").mkdir(parents=True, exist_ok=True)
    cid = kubelet.cri.create_container(running.sandbox_id, config, running.sandbox_config)
    running.containers["app"] = cid
    kubelet.cri.start_container(cid)
    held = nm.held()
    mems = kubelet.cpuset(cid).cpuset_mems
    kubelet.remove_pod(running)
    print(f"{why}: numamem holds {held}, cpuset.mems {mems!r}")
    assert held == {pod.uid: {"app"}}, f"{why}: a Guaranteed container left unpinned"


def test_prelaunched_plugin_with_a_config_it_refuses_does_not_take_the_runtime_down(
    containerd_factory: object,
) -> None:
    """README: a pre-launched plugin's config with "an unknown key or a bad value refuses the
    configuration (the runtime then drops the plugin)". On containerd 1.7 a pre-launched plugin
    that fails to register or configure is fatal: containerd logs "Failed to run CRI service:
    failed to set up NRI for CRI service: failed to start NRI interface" and EXITS, so a typo in
    /etc/nri/conf.d/50-numamem.conf (or a plugin that crashes at start, or starts slower than
    plugin_registration_timeout) takes the node's runtime down. The README does not say so;
    the plugin could log the bad key and go on with its flags' options."""
    from pathlib import Path

    make = containerd_factory  # type: ignore[assignment]
    inst: Containerd = make(start=False)  # type: ignore[operator]
    inst.layout.plugin_path.mkdir(parents=True, exist_ok=True)
    inst.layout.plugin_config_path.mkdir(parents=True, exist_ok=True)
    numamem_bin = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "numamem"
    (inst.layout.plugin_path / "50-numamem").symlink_to(numamem_bin)
    (inst.layout.plugin_config_path / "50-numamem.conf").write_text("on-reject: sometimes\n")
    try:
        inst.start(timeout=30)
    except RuntimeError as err:
        pytest.fail(f"containerd {inst.dist.containerd.version} did not start:\n{str(err)[-600:]}")


def test_a_creation_a_later_plugin_fails_holds_nothing(
    containerd: Containerd,
    kubelet: Kubelet,
    numamem: Numamem,  # noqa: F811
) -> None:
    """SOUND (checked): numamem admits at CreateContainer, then a plugin after it (idx 60)
    fails the creation; containerd undoes it with StopContainer + RemoveContainer (seen on 1.7
    and 2.x), and numamem releases what it admitted."""
    import threading

    from numamem.errors import NriStatusError
    from numamem.nri import status
    from numamem.nri.handler import CallContext, Handler
    from numamem.nri.plugin import Backoff, Plugin
    from numamem.nriapi import api_pb2 as api

    class Failer(Handler):
        def create_container(
            self, req: api.CreateContainerRequest, ctx: CallContext
        ) -> api.CreateContainerResponse:
            raise NriStatusError(status.UNKNOWN, "a later plugin says no")

    failer = Plugin(
        Failer(), name="failer", idx="60", socket_path=str(containerd.layout.nri_socket),
        backoff=Backoff(0.05, 0.2),
    )  # fmt: skip
    thread = threading.Thread(target=failer.run)
    thread.start()
    try:
        assert failer.wait_registered(20)
        pod = PodSpec("undone", (ContainerSpec.guaranteed("app", 250, 64 * MIB),))
        running = kubelet.run_pod(pod, containers=False)
        with pytest.raises(CriError, match="a later plugin says no"):
            kubelet.start(running, pod.containers[0])
        held = numamem.held()
        kubelet.remove_pod(running)
    finally:
        failer.stop()
        thread.join(10)
    assert held == {}


def test_an_exited_container_keeps_its_memory_across_a_runtime_restart(
    containerd: Containerd,
    kubelet: Kubelet,
    numamem: Numamem,  # noqa: F811
) -> None:
    """The real-runtime form of test_review_nri_semantics' crash-loop case: an app container
    that exited (CrashLoopBackOff keeps it exited up to 5 min) when containerd restarts is not
    in the Synchronize, and numamem releases its pod; the kubelet would keep it."""
    import time

    nm = numamem
    crash = ("/bin/sh", "-c", "exit 3")
    pod = PodSpec("crashy", (ContainerSpec.guaranteed("app", 250, 64 * MIB, crash),))
    running = kubelet.run_pod(pod)
    kubelet.wait_exited(running.containers["app"])
    assert nm.held() == {pod.uid: {"app"}}
    containerd.restart()
    nm.wait_log("NRI synchronize", 2)
    deadline = time.monotonic() + 5  # a bound on waiting for the release, not a timing check
    while nm.held() and time.monotonic() < deadline:
        time.sleep(0.1)
    held = nm.held()
    kubelet.remove_pod(running)
    assert held == {pod.uid: {"app"}}, "an exited container's memory was released"


def test_a_prelaunched_plugins_log_reaches_someone(
    containerd_factory: object, short_root: object, daemon_factory: list[object]
) -> None:
    """README: what the plugin cannot use is "logged once", ``--on-reject=unpinned`` starts a
    container "logged and counted (the counts are logged when the plugin stops)". A pre-launched
    ``numamem nri`` logs to stderr only, and containerd (1.7 and 2.x) starts pre-launched
    plugins with stdin, stdout and stderr on /dev/null: every refusal, problem and count of a
    pre-launched plugin is lost. Measured: fd 2 of the running plugin."""
    import os
    from pathlib import Path

    from numamem.testing.daemon import DaemonProcess
    from tests.daemon import STATIC_ARGS

    d = DaemonProcess(short_root, list(STATIC_ARGS))  # type: ignore[arg-type]
    daemon_factory.append(d)
    d.start()
    make = containerd_factory
    inst: Containerd = make(start=False)  # type: ignore[operator]
    inst.layout.plugin_path.mkdir(parents=True, exist_ok=True)
    inst.layout.plugin_config_path.mkdir(parents=True, exist_ok=True)
    link = inst.layout.plugin_path / "50-numamem"
    link.symlink_to(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "numamem")
    (inst.layout.plugin_config_path / "50-numamem.conf").write_text(f"socket: {d.socket}\n")
    inst.start(timeout=30)
    stderr = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if str(link).encode() in cmdline:
                stderr.append(os.readlink(f"/proc/{pid}/fd/2"))
        except OSError:
            continue
    print(f"{inst.dist.describe()}: pre-launched numamem's stderr -> {stderr}")
    assert stderr, "the pre-launched plugin is not running"
    assert stderr != ["/dev/null"], "a pre-launched plugin's log goes to /dev/null"
