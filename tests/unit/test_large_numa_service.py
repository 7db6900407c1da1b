"""Large machines through the real servicers: capped hint lists, other providers' hints in
Admit and Explain, restrict-to-cpu-numa-nodes, and max-allowable-numa-nodes up to 64."""

from __future__ import annotations

from math import comb

import grpc
import pytest

from numamem.config.model import FeatureGates, Limits
from numamem.errors import ConfigError
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import standard_nodes
from numamem.topology import Machine, NUMANode
from numamem.topologymanager.policy import NUMAInfo, parse_policy_options
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_memorymanager_service import code_and_details, container, pod

GI = 1024**3


def hint(*nodes: int, preferred: bool = True) -> mm.TopologyHint:
    return mm.TopologyHint(numa_nodes=nodes, preferred=preferred)


def provider(name: str, containers: dict[str, dict[str, mm.TopologyHints]]) -> mm.ProviderHints:
    return mm.ProviderHints(
        provider=name,
        containers={c: mm.ResourceHints(resources=r) for c, r in containers.items()},
    )


def test_hint_lists_are_capped_but_keep_every_preferred_hint() -> None:
    """12 nodes of 11Gi allocatable (10Gi on node 0); 60Gi needs 6 nodes: every 6-subset is
    preferred (924 of them, more than the cap of 255) and every larger one is a hint too."""
    nodes = standard_nodes(12, memory_gib=16)
    options = (("max-allowable-numa-nodes", "12"),)
    with serve_in_process(
        nodes,
        limits=Limits(max_topology_hints=255),
        topology_manager_policy="best-effort",
        topology_manager_policy_options=options,
    ) as server:
        resp = server.client.get_topology_hints(pod("big", container("app", "60Gi")), "app")
        hints = resp.hints["memory"]
        total = sum(comb(12, k) for k in range(6, 13))
        assert len(hints.hints) == comb(12, 6)
        assert all(h.preferred and len(h.numa_nodes) == 6 for h in hints.hints)
        assert list(hints.hints[0].numa_nodes) == [0, 1, 2, 3, 4, 5]  # kubelet's order
        assert (hints.omitted, hints.omitted_is_lower_bound) == (total - comb(12, 6), False)
        small = server.client.get_topology_hints(pod("small", container("app", "1Gi")), "app")
        listed = small.hints["memory"]
        assert len(listed.hints) == 255 and listed.omitted == 4095 - 255
        assert [list(h.numa_nodes) for h in listed.hints[:12]] == [[n] for n in range(12)]
        # Admission never depends on the cap.
        admitted = server.client.admit(pod("big", container("app", "60Gi")))
        assert admitted.admitted
        assert list(admitted.containers[0].blocks[0].numa_affinity) == [0, 1, 2, 3, 4, 5]


def test_other_providers_steer_and_reject_the_admission() -> None:
    with serve_in_process(topology_manager_policy="restricted") as server:
        client = server.client
        p = pod("p", container("app"))
        cpu_on_1 = provider("cpu", {"app": {"cpu": mm.TopologyHints(hints=[hint(1)])}})
        resp = client.admit(p, other_providers=[cpu_on_1])
        assert resp.admitted
        assert list(resp.containers[0].affinity.numa_nodes) == [1]
        assert {tuple(b.numa_affinity) for b in resp.containers[0].blocks} == {(1,)}
        # An empty list: no NUMA placement possible for that resource (kubelet's []).
        nowhere = provider("devices", {"app": {"gpu": mm.TopologyHints()}})
        rejected = client.admit(pod("q", container("app")), other_providers=[nowhere])
        assert (rejected.result, rejected.reason) == (mm.REJECTED, "TopologyAffinityError")
        assert client.get_memory("q", "app") == []
        # no_preference: kubelet's nil list, a preferred "any NUMA" hint.
        anywhere = provider("devices", {"app": {"gpu": mm.TopologyHints(no_preference=True)}})
        resp = client.admit(pod("r", container("app")), other_providers=[anywhere])
        assert resp.admitted and list(resp.containers[0].affinity.numa_nodes) == [0]


def test_explain_shows_the_other_providers() -> None:
    with serve_in_process(topology_manager_policy="best-effort") as server:
        cpu = provider(
            "cpu",
            {"app": {"cpu": mm.TopologyHints(hints=[hint(1), hint(0, 1, preferred=False)])}},
        )
        devices = provider("devices", {"app": {"gpu": mm.TopologyHints(no_preference=True)}})
        resp = server.client.explain(pod("p", container("app")), other_providers=[cpu, devices])
        [step] = resp.containers
        assert [o.provider for o in step.other_providers] == ["cpu", "devices"]
        assert [list(h.numa_nodes) for h in step.other_providers[0].hints["cpu"].hints] == [
            [1],
            [0, 1],
        ]
        assert step.other_providers[1].hints["gpu"].no_preference
        assert list(step.merged.numa_nodes) == [1] and step.merged.preferred
        assert resp.decision.admitted


