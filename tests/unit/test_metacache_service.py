"""MetaReader and MetaWriter on the in-process server: every RPC, validation, NOT_FOUND."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from numamem.client import NumamemClient
from numamem.testing.server import InProcessServer
from numamem.v1 import common_pb2
from numamem.v1 import metacache_pb2 as mc
from tests.unit.test_memorymanager_service import code_and_details


def ci(pod: str = "p", ctr: str = "c", **kw: object) -> mc.ContainerInfo:
    return mc.ContainerInfo(pod_uid=pod, container_name=ctr, **kw)  # type: ignore[arg-type]


def bare(**kw: object) -> mc.ContainerInfo:
    """An info without keys (they come from the update or request)."""
    return mc.ContainerInfo(**kw)  # type: ignore[arg-type]


def update(ctr: str, info: mc.ContainerInfo, *mask: str) -> mc.ContainerUpdate:
    """The update of container ``p``/``ctr`` to ``info``, of the fields ``mask`` names
    (none: no mask, every field)."""
    return mc.ContainerUpdate(
        pod_uid="p",
        container_name=ctr,
        info=info,
        update_mask=FieldMask(paths=list(mask)) if mask else None,
    )


def test_containers_round_trip(numamem_server: InProcessServer) -> None:
    c = numamem_server.client
    full = ci(
        "p1",
        "app",
        pod_namespace="ns",
        pod_name="web",
        container_type=mc.MAIN,
        container_index=1,
        labels={"a": "1"},
        annotations={"numa_binding": "true"},
        qos_level="dedicated_cores",
        cpu_request=2,
        cpu_limit=2,
        memory_request=1 << 30,
        memory_limit=1 << 30,
        origin_owner_pool_name="dedicated",
        ramp_up=True,
        owner_pool_name="dedicated",
        topology_aware_assignments={0: "3,0-2", 1: "8-9"},
        original_topology_aware_assignments={0: "0-7"},
        region_names=["r2", "r1"],
        isolated=True,
        container_id="containerd://abc",
    )
    c.add_container_info(full)
    got = c.get_container_info("p1", "app")
    assert got.topology_aware_assignments[0] == "0-3"  # canonical cpulist
    assert list(got.region_names) == ["r1", "r2"]
    assert got.container_id == "containerd://abc"
    assert got.cpu_request == 2 and got.ramp_up and got.isolated
    assert set(c.get_container_entries("p1")) == {"app"}
    assert [i.container_name for i in c.list_containers()] == ["app"]
    assert [i.container_name for i in c.list_containers("p1")] == ["app"]
    c.add_container_info(ci("p1", "app", cpu_request=4, qos_level="other"))
    again = c.get_container_info("p1", "app")
    assert again.cpu_request == 4 and again.qos_level == "dedicated_cores"
    c.set_container_info(ci("p1", "app", qos_level="shared_cores"))
    assert c.get_container_info("p1", "app").labels == {}
    c.delete_container("p1", "app")
    code, details = code_and_details(lambda: c.get_container_entries("p1"))
    assert code == grpc.StatusCode.NOT_FOUND and "'p1'" in details
    c.remove_pod("p1")  # idempotent


def test_nil_info_creates_an_empty_pod(numamem_server: InProcessServer) -> None:
    c = numamem_server.client
    c.writer.AddContainer(mc.AddContainerInfoRequest(pod_uid="p", container_name="c"))
    assert c.get_container_entries("p") == {}


def test_delete_containers_criteria_keep_and_safe_time(numamem_server: InProcessServer) -> None:
    c = numamem_server.client
    for pod, ctr, qos, pool in [
        ("a", "1", "shared_cores", "share"),
        ("a", "2", "reclaimed_cores", "reclaim"),
        ("b", "1", "shared_cores", "share"),
        ("b", "2", "shared_cores", "isolation"),
    ]:
        c.add_container_info(ci(pod, ctr, qos_level=qos, owner_pool_name=pool))
    deleted = c.delete_containers(
        mc.DeleteContainersRequest(
            qos_levels=["shared_cores"],
            owner_pool_names=["share"],
            keep=[common_pb2.ContainerRef(pod_uid="b", container_name="1")],
        )
    )
    assert [(r.pod_uid, r.container_name) for r in deleted] == [("a", "1")]
    protected = c.delete_containers(
        mc.DeleteContainersRequest(pod_uids=["b"], safe_time_unix_nano=1)
    )
    assert protected == []  # added after safe time 1: protected
    everything = c.delete_containers(mc.DeleteContainersRequest())
    assert sorted((r.pod_uid, r.container_name) for r in everything) == [
        ("a", "2"),
        ("b", "1"),
        ("b", "2"),
    ]


def test_a_long_mask_is_checked_in_place_and_applies_each_field_once(
    numamem_server: InProcessServer,
) -> None:
    """A mask of 200,000 paths (1.4 MB): with an unknown path first it is refused at that
    path; of one field repeated it is that one update (the mask is never copied whole)."""
    c = numamem_server.client
    c.add_container_info(ci("p", "a", qos_level="shared_cores", cpu_request=1))
    code, details = code_and_details(
        lambda: c.update_containers([update("a", bare(), *(["zz"] * 200_000))])
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "updates[0].update_mask: unknown path 'zz'" in details
    c.update_containers([update("a", bare(cpu_request=7), *(["cpu_request"] * 200_000))])
    a = c.get_container_info("p", "a")
    assert (a.cpu_request, a.qos_level) == (7, "shared_cores")


def test_update_containers_with_field_masks(numamem_server: InProcessServer) -> None:
    c = numamem_server.client
    c.add_container_info(
        ci("p", "a", qos_level="shared_cores", owner_pool_name="share", cpu_request=1)
    )
    c.add_container_info(ci("p", "b", qos_level="shared_cores"))
    c.update_containers(
        [
            update("a", bare(owner_pool_name="reclaim", cpu_request=9), "owner_pool_name"),
            update("b", ci("p", "b", ramp_up=True)),
        ]
    )
    a, b = c.get_container_info("p", "a"), c.get_container_info("p", "b")
    assert (a.owner_pool_name, a.cpu_request, a.qos_level) == ("reclaim", 1, "shared_cores")
    assert b.ramp_up and b.qos_level == ""  # an empty mask replaces everything but the keys
    code, details = code_and_details(
        lambda: c.update_containers(
            [
                update("a", bare(ramp_up=True), "ramp_up"),
                update("zzz", bare(), "ramp_up"),
            ]
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND and "'zzz'" in details
    assert not c.get_container_info(
        "p", "a"
    ).ramp_up  # atomic: the first update was not applied either


def test_pools_and_regions(numamem_server: InProcessServer) -> None:
    c = numamem_server.client
    c.set_pool_info(mc.PoolInfo(pool_name="share", topology_aware_assignments={0: "0-3", 1: "8"}))
    c.set_pool_info(mc.PoolInfo(pool_name="reclaim"))
    assert c.get_pool_size("share") == 5
    assert [p.pool_name for p in c.list_pools()] == ["reclaim", "share"]
    assert c.gc_pool_entries(["share"]) == ["reclaim"]
    c.delete_pool("share")
    assert code_and_details(lambda: c.get_pool_size("share"))[0] == grpc.StatusCode.NOT_FOUND
    region = mc.RegionInfo(
        region_name="r1",
        region_type="share",
        owner_pool_name="share",
        binding_numas="0-1",
        region_status=mc.RegionStatus(
            overshoot_status={"cpu_sched_wait": "false"}, bound_type="upper"
        ),
        pods={"p": mc.ContainerNames(container_names=["c"])},
        control_knob_map={"reclaimed-cores-cpu-size": mc.ControlKnobItem(value=4, action="none")},
        headroom=1.5,
    )
    c.set_region_entries({"r1": region})
    assert c.get_region_info("r1") == region
    c.set_region_info(mc.RegionInfo(region_name="r2"))
    assert [r.region_name for r in c.list_regions()] == ["r1", "r2"]
    c.set_region_entries({})
    assert list(c.list_regions()) == []


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (
            lambda c: c.writer.AddContainer(
                mc.AddContainerInfoRequest(pod_uid="p", container_name="c", info=ci("q", "c"))
            ),
            "info.pod_uid: 'q' disagrees with pod_uid 'p'",
        ),
        (
            lambda c: c.writer.SetContainerInfo(
                mc.SetContainerInfoRequest(pod_uid="p", container_name="c", info=ci("p", "d"))
            ),
            "info.container_name: 'd' disagrees",
        ),
        (
            lambda c: c.add_container_info(ci(topology_aware_assignments={0: "0-x"})),
            "info.topology_aware_assignments[0]: invalid cpulist '0-x'",
        ),
        (
            lambda c: c.add_container_info(ci(cpu_request=-1)),
            "info.cpu_request: must be a finite number >= 0",
        ),
        (
            lambda c: c.add_container_info(ci(memory_limit=float("nan"))),
            "info.memory_limit: must be a finite number",
        ),
        (
            lambda c: c.add_container_info(ci(container_type=7)),
            "info.container_type: unknown value 7",
        ),  # type: ignore[arg-type]
        (lambda c: c.add_container_info(ci("", "c")), "pod_uid: must not be empty"),
        (
            lambda c: c.update_containers([update("c", ci(), "bogus")]),
            "updates[0].update_mask: unknown path 'bogus'",
        ),
        (
            lambda c: c.update_containers([update("c", ci(), "pod_uid")]),
            "'pod_uid' is the entry's key",
        ),
        (
            lambda c: c.writer.SetPoolInfo(
                mc.SetPoolInfoRequest(pool_name="a", info=mc.PoolInfo(pool_name="b"))
            ),
            "info.pool_name: 'b' disagrees",
        ),
        (
            lambda c: c.set_region_info(mc.RegionInfo(region_name="r", binding_numas="1--2")),
            "info.binding_numas",
        ),
        (
            lambda c: c.set_region_info(mc.RegionInfo(region_name="r", headroom=float("inf"))),
            "info.headroom: must be finite",
        ),
    ],
)
def test_invalid_argument(numamem_server: InProcessServer, call: object, fragment: str) -> None:
    code, details = code_and_details(lambda: call(numamem_server.client))  # type: ignore[operator]
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert fragment in details


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_container_info("p", "c"),
        lambda c: c.get_pool_info("x"),
        lambda c: c.get_region_info("r"),
        lambda c: list(c.list_containers("nope")),
    ],
)
def test_not_found(numamem_server: InProcessServer, call: object) -> None:
    assert code_and_details(lambda: call(numamem_server.client))[0] == grpc.StatusCode.NOT_FOUND  # type: ignore[operator]


def test_a_second_client_sees_acknowledged_writes(numamem_server: InProcessServer) -> None:
    numamem_server.client.add_container_info(ci())
    with NumamemClient(numamem_server.socket) as other:
        assert other.get_container_info("p", "c").pod_uid == "p"


def test_huge_labels_are_refused_by_the_entry_limit_and_memory_stays_bounded() -> None:
    """The fuzz campaign's finding: 40 AddContainer calls with a 3 MiB label took the daemon
    to 420 MiB RSS. Each is now RESOURCE_EXHAUSTED (LIMIT_EXCEEDED) with a short message,
    and nothing is stored."""
    import grpc
    import psutil

    from numamem.client import error_reason
    from numamem.testing.server import serve_in_process

    with serve_in_process() as server:
        rss = psutil.Process().memory_info().rss
        for i in range(40):
            with pytest.raises(grpc.RpcError) as refused:
                server.client.add_container_info(
                    mc.ContainerInfo(
                        pod_uid="p", container_name=f"c{i}", labels={"k": "v" * (3 << 20)}
                    )
                )
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error_reason(refused.value) == "LIMIT_EXCEEDED"
            assert "--max-metacache-entry-bytes 262144" in (refused.value.details() or "")
            assert len(refused.value.details() or "") < 1024
        assert list(server.client.list_containers()) == []
        assert psutil.Process().memory_info().rss - rss < 200 << 20
