"""The pod-level tables of tests/unit/test_pod_level.py (every validatePodScopeResources
rejection, every partition case) through the real servicers: Admit in the pod scope with the
gates on, AllocatePod's refusals, and GetMemory's isolation per container."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import grpc
import pytest

from numamem.client import error_reason
from numamem.config.model import FeatureGates
from numamem.pod import Container, Pod, aggregate_container_resources
from numamem.quantity import Quantity
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from tests.tables import named_rows
from tests.unit.test_pod_level import PARTITIONS, VALIDATION, PartitionCase, pod_level


def quantities(values: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(q) for name, q in values.items()}


def container_to_proto(c: Container) -> mm.Container:
    return mm.Container(
        name=c.name,
        requests=quantities(c.requests),
        limits=quantities(c.limits),
        restart_policy=c.restart_policy,
    )


def pod_to_proto(pod: Pod) -> mm.Pod:
    return mm.Pod(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        init_containers=[container_to_proto(c) for c in pod.init_containers],
        containers=[container_to_proto(c) for c in pod.containers],
        requests=quantities(pod.requests),
        limits=quantities(pod.limits),
    )


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessServer]:
    with serve_in_process(
        topology_manager_policy="best-effort",
        topology_manager_scope="pod",
        feature_gates=FeatureGates(True, True),
    ) as running:
        yield running


def sizes(blocks: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in blocks:  # type: ignore[attr-defined]
        out[b.type] = out.get(b.type, 0) + b.size
    return out


@pytest.mark.parametrize("case", PARTITIONS, ids=lambda c: c.name)
def test_the_partition_through_the_servicers(server: InProcessServer, case: PartitionCase) -> None:
    client = server.client
    pod = pod_to_proto(pod_level(case.inits, case.apps, case.memory, case.hugepages, uid="pt"))
    try:
        resp = client.admit(pod)
        assert resp.admitted, resp.message
        assert {c.container_name: sizes(c.blocks) for c in resp.containers} == case.expected
        nodes = {n for b in resp.pod_blocks for n in b.numa_affinity}
        assert len(nodes) == 1
        for name, expected in case.expected.items():
            got = client.call(
                client.memory.GetMemory, mm.GetMemoryRequest(pod_uid="pt", container_name=name)
            )
            level = (
                mm.RESOURCE_ISOLATION_HOST
                if not expected
                else mm.RESOURCE_ISOLATION_CONTAINER
                if name in case.exclusive
                else mm.RESOURCE_ISOLATION_POD
            )
            assert got.isolation == level, name
    finally:
        client.release_pod("pt")
    assert client.get_state().entries == {}


@pytest.mark.parametrize(
    ("inits", "apps", "memory", "hugepages", "expected"),
    named_rows(VALIDATION),
)
def test_every_rejection_text_through_admit_and_allocate_pod(
    server: InProcessServer,
    inits: tuple[Container, ...],
    apps: tuple[Container, ...],
    memory: int,
    hugepages: int,
    expected: str | None,
) -> None:
    client = server.client
    core = pod_level(inits, apps, memory, hugepages, uid="v")
    pod = pod_to_proto(core)
    aggregate = aggregate_container_resources(core)["memory"].value
    try:
        if aggregate > memory:
            # Not a pod the API server lets through: refused before the memory manager sees it.
            with pytest.raises(grpc.RpcError) as refused:
                client.admit(pod)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "must be greater than or equal to aggregate container requests" in (
                refused.value.details() or ""
            )
            return
        resp = client.admit(pod)
        if expected is None:
            assert resp.admitted, resp.message
            return
        # best-effort accepts the empty hint lists; AllocatePod then refuses with its reason
        assert (resp.admitted, resp.reason, resp.message) == (
            False,
            "EmptyPodSharedPoolError",
            expected,
        )
        with pytest.raises(grpc.RpcError) as info:
            client.allocate_pod(pod)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error_reason(info.value), info.value.details()) == (
            "EMPTY_POD_SHARED_POOL",
            expected,
        )
        assert client.explain(pod).pod_level.rejection == expected
    finally:
        client.release_pod("v")
    assert client.get_state().entries == {}
