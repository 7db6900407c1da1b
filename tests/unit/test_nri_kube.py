"""What the runtime tells of a pod and a container, in the kubelet's terms (numamem.nri.kube)."""

from __future__ import annotations

import pytest

from numamem.errors import UnusableInputError
from numamem.nri import kube
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj

UID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
SYSTEMD_UID = UID.replace("-", "_")

# cgroup parent -> QoS class, as the kubelet's two cgroup drivers name a pod's cgroup
PARENTS = [
    # cgroupfs, with and without the leading slash, under a --cgroup-root
    (f"/kubepods/pod{UID}", kube.GUARANTEED),
    (f"kubepods/pod{UID}", kube.GUARANTEED),
    (f"/kubepods/burstable/pod{UID}", kube.BURSTABLE),
    (f"/kubepods/besteffort/pod{UID}", kube.BEST_EFFORT),
    (f"/kubelet/kubepods/pod{UID}", kube.GUARANTEED),
    (f"/kubelet/kubepods/burstable/pod{UID}/", kube.BURSTABLE),
    # systemd: the slice alone, or its whole path
    (f"kubepods-pod{SYSTEMD_UID}.slice", kube.GUARANTEED),
    (f"kubepods-burstable-pod{SYSTEMD_UID}.slice", kube.BURSTABLE),
    (f"kubepods-besteffort-pod{SYSTEMD_UID}.slice", kube.BEST_EFFORT),
    (f"/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice", kube.GUARANTEED),
    (
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice",
        kube.BURSTABLE,
    ),
    (
        f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice",
        kube.BEST_EFFORT,
    ),
    # systemd under a --cgroup-root: the kubelet joins every part of the name with dashes
    # (ToSystemd), the root's first: root /kubelet, or /a/b (two parts)
    (
        f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{SYSTEMD_UID}.slice",
        kube.GUARANTEED,
    ),
    (
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
        f"kubelet-kubepods-burstable-pod{SYSTEMD_UID}.slice",
        kube.BURSTABLE,
    ),
    (
        "/a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-besteffort.slice/"
        f"a-b-kubepods-besteffort-pod{SYSTEMD_UID}.slice",
        kube.BEST_EFFORT,
    ),
]


@pytest.mark.parametrize(("parent", "qos"), PARENTS)
def test_qos_class_from_the_cgroup_parent(parent: str, qos: str) -> None:
    assert kube.qos_from_cgroup_parent(parent, UID) == qos


UNKNOWN = [
    ("", kube.UNKNOWN_CGROUP_LAYOUT),
    ("/system.slice/containerd.service", kube.UNKNOWN_CGROUP_LAYOUT),
    (f"/kubepods/guaranteed/pod{UID}", kube.UNKNOWN_CGROUP_LAYOUT),
    (f"/kubepods/pod{UID}/extra", kube.UNKNOWN_CGROUP_LAYOUT),
    (f"kubepods-pod{UID}", kube.UNKNOWN_CGROUP_LAYOUT),  # a slice without .slice
    ("/", kube.UNKNOWN_CGROUP_LAYOUT),  # cgroupsPerQOS: false: no pod cgroup at all
    (f"kubelet-kubepods-guaranteed-pod{SYSTEMD_UID}.slice", kube.UNKNOWN_CGROUP_LAYOUT),
    ("/kubepods/pod0000-other", kube.CGROUP_UID_MISMATCH),
    ("kubepods-burstable-pod0000_other.slice", kube.CGROUP_UID_MISMATCH),
]


@pytest.mark.parametrize(("parent", "problem"), UNKNOWN)
def test_a_cgroup_parent_it_does_not_know_is_refused_with_the_value(
    parent: str, problem: str
) -> None:
    with pytest.raises(UnusableInputError) as caught:
        kube.qos_from_cgroup_parent(parent, UID)
    assert caught.value.problem == problem
    assert repr(parent) in str(caught.value)


