"""Prometheus metrics over HTTP on a unix socket and on a TCP port."""

from __future__ import annotations

import contextlib
import errno
import http.client
import socket
import urllib.request
from pathlib import Path

import grpc
import pytest

from numamem import version
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.errors import StartupError
from numamem.testing.cgroups import SYSTEMD, V2, CgroupValues, write_container
from numamem.testing.daemon import short_tmpdir
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import standard_nodes
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.ports import on_free_ports

GI = 1024**3


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost")
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def scrape_unix(path: str) -> str:
    conn = UnixHTTPConnection(path)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def value(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r}")


def pod(uid: str, memory: str) -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(uid=uid, containers=[mm.Container(name="c", requests=res, limits=res)])


def test_metrics_on_a_unix_socket() -> None:
    root = short_tmpdir()
    with serve_in_process(
        root=root,
        metrics_socket=str(root / "metrics.sock"),
        topology_manager_policy="single-numa-node",
    ) as server:
        c = server.client
        assert not c.admit(pod("wide", "14Gi")).admitted  # needs two nodes: TopologyAffinityError
        assert c.admit(pod("p1", "2Gi")).admitted
        c.set_container_info(mc.ContainerInfo(pod_uid="p", container_name="c"))
        c.set_pool_info(mc.PoolInfo(pool_name="share"))
        text = scrape_unix(str(root / "metrics.sock"))
    assert (
        value(text, 'numamem_numa_memory_bytes{kind="reserved",node="0",resource="memory"}')
        == 2 * GI
    )
    assert (
        value(text, 'numamem_numa_memory_bytes{kind="allocatable",node="1",resource="memory"}')
        == 11 * GI
    )
    assert (
        value(text, 'numamem_numa_memory_bytes{kind="total",node="0",resource="hugepages-1Gi"}')
        == 4 * GI
    )
    assert value(text, 'numamem_numa_assignments{node="0"}') == 1
    assert value(text, 'numamem_numa_group_info{group="0",node="0"}') == 1
    assert value(text, "numamem_memory_manager_pods") == 1
    assert value(text, 'numamem_admissions_total{reason="",result="admitted"}') == 1
    assert (
        value(text, 'numamem_admissions_total{reason="TopologyAffinityError",result="rejected"}')
        == 1
    )
    assert (
        value(
            text, 'numamem_rpc_requests_total{code="OK",method="/numamem.v1.MemoryManager/Admit"}'
        )
        == 2
    )
    assert (
        value(
            text,
            'numamem_rpc_duration_seconds_count{code="OK",method="/numamem.v1.MemoryManager/Admit"}',
        )
        == 2
    )
    assert (
        value(text, 'numamem_checkpoint_write_duration_seconds_count{file="memory_manager_state"}')
        >= 1
    )
    assert (
        value(
            text,
            'numamem_checkpoint_write_duration_seconds_count{file="sys_advisor_state.journal"}',
        )
        >= 2
    )
    assert value(text, 'numamem_metacache_entries{kind="containers"}') == 1
    assert value(text, 'numamem_metacache_entries{kind="pools"}') == 1
    info = version.build_info()
    labels = ",".join(f'{k}="{info[k]}"' for k in ("commit", "python", "version"))
    assert value(text, f"numamem_build_info{{{labels}}}") == 1
    assert [line for line in text.splitlines() if line.startswith("numamem_build_info")] == [
        f"numamem_build_info{{{labels}}} 1.0"
    ]


def test_metrics_on_a_tcp_port() -> None:
    with contextlib.ExitStack() as stack:
        server, port = on_free_ports(
            lambda ports: (stack.enter_context(serve_in_process(metrics_port=ports[0])), ports[0])
        )
        server.client.get_state()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    assert (
        value(
            text,
            'numamem_rpc_requests_total{code="OK",method="/numamem.v1.MemoryManager/GetState"}',
        )
        == 1
    )
    assert "numamem_numa_memory_bytes" in text


