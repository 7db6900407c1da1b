"""Pods run through the CRI the way the kubelet runs them, and what their containers got.

The messages follow the kubelet's (``pkg/kubelet/kuberuntime``): the sandbox carries the
pod's metadata, its labels plus ``io.kubernetes.pod.{name,namespace,uid}``, its annotations,
a host network (``NODE``; no hostname, which a host-network pod must not set), the cgroup
parent of its QoS class (cgroupfs driver) and the pod-level resources; each container
carries ``io.kubernetes.{pod.name,pod.namespace,pod.uid,container.name}`` labels, the
kubelet's annotations (``restartCount`` the name's earlier instances), a log path
``<name>/<restartCount>.log`` and ``linux.resources`` computed
as the kubelet computes them (CPU shares from the request, CFS quota from the limit over a
100 ms period, the memory limit, the OOM score adjustment of the QoS class, hugepage limits).
Before the sandbox, the pod's cgroup is created in every hierarchy
(:func:`tests.containerd.cgroups.create`); after the pod's removal it is removed.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tests.containerd import cgroups, images
from tests.containerd.cri import CriClient, Resources
from tests.containerd.criapi import api_pb2 as api
from tests.containerd.instance import Containerd

SLEEP_COMMAND = ("/bin/sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait")
"""Runs until SIGTERM (a shell as pid 1 needs a trap to die of it)."""
CFS_PERIOD_US = 100_000
MIN_SHARES, MAX_SHARES, MIN_QUOTA_US = 2, 262_144, 1000
GUARANTEED_OOM_SCORE_ADJ, BEST_EFFORT_OOM_SCORE_ADJ = -997, 1000


class QOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class ContainerSpec:
    """A container of a pod spec: CPU in millicores, memory in bytes; a request of 0 with a
    limit defaults to the limit (as the API server defaults it)."""

    name: str
    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    hugepage_limits: Mapping[str, int] = field(default_factory=dict)
    """page size as the CRI spells it ("2MB", "1GB") -> bytes"""
    command: tuple[str, ...] = SLEEP_COMMAND
    image: str = images.SHELL_IMAGE

    @classmethod
    def guaranteed(
        cls, name: str, cpu: int, memory: int, command: tuple[str, ...] = SLEEP_COMMAND
    ) -> ContainerSpec:
        """Requests equal to limits: ``cpu`` millicores, ``memory`` bytes."""
        return cls(name, cpu, cpu, memory, memory, command=command)

    @property
    def cpu_req(self) -> int:
        return self.cpu_request or self.cpu_limit

    @property
    def memory_req(self) -> int:
        return self.memory_request or self.memory_limit


@dataclass(frozen=True)
class PodSpec:
    name: str
    containers: tuple[ContainerSpec, ...]
    init_containers: tuple[ContainerSpec, ...] = ()
    namespace: str = "default"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(
        default_factory=lambda: {"kubernetes.io/config.source": "api"}
    )

    @classmethod
    def of(cls, qos: QOSClass, name: str, memory: int = 64 << 20, cpu: int = 250) -> PodSpec:
        """A pod of one container ``app`` of class ``qos``: Guaranteed requests ``cpu``
        millicores and ``memory`` bytes as its limits, Burstable requests them without
        limits, BestEffort asks for nothing."""
        app = {
            QOSClass.GUARANTEED: ContainerSpec.guaranteed("app", cpu, memory),
            QOSClass.BURSTABLE: ContainerSpec("app", cpu_request=cpu, memory_request=memory),
            QOSClass.BEST_EFFORT: ContainerSpec("app"),
        }[qos]
        return cls(name, (app,))

    def qos(self) -> QOSClass:
        """The kubelet's GetPodQOS over CPU and memory of all containers (init ones too)."""
        every = (*self.init_containers, *self.containers)
        if not any(c.cpu_req or c.cpu_limit or c.memory_req or c.memory_limit for c in every):
            return QOSClass.BEST_EFFORT
        if all(
            c.cpu_limit and c.memory_limit
            and c.cpu_req == c.cpu_limit
            and c.memory_req == c.memory_limit
            for c in every
        ):  # fmt: skip
            return QOSClass.GUARANTEED
        return QOSClass.BURSTABLE

    def cgroup_parent(self) -> str:
        """The pod's cgroup as the kubelet's cgroupfs driver names it."""
        return {
            QOSClass.GUARANTEED: f"/kubepods/pod{self.uid}",
            QOSClass.BURSTABLE: f"/kubepods/burstable/pod{self.uid}",
            QOSClass.BEST_EFFORT: f"/kubepods/besteffort/pod{self.uid}",
        }[self.qos()]


