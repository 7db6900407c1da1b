"""NRI pods and containers as containerd sends them, for tests of NRI plugins.

The shapes follow what containerd puts in the NRI messages for a CRI pod (see
``/work/shared/spec/nri-notes.md`` of the project): the kubelet's labels on
the container, the pod's cgroup parent, limits (not requests) in the
container's ``linux.resources``.
"""

from __future__ import annotations

from numamem.nriapi import api_pb2 as api


def pod(
    name: str = "pod-a",
    uid: str = "uid-a",
    namespace: str = "default",
    *,
    sandbox_id: str | None = None,
    cgroup_parent: str | None = None,
) -> api.PodSandbox:
    """A pod sandbox; the cgroup parent defaults to a Guaranteed pod's (cgroupfs driver)."""
    out = api.PodSandbox(
        id=sandbox_id or f"sandbox-{uid}",
        name=name,
        uid=uid,
        namespace=namespace,
        labels={
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        },
    )
    out.linux.cgroup_parent = cgroup_parent or f"kubepods/pod{uid}"
    return out


def container(
    sandbox: api.PodSandbox,
    name: str = "app",
    *,
    container_id: str | None = None,
    memory_limit: int | None = None,
    cpus: str = "",
    mems: str = "",
    state: int = api.CONTAINER_CREATED,
    cpu_milli: int | None = None,
    hugepages: dict[str, int] | None = None,
    created_at: int = 0,
    restart_count: int | None = 0,
) -> api.Container:
    """A container of ``sandbox`` with the kubelet's labels and the given resources: the CPU
    limit as the kubelet gives it (``cpu_milli`` as a CFS quota over a 100 ms period, shares
    from the same request), hugepage limits by the CRI's page size ("2MB", "1GB"), and the
    kubelet's ``io.kubernetes.container.restartCount`` annotation (earlier instances of the
    name in the pod; None: no annotation)."""
    out = api.Container(
        id=container_id or f"{sandbox.id}-{name}",
        pod_sandbox_id=sandbox.id,
        name=name,
        state=state,  # type: ignore[arg-type]
        labels={
            "io.kubernetes.container.name": name,
            "io.kubernetes.pod.name": sandbox.name,
            "io.kubernetes.pod.namespace": sandbox.namespace,
            "io.kubernetes.pod.uid": sandbox.uid,
        },
    )
    if restart_count is not None:
        out.annotations["io.kubernetes.container.restartCount"] = str(restart_count)
    resources = out.linux.resources
    if memory_limit is not None:
        resources.memory.limit.value = memory_limit
    if cpu_milli is not None:
        resources.cpu.period.value = 100_000
        resources.cpu.quota.value = max(cpu_milli * 100, 1000)
        resources.cpu.shares.value = max(cpu_milli * 1024 // 1000, 2)
    for size, limit in (hugepages or {}).items():
        resources.hugepage_limits.add(page_size=size, limit=limit)
    resources.cpu.cpus = cpus
    resources.cpu.mems = mems
    out.created_at = created_at
    out.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{out.id}"
    return out


def mems_update(container_id: str, mems: str) -> api.ContainerUpdate:
    """An update setting a container's ``cpuset.mems``."""
    out = api.ContainerUpdate(container_id=container_id)
    out.linux.resources.cpu.mems = mems
    return out


def mems_adjustment(mems: str) -> api.ContainerAdjustment:
    """An adjustment setting the created container's ``cpuset.mems``."""
    out = api.ContainerAdjustment()
    out.linux.resources.cpu.mems = mems
    return out
