"""GetContainerMetric through gRPC, with container ids from the metacache and from MemoryManager.AddContainer."""

from __future__ import annotations

import functools
import time

import grpc
import pytest

from numamem.api.metacache import MetaCacheComponent
from numamem.testing.cgroups import CGROUPFS, SYSTEMD, V2, CgroupValues, write_container
from numamem.testing.daemon import short_tmpdir
from numamem.testing.server import serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.unit.test_memorymanager_service import code_and_details

MI = 1024**2


def test_metrics_of_metacache_and_memory_manager_containers() -> None:
    root = short_tmpdir()
    cgroups = root / "cgroup"
    write_container(
        cgroups, V2, CGROUPFS, "burstable", "p1", "aaa", CgroupValues(memory_usage=100 * MI)
    )
    write_container(
        cgroups, V2, SYSTEMD, "guaranteed", "p2", "bbb", CgroupValues(memory_usage=200 * MI)
    )
    with serve_in_process(root=root, cgroup_root=str(cgroups)) as server:
        client = server.client
        client.add_container_info(
            mc.ContainerInfo(pod_uid="p1", container_name="app", container_id="containerd://aaa")
        )
        res = {"cpu": "1", "memory": "1Gi"}
        pod = mm.Pod(uid="p2", containers=[mm.Container(name="db", requests=res, limits=res)])
        assert client.admit(pod).admitted
        client.add_container(pod, "db", "containerd://bbb")
        server.component(MetaCacheComponent).collector.sample_once()
        first = client.get_container_metric("p1", "app", "mem.usage.container")
        assert first.value == 100 * MI
        assert first.time.seconds > 1_600_000_000
        assert client.get_container_metric("p2", "db", "mem.usage.container").value == 200 * MI
        for (uid, name, metric), katalyst_says in [
            (("p1", "app", "no.such.metric"), "load value failed"),
            (("p9", "x", "mem.usage.container"), "empty map"),
        ]:
            get = functools.partial(client.get_container_metric, uid, name, metric)
            assert code_and_details(get) == (
                grpc.StatusCode.NOT_FOUND,
                f"[MetricStore] {katalyst_says}, metric={metric}, podUID={uid}, containerName={name}",
            )
        # Releasing the container (RemoveContainer) ends its sampling.
        client.remove_container("containerd://bbb")
        server.component(MetaCacheComponent).collector.sample_once()
        with pytest.raises(grpc.RpcError, match="empty map"):
            client.get_container_metric("p2", "db", "mem.usage.container")


def test_expired_metric_is_failed_precondition() -> None:
    root = short_tmpdir()
    cgroups = root / "cgroup"
    write_container(cgroups, V2, CGROUPFS, "burstable", "p1", "aaa", CgroupValues(memory_usage=1))
    with serve_in_process(
        root=root, cgroup_root=str(cgroups), metric_insurance_period_seconds=60
    ) as server:
        server.client.add_container_info(
            mc.ContainerInfo(pod_uid="p1", container_name="app", container_id="aaa")
        )
        component = server.component(MetaCacheComponent)
        component.collector.clock = lambda: 1_000 * 10**9  # a sample taken long ago
        component.collector.sample_once()
        with pytest.raises(grpc.RpcError) as info:
            server.client.get_container_metric("p1", "app", "mem.usage.container")
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.details() == "metric data expired"


@pytest.mark.parametrize("persist", [True, False])
def test_the_collector_samples_by_itself_and_stops_with_the_daemon(persist: bool) -> None:
    """With and without persistence, the collector thread runs every --metric-interval."""
    root = short_tmpdir()
    cgroups = root / "cgroup"
    write_container(cgroups, V2, SYSTEMD, "guaranteed", "p1", "aaa", CgroupValues(memory_usage=MI))
    with serve_in_process(
        root=root,
        cgroup_root=str(cgroups),
        metric_interval_seconds=0.05,
        metacache_persist=persist,
    ) as server:
        client = server.client
        client.add_container_info(
            mc.ContainerInfo(pod_uid="p1", container_name="app", container_id="aaa")
        )
        component = server.component(MetaCacheComponent)
        deadline = time.monotonic() + 10
        while component.collector.stats.samples < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert component.collector.stats.samples >= 3
        assert client.get_container_metric("p1", "app", "mem.usage.container").value == MI
    thread = component.collector._thread
    assert thread is not None and not thread.is_alive()