def test_pod_identity_from_the_sandbox_or_its_labels() -> None:
    sandbox = obj.pod("web-1", UID, "shop", sandbox_id="sb1")
    assert kube.pod_identity(sandbox) == kube.PodIdentity(UID, "web-1", "shop", "sb1")
    bare = api.PodSandbox(id="sb2", labels=sandbox.labels)  # only the kubelet's labels
    assert kube.pod_identity(bare) == kube.PodIdentity(UID, "web-1", "shop", "sb2")
    with pytest.raises(UnusableInputError) as caught:
        kube.pod_identity(api.PodSandbox(id="sb3", name="not-a-pod"))
    assert caught.value.problem == kube.NO_POD_UID
    assert kube.PodIdentity(UID, "web-1", "shop", "sb1").describe() == f"shop/web-1 (uid {UID})"


def resources(
    *,
    quota: int | None = None,
    period: int | None = None,
    memory: int | None = None,
    pages: dict[str, int] | None = None,
    shares: int | None = None,
) -> api.LinuxResources:
    out = api.LinuxResources()
    if shares is not None:
        out.cpu.shares.value = shares
    if quota is not None:
        out.cpu.quota.value = quota
    if period is not None:
        out.cpu.period.value = period
    if memory is not None:
        out.memory.limit.value = memory
    for size, limit in (pages or {}).items():
        out.hugepage_limits.add(page_size=size, limit=limit)
    return out


MI, GI = 1 << 20, 1 << 30

# linux.resources -> the requests numamem admits with (requests equal limits)
LIMITS = [
    # the kubelet's quota is milli * 100 over a 100 ms period
    (resources(quota=100_000, period=100_000, memory=GI), {"cpu": "1000m", "memory": str(GI)}),
    (
        resources(quota=50_000, period=100_000, memory=64 * MI),
        {"cpu": "500m", "memory": "67108864"},
    ),
    (resources(quota=150_000, period=100_000, memory=GI), {"cpu": "1500m", "memory": str(GI)}),
    (resources(quota=250, period=100_000, memory=GI), {"cpu": "3m", "memory": str(GI)}),  # ceil
    # 1m is given the kubelet's minimum quota (1000 us): the smallest limit that yields it
    (resources(quota=1000, period=100_000, memory=GI), {"cpu": "10m", "memory": str(GI)}),
    (resources(quota=20_000, period=10_000, memory=GI), {"cpu": "2000m", "memory": str(GI)}),
    # hugepages: the kubelet lists every size of the node, 0 for those not asked
    (
        resources(quota=100_000, period=100_000, memory=GI, pages={"2MB": 4 * MI, "1GB": 0}),
        {"cpu": "1000m", "memory": str(GI), "hugepages-2Mi": str(4 * MI)},
    ),
    (
        resources(quota=100_000, period=100_000, memory=GI, pages={"1GB": 2 * GI, "64KB": 0}),
        {"cpu": "1000m", "memory": str(GI), "hugepages-1Gi": str(2 * GI)},
    ),
    # no CFS quota (-1, 0, or none): no CPU limit; no memory limit: none
    (resources(quota=-1, period=100_000, memory=GI), {"memory": str(GI)}),
    (resources(quota=100_000, memory=GI), {"memory": str(GI)}),
    (resources(quota=100_000, period=100_000), {"cpu": "1000m"}),
    (resources(), {}),
    # no CFS quota but shares: the kubelet's DisableCPUQuotaWithExclusiveCPUs (quota -1) or
    # cpuCFSQuota: false (none); the request is the inverse of MilliCPUToShares
    (
        resources(quota=-1, period=100_000, shares=1024, memory=GI),
        {"cpu": "1000m", "memory": str(GI)},
    ),
    (resources(shares=2048, memory=GI), {"cpu": "2000m", "memory": str(GI)}),
    (resources(quota=0, period=0, shares=256, memory=GI), {"cpu": "250m", "memory": str(GI)}),
    (resources(shares=2, memory=GI), {"cpu": "2m", "memory": str(GI)}),  # the minimum
    (
        resources(quota=50_000, period=100_000, shares=4096, memory=GI),
        {"cpu": "500m", "memory": str(GI)},
    ),
]