@pytest.mark.parametrize(
    ("other", "expected"),
    [
        (
            provider("cpu", {"nope": {"cpu": mm.TopologyHints(hints=[hint(0)])}}),
            "other_providers[0].containers: 'nope' is not a container of pod 'p'",
        ),
        (
            provider("cpu", {"app": {"cpu": mm.TopologyHints(hints=[hint(7)])}}),
            "other_providers[0].containers['app'].resources['cpu'].hints[0].numa_nodes: "
            "NUMA node 7 does not exist on this machine (nodes: 0, 1)",
        ),
        (
            provider(
                "cpu", {"app": {"cpu": mm.TopologyHints(hints=[hint(0)], no_preference=True)}}
            ),
            "other_providers[0].containers['app'].resources['cpu']: no_preference is set but 1 "
            "hints are given",
        ),
        (
            mm.ProviderHints(provider=""),
            "other_providers[0].provider: must not be empty",
        ),
    ],
)
def test_bad_provider_hints_name_the_field(other: mm.ProviderHints, expected: str) -> None:
    with serve_in_process(topology_manager_policy="restricted") as server:
        code, details = code_and_details(
            lambda: server.client.admit(pod("p", container("app")), other_providers=[other])
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert expected in details


def test_restrict_to_cpu_numa_nodes_keeps_memory_only_nodes_out() -> None:
    """Nodes 2 and 3 have no CPUs (GPU memory, CXL): with the option they are in no hint
    and no allocation; without it they are ordinary nodes."""
    nodes = standard_nodes(4, memory_gib=16, memory_only=[2, 3])
    big = pod("big", container("app", "18Gi"))  # more than one node, less than two
    options = (("restrict-to-cpu-numa-nodes", "true"),)
    with serve_in_process(
        nodes, topology_manager_policy="best-effort", topology_manager_policy_options=options
    ) as server:
        hints = server.client.get_topology_hints(big, "app").hints["memory"].hints
        assert [list(h.numa_nodes) for h in hints] == [[0, 1]]
        resp = server.client.admit(big)
        assert {tuple(b.numa_affinity) for b in resp.containers[0].blocks} == {(0, 1)}
    with serve_in_process(nodes, topology_manager_policy="best-effort") as server:
        hints = server.client.get_topology_hints(big, "app").hints["memory"].hints
        assert [0, 2] in [list(h.numa_nodes) for h in hints]


def test_restrict_needs_a_cpu_node_and_max_allowable_stops_at_64() -> None:
    memory_only = Machine((NUMANode(0, GI), NUMANode(1, GI)))
    opts, _ = parse_policy_options({"restrict-to-cpu-numa-nodes": "true"})
    with pytest.raises(ConfigError, match="no NUMA node of this machine has CPUs"):
        NUMAInfo(memory_only, opts)
    parse_policy_options({"max-allowable-numa-nodes": "64"})
    with pytest.raises(ConfigError, match='the maximum value of "max-allowable-numa-nodes" is 64'):
        parse_policy_options({"max-allowable-numa-nodes": "65"})
    with pytest.raises(ConfigError, match='bad value for option "restrict-to-cpu-numa-nodes"'):
        parse_policy_options({"restrict-to-cpu-numa-nodes": "maybe"})


def test_pod_level_pods_on_64_nodes_take_the_budget_as_the_request() -> None:
    """64 nodes of 11Gi allocatable (10Gi on node 0), the pod-level gates in the pod scope: a
    pod whose pod-level budget (40Gi) needs 4 nodes gets one allocation on the narrowest
    fitting group, steered by a CPU provider's pod hints, its exclusive container inside it;
    the hints, the merge and the admission search all take the budget as the request."""
    nodes = standard_nodes(64, memory_gib=16)
    with serve_in_process(
        nodes,
        topology_manager_policy="best-effort",
        topology_manager_scope="pod",
        topology_manager_policy_options=(("max-allowable-numa-nodes", "64"),),
        feature_gates=FeatureGates(True, True),
    ) as server:
        client = server.client
        budget = {"cpu": "8", "memory": "40Gi"}
        p = mm.Pod(
            uid="big", namespace="ns", name="big", requests=budget, limits=budget,
            containers=[container("own", "8Gi"), mm.Container(name="shared")],
        )  # fmt: skip
        hints = client.get_pod_topology_hints(p).hints["memory"]
        assert list(hints.hints[0].numa_nodes) == [0, 1, 2, 3]
        assert all(len(h.numa_nodes) == 4 for h in hints.hints if h.preferred)
        cpu = mm.ProviderHints(
            provider="cpu",
            pod=mm.ResourceHints(resources={"cpu": mm.TopologyHints(hints=[hint(8, 9, 10, 11)])}),
        )
        resp = client.admit(p, other_providers=[cpu])
        assert resp.admitted, resp.message
        assert {tuple(b.numa_affinity) for b in resp.pod_blocks} == {(8, 9, 10, 11)}
        assert sum(b.size for b in resp.pod_blocks) == 40 * GI
        blocks = {
            c.container_name: [(b.size, list(b.numa_affinity)) for b in c.blocks]
            for c in resp.containers
        }
        assert blocks == {"own": [(8 * GI, [8, 9, 10, 11])], "shared": [(32 * GI, [8, 9, 10, 11])]}
        # The next such pod takes the next free group; the budget is reserved once.
        second = mm.Pod(uid="big2", namespace="ns", name="big2", requests=budget, limits=budget,
                        containers=[mm.Container(name="shared")])  # fmt: skip
        resp = client.admit(second)
        assert resp.admitted, resp.message
        assert {tuple(b.numa_affinity) for b in resp.pod_blocks} == {(0, 1, 2, 3)}
        reserved = sum(
            n.memory_map["memory"].reserved for n in client.get_state().machine_state.values()
        )
        assert reserved == 80 * GI
