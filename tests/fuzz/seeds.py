"""Valid requests for every RPC: the fuzzer sends them as they are, or mutates them.

"Valid" needs knowledge of each RPC: a pod that passes validation, a container
name of that pod, keys the metacache may hold. Names come from small fixed pools
(:data:`MM_PODS` pods, :data:`META_PODS` metacache pods, :data:`POOLS`,
:data:`REGIONS`), so that a request is a function of its random generator alone
and still often meets what earlier requests wrote. Memory manager pod ``i`` is
always the same pod (uid, names, containers, resources).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2 as rf

from numamem.metacache.types import CONTAINER_FIELDS, QOS_LEVELS
from numamem.v1 import (
    common_pb2,
    info_pb2,
    memorymanager_pb2,
    metacache_pb2,
    podresources_pb2,
    topology_pb2,
)
from tests.fuzz.amplify import CPULIST_AMPLIFIERS, amplified_cpus, amplified_quantities

mm = memorymanager_pb2
mc = metacache_pb2
pr = podresources_pb2

MM_PODS = 40
META_PODS = 30
META_CONTAINERS = ("main", "sidecar", "c2")
POOLS = ("share", "reclaim", "dedicated", "isolation-1")
REGIONS = ("share-0", "share-1", "dedicated-0", "isolation")
METRICS = ("cpu.usage.container", "mem.rss.container", "mem.usage.container", "nope")
MAIN_SERVICES = (
    "",
    "numamem.v1.Info",
    "numamem.v1.Topology",
    "numamem.v1.MemoryManager",
    "numamem.v1.MetaReader",
    "numamem.v1.MetaWriter",
    "grpc.health.v1.Health",
    "unknown.Service",
)
_KEYS = {"pod_uid", "container_name"}

Seed = Callable[[random.Random], Message]


# --- memory manager ------------------------------------------------------------------


def pod(i: int) -> mm.Pod:
    """Memory manager pod ``i``: Guaranteed unless ``i % 4 == 3``; hugepages when
    ``i % 5 == 0``; an init container when ``i % 3 == 0`` (a sidecar when ``i % 6 == 0``)."""
    memory = ("64Mi", "128Mi", "256Mi", "512Mi", "1Gi")[i % 5]
    guaranteed = i % 4 != 3

    def container(name: str, size: str) -> mm.Container:
        limits = {"cpu": "1", "memory": size}
        requests = dict(limits) if guaranteed else {"cpu": "500m", "memory": "32Mi"}
        if i % 5 == 0:
            limits["hugepages-2Mi"] = requests["hugepages-2Mi"] = "8Mi"
        return mm.Container(name=name, requests=requests, limits=limits)

    inits = []
    if i % 3 == 0:
        init = container("init", "128Mi")
        if i % 6 == 0:
            init.restart_policy = "Always"
        inits.append(init)
    apps = [container(f"c{k}", memory) for k in range(1 + i % 3)]
    return mm.Pod(
        uid=f"uid-{i}",
        namespace=f"ns-{i % 3}",
        name=f"pod-{i}",
        init_containers=inits,
        containers=apps,
    )


def _pod_and_container(rng: random.Random) -> tuple[mm.Pod, str]:
    p = pod(rng.randrange(MM_PODS))
    names = [c.name for c in (*p.init_containers, *p.containers)]
    return p, rng.choice(names)


def container_id(uid: str, name: str) -> str:
    return f"cid-{uid}-{name}"


def _affinity(rng: random.Random) -> mm.TopologyHint:
    return mm.TopologyHint(numa_nodes=rng.choice(([0], [1], [0, 1])), preferred=rng.random() < 0.7)


def _providers(p: mm.Pod, rng: random.Random) -> list[mm.ProviderHints]:
    if rng.random() < 0.6:
        return []
    name = rng.choice([c.name for c in p.containers])
    hints = mm.TopologyHints(hints=[_affinity(rng) for _ in range(rng.randint(1, 3))])
    return [
        mm.ProviderHints(
            provider="cpu", containers={name: mm.ResourceHints(resources={"cpu": hints})}
        )
    ]


def _allocate(rng: random.Random) -> Message:
    p, name = _pod_and_container(rng)
    p = amplified_quantities(rng, p)
    req = mm.AllocateRequest(pod=p, container_name=name)
    if rng.random() < 0.3:
        req.affinity.CopyFrom(_affinity(rng))
    return req


def _allocate_pod(rng: random.Random) -> Message:
    """AllocatePod of a pod that sets pod-level resources (its containers' sum, plus a shared
    256Mi) or not; the daemon under the fuzzer runs with the gates off, so it is refused."""
    p = pod(rng.randrange(MM_PODS))
    if rng.random() < 0.7:
        mib = sum(_mib(c.requests.get("memory", "0")) for c in p.containers) + 256
        p.requests["cpu"] = p.limits["cpu"] = str(len(p.containers) + 1)
        p.requests["memory"] = p.limits["memory"] = f"{mib}Mi"
    req = mm.AllocatePodRequest(pod=p)
    if rng.random() < 0.3:
        req.affinity.CopyFrom(_affinity(rng))
    return req


def _mib(quantity: str) -> int:
    return int(quantity[:-2]) * (1024 if quantity.endswith("Gi") else 1)


def _mm_add_container(rng: random.Random) -> Message:
    p, name = _pod_and_container(rng)
    return mm.AddContainerRequest(
        pod=p, container_name=name, container_id=container_id(p.uid, name)
    )


def _remove_container(rng: random.Random) -> Message:
    p, name = _pod_and_container(rng)
    return mm.RemoveContainerRequest(container_id=container_id(p.uid, name))


def _sync(rng: random.Random) -> Message:
    keep = rng.sample(range(MM_PODS), rng.randint(MM_PODS * 9 // 10, MM_PODS))
    return mm.SyncActivePodsRequest(pods=[pod(i) for i in keep])


def _admit(rng: random.Random) -> Message:
    p = amplified_quantities(rng, pod(rng.randrange(MM_PODS)))
    return mm.AdmitRequest(pod=p, other_providers=_providers(p, rng))


def _explain(rng: random.Random) -> Message:
    p = pod(rng.randrange(MM_PODS))
    return mm.ExplainRequest(pod=p, other_providers=_providers(p, rng))


def _resize(rng: random.Random) -> Message:
    """A resize of one container of pod ``i`` to another memory size (request and limit), or
    to its own; the container name may be left out (the pod's only container)."""
    p, name = _pod_and_container(rng)
    for c in [*p.init_containers, *p.containers]:
        if c.name == name and rng.random() < 0.8:
            size = rng.choice(("64Mi", "256Mi", "1Gi", "4Gi", "40Gi"))
            c.limits["memory"] = size
            if rng.random() < 0.9:
                c.requests["memory"] = size
    return mm.ResizeRequest(pod=p, container_name=name if rng.random() < 0.9 else "")


def _by_ref(cls: type[Message]) -> Seed:
    def seed(rng: random.Random) -> Message:
        p, name = _pod_and_container(rng)
        return cls(pod_uid=p.uid, container_name=name)

    return seed


# --- metacache ------------------------------------------------------------------------


def _meta_key(rng: random.Random) -> tuple[str, str]:
    return f"mc-pod-{rng.randrange(META_PODS)}", rng.choice(META_CONTAINERS)


def container_info(rng: random.Random, pod_uid: str, name: str) -> mc.ContainerInfo:
    """A valid ContainerInfo for the key (its own key fields given or left empty)."""
    keyed = rng.random() < 0.5
    return mc.ContainerInfo(
        pod_uid=pod_uid if keyed else "",
        container_name=name if keyed else "",
        pod_namespace="default",
        pod_name=pod_uid.replace("mc-pod", "name"),
        container_type=rng.choice((0, 1, 2, 3)),  # type: ignore[arg-type]
        container_index=rng.randrange(3),
        labels={"app": rng.choice(("web", "db"))},
        annotations={"katalyst.kubewharf.io/qos_level": rng.choice(QOS_LEVELS)},
        qos_level=rng.choice(QOS_LEVELS),
        cpu_request=rng.choice((0.5, 1.0, 4.0)),
        cpu_limit=rng.choice((1.0, 4.0, 8.0)),
        memory_request=float(rng.choice((2**28, 2**30))),
        memory_limit=float(rng.choice((2**30, 2**31))),
        owner_pool_name=rng.choice(POOLS),
        origin_owner_pool_name=rng.choice(POOLS),
        ramp_up=rng.random() < 0.2,
        topology_aware_assignments=amplified_cpus(rng, {0: rng.choice(("0-1", "0", "")), 1: "2-3"}),
        original_topology_aware_assignments=amplified_cpus(rng, {0: "0-1"}),
        region_names=rng.sample(REGIONS, rng.randint(0, 2)),
        isolated=rng.random() < 0.1,
        container_id=container_id(pod_uid, name) if rng.random() < 0.5 else "",
    )


def _add_container(rng: random.Random) -> Message:
    uid, name = _meta_key(rng)
    req = mc.AddContainerInfoRequest(pod_uid=uid, container_name=name)
    if rng.random() < 0.85:
        req.info.CopyFrom(container_info(rng, uid, name))
    return req


def _set_container(rng: random.Random) -> Message:
    uid, name = _meta_key(rng)
    return mc.SetContainerInfoRequest(
        pod_uid=uid, container_name=name, info=container_info(rng, uid, name)
    )


def _delete_containers(rng: random.Random) -> Message:
    req = mc.DeleteContainersRequest()
    if rng.random() < 0.02:
        return req  # no filter: every container goes (keeps long runs small)
    req.pod_uids.append(_meta_key(rng)[0])
    if rng.random() < 0.3:
        req.qos_levels.append(rng.choice(QOS_LEVELS))
    if rng.random() < 0.3:
        req.owner_pool_names.append(rng.choice(POOLS))
    if rng.random() < 0.3:
        req.keep.append(common_pb2.ContainerRef(pod_uid=req.pod_uids[0], container_name="main"))
    if rng.random() < 0.3:
        req.safe_time_unix_nano = time.time_ns() - rng.choice((0, 10**9, 60 * 10**9))
    return req


def _update_containers(rng: random.Random) -> Message:
    req = mc.UpdateContainersRequest()
    settable = [f for f in CONTAINER_FIELDS if f not in _KEYS]
    for _ in range(rng.randint(1, 3)):
        uid, name = _meta_key(rng)
        req.updates.add(
            pod_uid=uid,
            container_name=name,
            info=container_info(rng, uid, name),
            update_mask=FieldMask(paths=rng.sample(settable, rng.randint(0, 4))),
        )
    return req


def _pool_info(rng: random.Random, name: str) -> mc.PoolInfo:
    return mc.PoolInfo(
        pool_name=name if rng.random() < 0.5 else "",
        topology_aware_assignments=amplified_cpus(rng, {0: "0-1", 1: rng.choice(("2-3", "3"))}),
        original_topology_aware_assignments=amplified_cpus(rng, {0: "0-1"}),
        region_names=rng.sample(REGIONS, rng.randint(0, 2)),
    )


def _region_info(rng: random.Random, name: str) -> mc.RegionInfo:
    uid, ctr = _meta_key(rng)
    return mc.RegionInfo(
        region_name=name if rng.random() < 0.5 else "",
        region_type=rng.choice(("share", "dedicated", "isolation")),
        owner_pool_name=rng.choice(POOLS),
        binding_numas=rng.choice(("0", "1", "0-1", "", *CPULIST_AMPLIFIERS[:3])),
        region_status=mc.RegionStatus(overshoot_status={"cpu": "normal"}, bound_type="none"),
        pods={uid: mc.ContainerNames(container_names=[ctr])},
        control_knob_map={"cpu-requirement": mc.ControlKnobItem(value=4.0, action="none")},
        provision_policy_top_priority="canonical",
        provision_policy_in_use="canonical",
        headroom=rng.choice((0.0, 2.5, 16.0)),
        headroom_policy_top_priority="canonical",
        headroom_policy_in_use="canonical",
    )


def _set_pool(rng: random.Random) -> Message:
    name = rng.choice(POOLS)
    return mc.SetPoolInfoRequest(pool_name=name, info=_pool_info(rng, name))


def _set_regions(rng: random.Random) -> Message:
    names = rng.sample(REGIONS, rng.randint(0, len(REGIONS)))
    return mc.SetRegionEntriesRequest(entries={n: _region_info(rng, n) for n in names})


def _set_region(rng: random.Random) -> Message:
    name = rng.choice(REGIONS)
    return mc.SetRegionInfoRequest(region_name=name, info=_region_info(rng, name))


def _meta_by_key(cls: type[Message]) -> Seed:
    def seed(rng: random.Random) -> Message:
        uid, name = _meta_key(rng)
        return cls(pod_uid=uid, container_name=name)

    return seed


def _empty(cls: type[Message]) -> Seed:
    return lambda rng: cls()


def _health(cls: type[Message]) -> Seed:
    return lambda rng: cls(service=rng.choice(MAIN_SERVICES))


def _podresources_get(rng: random.Random) -> Message:
    i = rng.randrange(MM_PODS)
    if rng.random() < 0.1:
        return pr.GetPodResourcesRequest(pod_name=f"uid-{i}", pod_namespace="")
    return pr.GetPodResourcesRequest(pod_name=f"pod-{i}", pod_namespace=f"ns-{i % 3}")


REFLECTION_FILES = (
    "numamem/v1/memorymanager.proto",
    "numamem/v1/metacache.proto",
    "numamem/v1/podresources.proto",
    "grpc/health/v1/health.proto",
    "nope.proto",
)
REFLECTION_SYMBOLS = (
    *MAIN_SERVICES[1:],
    "v1.PodResourcesLister",
    "numamem.v1.Pod",
    "numamem.v1.MemoryManager.Allocate",
    "grpc.reflection.v1alpha.ServerReflection",
)


def _reflection(rng: random.Random) -> Message:
    """One request of a ServerReflectionInfo stream (the fuzzer sends one per stream)."""
    req = rf.ServerReflectionRequest(host=rng.choice(("", "localhost")))
    which = rng.randrange(5)
    if which == 0:
        req.list_services = ""
    elif which == 1:
        req.file_by_filename = rng.choice(REFLECTION_FILES)
    elif which == 2:
        req.file_containing_symbol = rng.choice(REFLECTION_SYMBOLS)
    elif which == 3:
        req.all_extension_numbers_of_type = rng.choice(REFLECTION_SYMBOLS)
    else:
        req.file_containing_extension.containing_type = rng.choice(REFLECTION_SYMBOLS)
        req.file_containing_extension.extension_number = rng.randrange(1, 1000)
    return req


SEEDS: dict[str, Seed] = {
    "/numamem.v1.Info/GetBuildInfo": _empty(info_pb2.GetBuildInfoRequest),
    "/numamem.v1.Topology/GetMachineInfo": _empty(topology_pb2.GetMachineInfoRequest),
    "/numamem.v1.MemoryManager/Allocate": _allocate,
    "/numamem.v1.MemoryManager/AllocatePod": _allocate_pod,
    "/numamem.v1.MemoryManager/GetPodMemory": lambda rng: mm.GetPodMemoryRequest(
        pod_uid=f"uid-{rng.randrange(MM_PODS)}"
    ),
    "/numamem.v1.MemoryManager/AddContainer": _mm_add_container,
    "/numamem.v1.MemoryManager/RemoveContainer": _remove_container,
    "/numamem.v1.MemoryManager/ReleasePod": lambda rng: mm.ReleasePodRequest(
        pod_uid=f"uid-{rng.randrange(MM_PODS)}"
    ),
    "/numamem.v1.MemoryManager/GetTopologyHints": lambda rng: mm.GetTopologyHintsRequest(
        pod=(pc := _pod_and_container(rng))[0], container_name=pc[1]
    ),
    "/numamem.v1.MemoryManager/GetPodTopologyHints": lambda rng: mm.GetPodTopologyHintsRequest(
        pod=pod(rng.randrange(MM_PODS))
    ),
    "/numamem.v1.MemoryManager/GetMemoryNUMANodes": _by_ref(mm.GetMemoryNUMANodesRequest),
    "/numamem.v1.MemoryManager/GetAllocatableMemory": _empty(mm.GetAllocatableMemoryRequest),
    "/numamem.v1.MemoryManager/GetMemory": _by_ref(mm.GetMemoryRequest),
    "/numamem.v1.MemoryManager/GetState": _empty(mm.GetStateRequest),
    "/numamem.v1.MemoryManager/SyncActivePods": _sync,
    "/numamem.v1.MemoryManager/Admit": _admit,
    "/numamem.v1.MemoryManager/Explain": _explain,
    "/numamem.v1.MemoryManager/Resize": _resize,
    "/numamem.v1.MemoryManager/ExplainResize": _resize,
    "/numamem.v1.MemoryManager/GetResidency": lambda rng: (
        mm.GetResidencyRequest() if rng.random() < 0.4 else _by_ref(mm.GetResidencyRequest)(rng)
    ),
    "/numamem.v1.MetaReader/GetContainerEntries": lambda rng: mc.GetContainerEntriesRequest(
        pod_uid=_meta_key(rng)[0]
    ),
    "/numamem.v1.MetaReader/GetContainerInfo": _meta_by_key(mc.GetContainerInfoRequest),
    "/numamem.v1.MetaReader/GetContainerMetric": lambda rng: mc.GetContainerMetricRequest(
        pod_uid=(key := _meta_key(rng))[0], container_name=key[1], metric_name=rng.choice(METRICS)
    ),
    "/numamem.v1.MetaReader/ListContainers": lambda rng: mc.ListContainersRequest(
        pod_uid=_meta_key(rng)[0] if rng.random() < 0.5 else ""
    ),
    "/numamem.v1.MetaReader/GetPoolInfo": lambda rng: mc.GetPoolInfoRequest(
        pool_name=rng.choice(POOLS)
    ),
    "/numamem.v1.MetaReader/GetPoolSize": lambda rng: mc.GetPoolSizeRequest(
        pool_name=rng.choice(POOLS)
    ),
    "/numamem.v1.MetaReader/ListPools": _empty(mc.ListPoolsRequest),
    "/numamem.v1.MetaReader/GetRegionInfo": lambda rng: mc.GetRegionInfoRequest(
        region_name=rng.choice(REGIONS)
    ),
    "/numamem.v1.MetaReader/ListRegions": _empty(mc.ListRegionsRequest),
    "/numamem.v1.MetaWriter/AddContainer": _add_container,
    "/numamem.v1.MetaWriter/SetContainerInfo": _set_container,
    "/numamem.v1.MetaWriter/DeleteContainer": _meta_by_key(mc.DeleteContainerRequest),
    "/numamem.v1.MetaWriter/RemovePod": lambda rng: mc.RemovePodRequest(pod_uid=_meta_key(rng)[0]),
    "/numamem.v1.MetaWriter/DeleteContainers": _delete_containers,
    "/numamem.v1.MetaWriter/UpdateContainers": _update_containers,
    "/numamem.v1.MetaWriter/SetPoolInfo": _set_pool,
    "/numamem.v1.MetaWriter/DeletePool": lambda rng: mc.DeletePoolRequest(
        pool_name=rng.choice(POOLS)
    ),
    "/numamem.v1.MetaWriter/GCPoolEntries": lambda rng: mc.GCPoolEntriesRequest(
        living_pool_names=rng.sample(POOLS, rng.randint(1, len(POOLS)))
    ),
    "/numamem.v1.MetaWriter/SetRegionEntries": _set_regions,
    "/numamem.v1.MetaWriter/SetRegionInfo": _set_region,
    "/grpc.health.v1.Health/Check": _health(health_pb2.HealthCheckRequest),
    "/grpc.health.v1.Health/List": _empty(health_pb2.HealthListRequest),
    "/grpc.health.v1.Health/Watch": _health(health_pb2.HealthCheckRequest),
    "/v1.PodResourcesLister/List": _empty(pr.ListPodResourcesRequest),
    "/v1.PodResourcesLister/GetAllocatableResources": _empty(pr.AllocatableResourcesRequest),
    "/v1.PodResourcesLister/Get": _podresources_get,
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": _reflection,
}
"""A valid request for each RPC (the catalogue's paths), as a function of a random generator."""
