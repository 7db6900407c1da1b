"""Findings of the review of issue 28 (pod-level resources), each a reproduction.

* With the feature gates off, a pod that sets pod-level resources carries the QoS class the
  API server gave it (``status.qosClass``, computed from ``spec.resources``: a pod with
  pod-level resources exists only where the API server's ``PodLevelResources`` is on). The
  kubelet reads that class (``GetPodQOS``) and skips the pod ("Allocation skipped, pod is
  using pod-level resources"); numamem must not refuse the message as contradictory, nor
  fail a whole SyncActivePods over it.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm


@pytest.fixture(scope="module")
def gates_off() -> Iterator[InProcessServer]:
    with serve_in_process(topology_manager_policy="best-effort", topology_manager_scope="pod") as s:
        yield s


def api_server_pod(uid: str, qos_class: str = "Guaranteed") -> mm.Pod:
    """Guaranteed by its pod-level resources (its container has no limits of its own), with
    the class the API server computed for it."""
    budget = {"cpu": "2", "memory": "2Gi"}
    return mm.Pod(
        uid=uid,
        namespace="ns",
        name=uid,
        requests=budget,
        limits=budget,
        containers=[mm.Container(name="app", requests={"memory": "1Gi"})],
        qos_class=qos_class,
    )


def test_gates_off_a_pod_level_pod_with_its_status_qos_class_is_skipped(
    gates_off: InProcessServer,
) -> None:
    client = gates_off.client
    resp = client.admit(api_server_pod("plr-off"))
    assert resp.admitted, resp.message
    assert [list(c.blocks) for c in resp.containers] == [[]]  # nothing pinned
    assert not resp.pod_blocks
    assert "plr-off" not in client.get_state().entries
    # One such pod among the active pods must not fail the whole synchronisation.
    assert client.sync_active_pods([api_server_pod("plr-off")]) == []


def test_gates_off_a_contradicting_qos_class_is_still_refused(gates_off: InProcessServer) -> None:
    with pytest.raises(grpc.RpcError) as info:
        gates_off.client.admit(api_server_pod("plr-bad", qos_class="BestEffort"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pod.qos_class: 'BestEffort' contradicts" in str(info.value.details())