def test_only_metrics_is_served_everything_else_is_404() -> None:
    """prometheus_client answered `/` and `/healthz` with the metrics (issue 26), which looks
    like a health endpoint and is not one."""
    root = short_tmpdir()
    metrics_socket = str(root / "metrics.sock")
    with contextlib.ExitStack() as stack:
        server, port = on_free_ports(
            lambda ports: (
                stack.enter_context(
                    serve_in_process(
                        root=root, metrics_port=ports[0], metrics_socket=metrics_socket
                    )
                ),
                ports[0],
            )
        )
        server.client.get_state()
        for path in ("/", "/healthz", "/metrics/", "/favicon.ico", "/metricsx"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (404, b"numamem serves /metrics only\n"), path
            conn.close()
            unix = UnixHTTPConnection(metrics_socket)
            unix.request("GET", path)
            unix_resp = unix.getresponse()
            assert (unix_resp.status, unix_resp.read()) == (404, b"numamem serves /metrics only\n")
            unix.close()
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics?name[]=numamem_rpc_requests_total", timeout=5
        ) as resp:
            text = resp.read().decode()
        assert "# TYPE numamem_rpc_requests_total counter" in text
        assert "numamem_rpc_duration_seconds" not in text  # the query filter still works
        assert "numamem_numa_memory_bytes" in scrape_unix(metrics_socket)


def test_no_metrics_listener_unless_asked() -> None:
    with serve_in_process() as server:
        assert not any(type(c).__name__ == "MetricsComponent" for c in server.daemon._components)


def test_metrics_socket_never_replaces_a_file_or_a_live_socket() -> None:
    root = short_tmpdir()
    occupied = root / "metrics.sock"
    occupied.write_text("not a socket")
    with (
        pytest.raises(StartupError, match=r"--metrics-socket .* exists and is not a socket"),
        serve_in_process(root=root, metrics_socket=str(occupied)),
    ):
        pass
    assert occupied.read_text() == "not a socket"
    occupied.unlink()
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(occupied))
        live.listen()
        with (
            pytest.raises(StartupError, match="is served by another live process"),
            serve_in_process(root=root, metrics_socket=str(occupied)),
        ):
            pass


def test_failed_writes_and_collector_rounds_are_counted() -> None:
    root = short_tmpdir()
    cgroups = root / "cgroup"
    write_container(cgroups, V2, SYSTEMD, "guaranteed", "p1", "aaa", CgroupValues(memory_usage=GI))
    broken = write_container(cgroups, V2, SYSTEMD, "guaranteed", "p2", "bbb", CgroupValues())
    (cgroups / broken / "memory.current").write_text("not a number\n")
    with serve_in_process(
        root=root,
        cgroup_root=str(cgroups),
        metric_interval_seconds=3600,
        metrics_socket=str(root / "metrics.sock"),
    ) as server:
        c = server.client
        c.add_container_info(mc.ContainerInfo(pod_uid="p1", container_name="c", container_id="aaa"))
        c.add_container_info(mc.ContainerInfo(pod_uid="p2", container_name="c", container_id="bbb"))
        cache = server.component(MetaCacheComponent)
        cache.collector.sample_once()
        memory = server.component(MemoryManagerComponent)

        def full_disk(stage: str, target: Path) -> None:
            if stage == "write":
                raise OSError(errno.ENOSPC, "No space left on device")

        memory.manager._store.faults = full_disk  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as info:
            c.admit(pod("p9", "1Gi"))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        text = scrape_unix(str(root / "metrics.sock"))
    assert value(text, 'numamem_checkpoint_write_failures_total{file="memory_manager_state"}') == 1
    assert value(text, "numamem_collector_sample_duration_seconds_count") >= 1
    assert value(text, "numamem_collector_errors_total") >= 1


def test_drift_gauge_after_a_rebaselined_restart() -> None:
    """numamem_memory_drift_bytes{node,resource}: MemTotal now minus stored, at the last start."""
    root = short_tmpdir()
    with serve_in_process(root=root) as server:
        assert server.client.admit(pod("p1", "2Gi")).admitted
    nodes = standard_nodes(2)
    nodes[0].memory_kb += 640 * 1024  # the trial's +640Mi on node 0
    with serve_in_process(nodes, root=root, metrics_socket=str(root / "metrics.sock")) as server:
        assert [b.size for b in server.client.get_memory("p1", "c")] == [2 * GI]
        text = scrape_unix(str(root / "metrics.sock"))
    assert value(text, 'numamem_memory_drift_bytes{node="0",resource="memory"}') == 640 * 1024**2
    assert value(text, 'numamem_memory_drift_bytes{node="1",resource="memory"}') == 0
    assert value(text, 'numamem_memory_drift_bytes{node="0",resource="hugepages-2Mi"}') == 0