@pytest.mark.parametrize("milli", [1, 2, 3, 10, 250, 333, 500, 999, 1000, 1500, 4000, 64000])
def test_the_cpu_from_shares_gives_the_kubelets_shares_back(milli: int) -> None:
    """MilliCPUToShares (kuberuntime): milli * 1024 // 1000, at least 2; its inverse here is
    the smallest request with the same shares."""
    shares = max(milli * 1024 // 1000, 2)
    cpu = kube.limits_of(resources(shares=shares, memory=GI)).cpu_milli
    assert cpu is not None and max(cpu * 1024 // 1000, 2) == shares
    assert cpu <= milli or shares == 2  # 1m and 2m both get the minimum shares


@pytest.mark.parametrize(("given", "expected"), LIMITS)
def test_limits_become_the_requests_numamem_admits(
    given: api.LinuxResources, expected: dict[str, str]
) -> None:
    limits = kube.limits_of(given)
    assert limits.resources() == expected
    assert limits.guaranteed_shape == ("cpu" in expected and "memory" in expected)


@pytest.mark.parametrize(
    ("size", "resource"),
    [
        ("2MB", "hugepages-2Mi"),
        ("1GB", "hugepages-1Gi"),
        ("64KB", "hugepages-64Ki"),
        ("32MB", "hugepages-32Mi"),
        ("16GB", "hugepages-16Gi"),
        ("512KB", "hugepages-512Ki"),
        ("1024KB", "hugepages-1Mi"),
    ],
)
def test_hugepage_sizes_become_kubernetes_resources(size: str, resource: str) -> None:
    assert kube.hugepage_resource(size) == resource


@pytest.mark.parametrize("size", ["", "2M", "2mb", "0MB", "2 MB", "-2MB", "2MiB", "9999999GB"])
def test_a_hugepage_size_that_is_not_one_is_refused(size: str) -> None:
    with pytest.raises(UnusableInputError) as caught:
        kube.limits_of(resources(memory=GI, pages={size: 2 * MI}))
    assert caught.value.problem == kube.BAD_HUGEPAGE_SIZE


def test_a_guaranteed_pods_container_without_limits_is_unusable() -> None:
    kube.check_guaranteed(kube.limits_of(resources(quota=1000, period=100_000, memory=1)), "ok")
    with pytest.raises(UnusableInputError) as caught:
        kube.check_guaranteed(kube.limits_of(resources(memory=GI)), "app")
    assert caught.value.problem == kube.NO_LIMITS
    assert "'app'" in str(caught.value) and "memory 1Gi" in str(caught.value)


def test_limits_describe_what_is_asked() -> None:
    limits = kube.limits_of(
        resources(quota=50_000, period=100_000, memory=64 * MI + 1, pages={"2MB": 4 * MI})
    )
    assert limits.describe() == "cpu 500m, hugepages-2Mi 4Mi, memory 67108865"
    assert limits.memory_resources() == {"memory": 64 * MI + 1, "hugepages-2Mi": 4 * MI}
    assert kube.Limits(None, None).describe() == "no limits"


@pytest.mark.parametrize(
    ("nodes", "text"), [((0,), "0"), ((1, 0), "0,1"), ((3, 1, 2, 1), "1,2,3"), ((), "")]
)
def test_cpuset_mems_as_the_kubelet_writes_it(nodes: tuple[int, ...], text: str) -> None:
    assert kube.mems_string(nodes) == text


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("0", {0}),
        ("0-2,4", {0, 1, 2, 4}),
        ("1,0", {0, 1}),
        (" 0-1 ", {0, 1}),
        ("", None),
        ("x", None),
        ("1-", None),
    ],
)
def test_cpuset_strings_are_read(text: str, nodes: set[int] | None) -> None:
    assert kube.parse_mems(text) == (frozenset(nodes) if nodes is not None else None)