def shares(milli: int) -> int:
    return MIN_SHARES if milli == 0 else min(max(milli * 1024 // 1000, MIN_SHARES), MAX_SHARES)


def quota(milli: int, period: int = CFS_PERIOD_US) -> int:
    return 0 if milli == 0 else max(milli * period // 1000, MIN_QUOTA_US)


def memory_capacity(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no MemTotal in {meminfo}")


def oom_score_adj(pod: PodSpec, c: ContainerSpec) -> int:
    """The kubelet's GetContainerOOMScoreAdjust."""
    qos = pod.qos()
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    adj = 1000 - (1000 * c.memory_req) // memory_capacity()
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    return adj - 1 if adj == BEST_EFFORT_OOM_SCORE_ADJ else adj


def container_resources(pod: PodSpec, c: ContainerSpec) -> Resources:
    return Resources(
        cpu_period=CFS_PERIOD_US,
        cpu_quota=quota(c.cpu_limit),
        cpu_shares=shares(c.cpu_req),
        memory_limit_in_bytes=c.memory_limit,
        oom_score_adj=oom_score_adj(pod, c),
        hugepage_limits=dict(c.hugepage_limits),
    )


def pod_resources(pod: PodSpec) -> Resources:
    """The sandbox's ``linux.resources``: app containers summed, each init container a floor."""

    def total(attr: str) -> int:
        app: int = sum(getattr(c, attr) for c in pod.containers)
        return max([app, *(int(getattr(c, attr)) for c in pod.init_containers)])

    return Resources(
        cpu_period=CFS_PERIOD_US,
        cpu_quota=quota(total("cpu_limit")),
        cpu_shares=shares(total("cpu_req")),
        memory_limit_in_bytes=total("memory_limit"),
    )


def _namespaces() -> api.NamespaceOption:
    return api.NamespaceOption(network=api.NODE, pid=api.CONTAINER, ipc=api.POD)


@dataclass
class RunningPod:
    spec: PodSpec
    sandbox_id: str
    sandbox_config: api.PodSandboxConfig
    containers: dict[str, str] = field(default_factory=dict)
    """container name -> id, in the order they were created"""
    seconds: dict[str, float] = field(default_factory=dict)
    """"sandbox": RunPodSandbox; "<name>": that container's CreateContainer + StartContainer"""
    created: dict[str, int] = field(default_factory=dict)
    """container name -> instances created (the next one's restartCount)"""
    previous: list[str] = field(default_factory=list)
    """ids of earlier instances of restarted containers (removed with the pod)"""


@dataclass(frozen=True)
class CpusetReading:
    """A running container's cpuset as the host cgroup and the kernel's task status show it."""

    pid: int
    cgroup: Path
    cpuset_mems: str
    cpuset_cpus: str
    effective_mems: str
    mems_allowed_list: str
    cpus_allowed_list: str


class Kubelet:
    """Runs :class:`PodSpec` pods on ``containerd`` through its CRI, in the kubelet's order."""

    def __init__(self, containerd: Containerd) -> None:
        self.containerd = containerd

    @property
    def cri(self) -> CriClient:
        return self.containerd.cri()

    def sandbox_config(self, pod: PodSpec) -> api.PodSandboxConfig:
        return api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace),
            log_directory=str(self._log_dir(pod)),
            labels={
                **pod.labels,
                "io.kubernetes.pod.name": pod.name,
                "io.kubernetes.pod.namespace": pod.namespace,
                "io.kubernetes.pod.uid": pod.uid,
            },
            annotations=dict(pod.annotations),
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=pod.cgroup_parent(),
                security_context=api.LinuxSandboxSecurityContext(namespace_options=_namespaces()),
                overhead=api.LinuxContainerResources(),
                resources=pod_resources(pod).to_proto(),
            ),
        )

    def container_config(
        self, pod: PodSpec, c: ContainerSpec, restart_count: int = 0
    ) -> api.ContainerConfig:
        """The kubelet's config (``generateContainerConfig``): its labels and annotations
        (``labels.go``: no container kind is among them), ``restart_count`` the name's
        earlier instances in the pod."""
        return api.ContainerConfig(
            metadata=api.ContainerMetadata(name=c.name, attempt=restart_count),
            image=api.ImageSpec(image=c.image, user_specified_image=c.image),
            command=list(c.command),
            labels={
                "io.kubernetes.pod.name": pod.name,
                "io.kubernetes.pod.namespace": pod.namespace,
                "io.kubernetes.pod.uid": pod.uid,
                "io.kubernetes.container.name": c.name,
            },
            annotations={
                "io.kubernetes.container.hash": format(zlib.crc32(repr(c).encode()), "x"),
                "io.kubernetes.container.restartCount": str(restart_count),
                "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                "io.kubernetes.container.terminationMessagePolicy": "File",
                "io.kubernetes.pod.terminationGracePeriod": "30",
            },
            log_path=f"{c.name}/{restart_count}.log",
            linux=api.LinuxContainerConfig(
                resources=container_resources(pod, c).to_proto(),
                security_context=api.LinuxContainerSecurityContext(namespace_options=_namespaces()),
            ),
        )

    def _log_dir(self, pod: PodSpec) -> Path:
        return self.containerd.layout.logs / f"{pod.namespace}_{pod.name}_{pod.uid}"

    def run_pod(self, pod: PodSpec, *, containers: bool = True) -> RunningPod:
        """Create the pod's cgroup, run its sandbox, then (``containers``) create and start its
        init containers one by one, each run to completion, then its app containers."""
        parent = pod.cgroup_parent()
        self.containerd.register_cgroup(parent)
        cgroups.create(parent)
        self._log_dir(pod).mkdir(parents=True, exist_ok=True)
        config = self.sandbox_config(pod)
        began = time.monotonic()
        sandbox_id = self.cri.run_pod_sandbox(config)
        running = RunningPod(pod, sandbox_id, config)
        running.seconds["sandbox"] = time.monotonic() - began
        if containers:
            for c in pod.init_containers:
                self.wait_exited(self.start(running, c))
            for c in pod.containers:
                self.start(running, c)
        return running

    def create(self, running: RunningPod, c: ContainerSpec) -> str:
        """CreateContainer of ``c``: its first instance, or a restart (the kubelet's
        restartCount, the attempt of the container's metadata and its log file count the
        name's earlier instances in the pod); the previous instance is kept in
        :attr:`RunningPod.previous` until the pod is removed."""
        (self._log_dir(running.spec) / c.name).mkdir(parents=True, exist_ok=True)
        restarts = running.created.get(c.name, 0)
        config = self.container_config(running.spec, c, restarts)
        cid = self.cri.create_container(running.sandbox_id, config, running.sandbox_config)
        if c.name in running.containers:
            running.previous.append(running.containers[c.name])
        running.containers[c.name] = cid
        running.created[c.name] = restarts + 1
        return cid

    def start(self, running: RunningPod, c: ContainerSpec) -> str:
        """CreateContainer + StartContainer; the container's id."""
        began = time.monotonic()
        cid = self.create(running, c)
        self.cri.start_container(cid)
        running.seconds[c.name] = time.monotonic() - began
        return cid

    def wait_exited(self, container_id: str, timeout: float = 30.0) -> int:
        """Wait for the container to exit; its exit code."""
        deadline = time.monotonic() + timeout
        while (status := self.cri.container_status(container_id)).state != "CONTAINER_EXITED":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"container {container_id} still {status.state} after {timeout} s"
                )
            time.sleep(0.05)
        return status.exit_code

    def remove_pod(self, running: RunningPod, grace: int = 0) -> list[str]:
        """Stop and remove the containers and the sandbox, then the pod's cgroup; the cgroups
        that could not be removed (empty when all went)."""
        for cid in [*running.previous, *running.containers.values()]:
            self.cri.stop_container(cid, timeout=grace)
            self.cri.remove_container(cid)
        self.cri.stop_pod_sandbox(running.sandbox_id)
        self.cri.remove_pod_sandbox(running.sandbox_id)
        return cgroups.remove(running.spec.cgroup_parent())

    def cpuset(self, container_id: str) -> CpusetReading:
        """The container's host cgroup ``cpuset.mems``/``cpuset.cpus`` and its init process's
        ``Mems_allowed_list``/``Cpus_allowed_list``."""
        pid = self.cri.container_status(container_id).pid
        if not pid:
            raise RuntimeError(f"container {container_id} has no running process")
        hierarchy = cgroups.cpuset_hierarchy()
        if hierarchy is None:
            raise RuntimeError("no cpuset controller in any mounted cgroup hierarchy")
        rel = ""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if (hierarchy.version == 1 and "cpuset" in names.split(",")) or (
                hierarchy.version == 2 and names == ""
            ):
                rel = path
        cg = hierarchy.mount / rel.lstrip("/")
        status = _status(Path(f"/proc/{pid}/status").read_text())
        effective = "cpuset.effective_mems" if hierarchy.version == 1 else "cpuset.mems.effective"
        return CpusetReading(
            pid=pid,
            cgroup=cg,
            cpuset_mems=(cg / "cpuset.mems").read_text().strip(),
            cpuset_cpus=(cg / "cpuset.cpus").read_text().strip(),
            effective_mems=(cg / effective).read_text().strip(),
            mems_allowed_list=status["Mems_allowed_list"],
            cpus_allowed_list=status["Cpus_allowed_list"],
        )

    def status_inside(self, container_id: str) -> dict[str, str]:
        """``/proc/self/status`` of a process exec'd in the container (CRI ExecSync)."""
        reply = self.cri.exec_sync(container_id, ["cat", "/proc/self/status"])
        if reply.exit_code != 0:
            raise RuntimeError(
                f"ExecSync cat /proc/self/status exited {reply.exit_code}: {reply.stderr!r}"
            )
        return _status(reply.stdout.decode())


def _status(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())}
