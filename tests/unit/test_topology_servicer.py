"""The Topology servicer on pytest-grpc's real server (unix socket, the daemon's interceptor)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from numamem.api.interceptors import Readiness, ServerInterceptor
from numamem.api.topology import TopologyServicer
from numamem.testing.daemon import short_tmpdir
from numamem.testing.sysfs import HP_1G, HP_2M, machine_tree
from numamem.topology.sysfs import discover
from numamem.v1 import topology_pb2, topology_pb2_grpc


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def sysfs(root: Path) -> Path:
    return machine_tree(root / "sys", 2)


@pytest.fixture(scope="module")
def grpc_addr(root: Path) -> str:
    """pytest-grpc's default picks a TCP port with a leaked socket; use a unix socket."""
    return f"unix://{root}/t.sock"


@pytest.fixture(scope="module")
def grpc_interceptors() -> list[grpc.ServerInterceptor]:
    readiness = Readiness()
    readiness.set_ready()
    return [ServerInterceptor(readiness)]


@pytest.fixture(scope="module")
def grpc_add_to_server() -> Callable[[Any, grpc.Server], None]:
    return topology_pb2_grpc.add_TopologyServicer_to_server


@pytest.fixture(scope="module")
def grpc_servicer(sysfs: Path) -> TopologyServicer:
    return TopologyServicer(discover(sysfs), str(sysfs))


@pytest.fixture(scope="module")
def grpc_stub_cls() -> type[topology_pb2_grpc.TopologyStub]:
    return topology_pb2_grpc.TopologyStub


@contextmanager
def free_pages_reading(sysfs: Path, node: int, size_kb: int, text: str) -> Iterator[Path]:
    """Node ``node``'s free_hugepages file of ``size_kb`` pages reads ``text`` in the block,
    then what it read before (the tree is the module's); yields its path."""
    path = sysfs / f"devices/system/node/node{node}/hugepages/hugepages-{size_kb}kB/free_hugepages"
    before = path.read_text()
    path.write_text(text)
    try:
        yield path
    finally:
        path.write_text(before)


def test_machine_info_describes_the_tree(grpc_stub: topology_pb2_grpc.TopologyStub) -> None:
    info = grpc_stub.GetMachineInfo(topology_pb2.GetMachineInfoRequest(), timeout=5)
    assert [n.id for n in info.numa_nodes] == [0, 1]
    node = info.numa_nodes[1]
    assert node.memory_bytes == 16 * 1024**3
    assert list(node.cpus) == [2, 3]
    assert list(node.distances) == [22, 10]
    assert [(h.page_size_bytes, h.total_pages, h.free_pages) for h in node.hugepages] == [
        (2 * 1024**2, 512, 512),
        (1024**3, 4, 4),
    ]


def test_free_hugepages_are_read_at_call_time(
    grpc_stub: topology_pb2_grpc.TopologyStub, sysfs: Path
) -> None:
    with free_pages_reading(sysfs, 0, HP_1G, "1\n"):
        info = grpc_stub.GetMachineInfo(topology_pb2.GetMachineInfoRequest(), timeout=5)
        assert info.numa_nodes[0].hugepages[1].free_pages == 1
        assert info.numa_nodes[0].hugepages[1].total_pages == 4


def test_unreadable_free_count_is_failed_precondition(
    grpc_stub: topology_pb2_grpc.TopologyStub, sysfs: Path
) -> None:
    with free_pages_reading(sysfs, 1, HP_2M, "gone\n") as path:
        with pytest.raises(grpc.RpcError) as info:
            grpc_stub.GetMachineInfo(topology_pb2.GetMachineInfoRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert str(path) in (info.value.details() or "")
