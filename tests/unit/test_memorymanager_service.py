"""The MemoryManager service on the in-process server (real servicers, unix socket, fake machine)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import grpc
import pytest

from numamem.api.status import REASONS
from numamem.client import NumamemClient, error_reason
from numamem.config.model import Limits
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.testing.sysfs import standard_nodes
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import run_together

GI = 1024**3


def container(
    name: str,
    memory: str = "1Gi",
    cpu: str = "1",
    hugepages: dict[str, str] | None = None,
    guaranteed: bool = True,
    restart_policy: str = "",
) -> mm.Container:
    res = {"cpu": cpu, "memory": memory, **(hugepages or {})}
    return mm.Container(
        name=name, requests=res, limits=res if guaranteed else {}, restart_policy=restart_policy
    )


def pod(uid: str, *containers: mm.Container, inits: tuple[mm.Container, ...] = ()) -> mm.Pod:
    return mm.Pod(uid=uid, namespace="ns", name=uid, containers=containers, init_containers=inits)


def code_and_details(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status code and details of the gRPC error ``call()`` must raise."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details() or ""


def test_admit_allocate_query_release(numamem_server: InProcessServer) -> None:
    client = numamem_server.client
    p = pod("p1", container("app", "2Gi", hugepages={"hugepages-2Mi": "512Mi"}))
    resp = client.admit(p)
    assert resp.admitted
    [adm] = resp.containers
    assert adm.container_name == "app"
    assert [(list(b.numa_affinity), b.type, b.size) for b in adm.blocks] == [
        ([0], "memory", 2 * GI),
        ([0], "hugepages-2Mi", GI // 2),
    ]
    assert client.get_memory_numa_nodes("p1", "app") == [0]
    assert [(b.type, b.size) for b in client.get_memory("p1", "app")] == [
        ("memory", 2 * GI),
        ("hugepages-2Mi", GI // 2),
    ]
    state = client.get_state()
    assert state.policy_name == "Static"
    assert state.machine_state[0].number_of_assignments == 2
    assert state.machine_state[0].memory_map["memory"].reserved == 2 * GI
    assert list(state.entries["p1"].containers["app"].blocks) == list(adm.blocks)
    client.add_container(p, "app", "cid-1")
    client.remove_container("cid-1")
    assert client.get_memory("p1", "app") == []
    assert client.get_memory_numa_nodes("p1", "app") == []
    client.remove_container("cid-1")  # unknown ids are fine


def test_allocate_with_and_without_affinity(numamem_server: InProcessServer) -> None:
    client = numamem_server.client
    p = pod("p", container("a"), container("b"))
    blocks = client.allocate(p, "a", mm.TopologyHint(numa_nodes=[1], preferred=True)).blocks
    assert list(blocks[0].numa_affinity) == [1]
    assert list(client.allocate(p, "b").blocks[0].numa_affinity) == [0]  # default hint: narrowest
    assert list(
        client.allocate(p, "b", mm.TopologyHint(numa_nodes=[1])).blocks[0].numa_affinity
    ) == [0]  # idempotent


def test_unsatisfiable_allocate_is_resource_exhausted_with_kubelet_text(
    numamem_server: InProcessServer,
) -> None:
    code, details = code_and_details(
        lambda: numamem_server.client.allocate(pod("big", container("a", "40Gi")), "a")
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
        in details
    )


def test_hints(numamem_server: InProcessServer) -> None:
    client = numamem_server.client
    resp = client.get_topology_hints(pod("p", container("a", "20Gi")), "a")
    assert [(list(h.numa_nodes), h.preferred) for h in resp.hints["memory"].hints] == [
        ([0, 1], True)
    ]
    assert set(resp.hints) == {"memory"}
    burstable = pod("b", container("a", guaranteed=False))
    assert dict(client.get_topology_hints(burstable, "a").hints) == {}
    pod_hints = client.get_pod_topology_hints(pod("p2", container("a"), container("b")))
    assert [list(h.numa_nodes) for h in pod_hints.hints["memory"].hints] == [[0], [1], [0, 1]]
    assert [h.preferred for h in pod_hints.hints["memory"].hints] == [True, True, False]


def test_allocatable_memory(numamem_server: InProcessServer) -> None:
    blocks = numamem_server.client.get_allocatable_memory()
    assert [(list(b.numa_affinity), b.type, b.size) for b in blocks] == [
        ([0], "memory", 16 * GI - GI - GI - 4 * GI),
        ([0], "hugepages-1Gi", 4 * GI),
        ([0], "hugepages-2Mi", GI),
        ([1], "memory", 16 * GI - GI - 4 * GI),
        ([1], "hugepages-1Gi", 4 * GI),
        ([1], "hugepages-2Mi", GI),
    ]


def test_sync_active_pods(numamem_server: InProcessServer) -> None:
    client = numamem_server.client
    keep, drop = pod("keep", container("a")), pod("drop", container("a"), inits=(container("i"),))
    assert client.admit(keep).admitted
    assert client.admit(drop).admitted
    removed = client.sync_active_pods([keep])
    assert sorted((r.pod_uid, r.container_name) for r in removed) == [("drop", "a"), ("drop", "i")]
    assert set(client.get_state().entries) == {"keep"}


@pytest.mark.parametrize(
    ("request_fn", "fragment"),
    [
        (lambda c: c.allocate(pod("", container("a")), "a"), "pod.uid: must not be empty"),
        (
            lambda c: c.allocate(pod("p", container("a"), container("a")), "a"),
            "pod: duplicate container name 'a'",
        ),
        (
            lambda c: c.allocate(pod("p", container("a"), inits=(container("a"),)), "a"),
            "duplicate container name 'a'",
        ),
        (
            lambda c: c.allocate(pod("p", container("a")), "b"),
            "container_name: 'b' is not a container of pod 'p'",
        ),
        (
            lambda c: c.allocate(pod("p", container("a", "1Gb")), "a"),
            "pod.containers[0].requests[\"memory\"]: '1Gb' is not a valid quantity",
        ),
        (
            lambda c: c.allocate(pod("p", container("a", "-1Gi")), "a"),
            'pod.containers[0].requests["memory"]: must not be negative',
        ),
        (
            lambda c: c.allocate(pod("p", container("a", "1e400")), "a"),
            "is not a whole number of bytes below 2^63",
        ),
        (lambda c: c.allocate(pod("p", container("a", "NaN")), "a"), "is not a valid quantity"),
        (
            lambda c: c.allocate(pod("p", container("a", "1.5")), "a"),
            "is not a whole number of bytes",
        ),
        (
            lambda c: c.allocate(
                pod("p", container("a", hugepages={"hugepages-64Ki": "1Mi"})), "a"
            ),
            "hugepages-64Ki is not a hugepage size of this machine (it has: hugepages-2Mi, hugepages-1Gi)",
        ),
        (
            lambda c: c.allocate(
                pod(
                    "p",
                    mm.Container(name="a", requests={"memory": "2Gi"}, limits={"memory": "1Gi"}),
                ),
                "a",
            ),
            'requests["memory"]: 2Gi must be less than or equal to the limit 1Gi',
        ),
        (
            lambda c: c.allocate(
                pod(
                    "p",
                    mm.Container(
                        name="a",
                        requests={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"},
                        limits={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
                    ),
                ),
                "a",
            ),
            'pod.containers[0].requests["hugepages-2Mi"]: hugepage requests must equal limits',
        ),
        (
            lambda c: c.admit(
                mm.Pod(
                    uid="p",
                    qos_class="Guaranteed",
                    containers=[mm.Container(name="a", requests={"memory": "1Gi"})],
                )
            ),
            "pod.qos_class: 'Guaranteed' contradicts the requests and limits, which make the pod "
            "Burstable",
        ),
        (
            lambda c: c.allocate(pod("p", container("a", restart_policy="Never")), "a"),
            "restart_policy: 'Never' is not supported",
        ),
        (
            lambda c: c.allocate(pod("p", container("a", restart_policy="Always")), "a"),
            "only init containers may set it",
        ),
        (
            lambda c: c.allocate(pod("p", container("a")), "a", mm.TopologyHint(numa_nodes=[7])),
            "affinity.numa_nodes: NUMA node 7 does not exist",
        ),
        (
            lambda c: c.allocate(
                pod("p", container("a")), "a", mm.TopologyHint(numa_nodes=list(range(65)))
            ),
            "65 NUMA ids, more than the 2 nodes of this machine",
        ),
        (
            lambda c: c.allocate(pod("p", container("a")), "a", mm.TopologyHint(numa_nodes=[0, 0])),
            "duplicate NUMA ids",
        ),
        (
            lambda c: c.admit(mm.Pod(uid="p", qos_class="Gold", containers=[container("a")])),
            "pod.qos_class: 'Gold'",
        ),
        (lambda c: c.admit(mm.Pod(uid="p")), "a pod needs at least one container"),
        (
            lambda c: c.add_container(pod("p", container("a")), "a", ""),
            "container_id: must not be empty",
        ),
        (lambda c: c.remove_container(""), "container_id: must not be empty"),
        (lambda c: c.get_memory("", "a"), "pod_uid: must not be empty"),
        (
            lambda c: c.admit(pod("x" * 2000, container("a"))),
            "pod.uid: longer than 1024 characters",
        ),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(
    numamem_server: InProcessServer, request_fn: object, fragment: str
) -> None:
    code, details = code_and_details(lambda: request_fn(numamem_server.client))  # type: ignore[operator]
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert fragment in details
    assert numamem_server.client.get_state().entries == {}  # nothing reached the core


def test_burstable_pod_with_unequal_hugepages_is_not_the_memory_managers_business(
    numamem_server: InProcessServer,
) -> None:
    """kubelet's Static policy returns at once for a non-Guaranteed pod (upstream static_allocate/01,
    static_hints/01): no hints, nothing pinned, no error, whatever its hugepages say."""
    client = numamem_server.client
    burstable = pod(
        "b",
        mm.Container(
            name="a",
            requests={"cpu": "1", "memory": "1Gi", "hugepages-1Gi": "1Gi"},
            limits={"cpu": "1", "memory": "2Gi", "hugepages-1Gi": "2Gi"},
        ),
    )
    before = client.get_state()
    assert list(client.get_topology_hints(burstable, "a").hints) == []
    assert list(client.get_pod_topology_hints(burstable).hints) == []
    assert list(client.allocate(burstable, "a").blocks) == []
    resp = client.admit(burstable)
    assert resp.admitted
    assert [list(c.blocks) for c in resp.containers] == [[]]
    assert client.get_state() == before
    # A malformed quantity is still refused: the kubelet never receives one.
    bad = pod("b", mm.Container(name="a", requests={"hugepages-1Gi": "1Gx"}))
    code, details = code_and_details(lambda: client.allocate(bad, "a"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'1Gx' is not a valid quantity" in details


def test_limits_are_resource_exhausted() -> None:
    with serve_in_process(limits=replace(Limits(), max_pods=2, max_containers_per_pod=3)) as server:
        client = server.client
        assert client.admit(pod("p1", container("a", "256Mi"))).admitted
        assert client.admit(pod("p2", container("a", "256Mi"))).admitted
        code, details = code_and_details(lambda: client.admit(pod("p3", container("a", "256Mi"))))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-pods 2" in details
        assert client.admit(pod("p2", container("a", "256Mi"))).admitted  # an existing pod is fine
        many = pod("p1", *(container(f"c{i}", "1Mi") for i in range(4)))
        code, details = code_and_details(lambda: client.admit(many))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "4 containers exceed the limit of 3 per pod" in details


def test_max_pods_is_not_overshot_by_concurrent_admissions() -> None:
    """16 clients admit distinct pods at once against --max-pods 3 over gRPC (8 workers)."""
    with serve_in_process(limits=replace(Limits(), max_pods=3), workers=8) as server:
        codes: list[str] = []
        lock = threading.Lock()
        barrier = threading.Barrier(16)

        def admit(i: int) -> None:
            with NumamemClient(server.socket) as c:
                barrier.wait()
                try:
                    result = (
                        "admitted"
                        if c.admit(pod(f"p{i}", container("a", "256Mi"))).admitted
                        else "rejected"
                    )
                except grpc.RpcError as err:
                    result = err.code().name
                with lock:
                    codes.append(result)

        threads = [threading.Thread(target=admit, args=(i,)) for i in range(16)]
        run_together(threads, 30)
        assert sorted(codes) == ["RESOURCE_EXHAUSTED"] * 13 + ["admitted"] * 3
        assert len(server.client.get_state().entries) == 3


# Node 0 has 10Gi allocatable memory, node 1 11Gi (16Gi - 5Gi hugepages - 1Gi reserved on node 0).
TWO_NODE_POD = pod("wide", container("a", "14Gi"))
ONE_NODE_POD = pod("narrow", container("a", "2Gi"), container("b", "2Gi"))


@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize(
    ("policy", "wide_admitted", "wide_reason"),
    [
        ("none", True, ""),
        ("best-effort", True, ""),
        ("restricted", True, ""),
        ("single-numa-node", False, "TopologyAffinityError"),
    ],
)
def test_admit_under_each_policy_and_scope(
    policy: str, scope: str, wide_admitted: bool, wide_reason: str
) -> None:
    with serve_in_process(topology_manager_policy=policy, topology_manager_scope=scope) as server:
        state = server.client.get_state()  # what an agent acting as the kubelet reads first
        assert (state.topology_manager_policy, state.topology_manager_scope) == (policy, scope)
        narrow = server.client.admit(ONE_NODE_POD)
        assert narrow.admitted
        nodes = {tuple(b.numa_affinity) for c in narrow.containers for b in c.blocks}
        assert nodes == {(0,)}  # both containers on one node, the narrowest
    with serve_in_process(topology_manager_policy=policy, topology_manager_scope=scope) as server:
        wide = server.client.admit(TWO_NODE_POD)
        assert (wide.admitted, wide.reason) == (wide_admitted, wide_reason)
        if wide_admitted:
            assert [list(b.numa_affinity) for b in wide.containers[0].blocks] == [[0, 1]]
            if policy != "none":
                assert list(wide.containers[0].affinity.numa_nodes) == [0, 1]
        else:
            assert wide.message == "Resources cannot be allocated with Topology locality"
            assert "wide" not in server.client.get_state().entries  # no partial allocation


def test_rejected_admission_leaves_no_partial_allocation() -> None:
    with serve_in_process(topology_manager_policy="best-effort") as server:
        client = server.client
        # The first container fits; the second fits nowhere: Allocate fails for it.
        resp = client.admit(pod("p", container("a", "2Gi"), container("b", "40Gi")))
        assert not resp.admitted
        assert resp.reason == "UnexpectedAdmissionError"
        assert resp.message.startswith("Allocate failed due to [memorymanager] ")
        assert resp.message.endswith(", which is unexpected")
        state = client.get_state()
        assert dict(state.entries) == {}
        assert all(n.number_of_assignments == 0 for n in state.machine_state.values())


def test_client_library_against_the_fixture(numamem_server: InProcessServer) -> None:
    """``numamem.testing`` gives a ready client; a second client works on the same socket."""
    with NumamemClient(numamem_server.socket) as other:
        assert other.check_health("numamem.v1.MemoryManager") == 1  # SERVING
        assert len(other.get_machine_info().numa_nodes) == 2


def test_in_process_server_on_a_custom_machine() -> None:
    with serve_in_process(standard_nodes(4, memory_gib=16)) as server:
        assert len(server.client.get_machine_info().numa_nodes) == 4
        resp = server.client.admit(pod("p", container("a", "12Gi")))
        assert resp.admitted
        assert list(resp.containers[0].blocks[0].numa_affinity) == [0, 1]


def _masks(expl: mm.ContainerExplanation) -> dict[tuple[int, ...], tuple[bool, bool, str]]:
    return {tuple(m.numa_nodes): (m.offered, m.preferred, m.reason) for m in expl.masks}


def test_explain_says_why_each_mask_is_refused_and_changes_nothing() -> None:
    with serve_in_process(topology_manager_policy="single-numa-node") as server:
        client = server.client
        before = client.get_state()
        resp = client.explain(TWO_NODE_POD)
        assert (resp.topology_manager_policy, resp.topology_manager_scope) == (
            "single-numa-node",
            "container",
        )
        assert not resp.decision.admitted
        assert resp.decision.reason == "TopologyAffinityError"
        [ctr] = resp.containers
        assert ctr.container_name == "a"
        assert not ctr.admitted
        assert dict(ctr.requested) == {"memory": 14 * GI}
        assert _masks(ctr) == {
            (0,): (False, False, "memory: 10Gi allocatable < 14Gi requested"),
            (1,): (False, False, "memory: 11Gi allocatable < 14Gi requested"),
            (0, 1): (True, True, ""),
        }
        assert [list(h.numa_nodes) for h in ctr.hints["memory"].hints] == [[0, 1]]
        assert client.get_state() == before
        # Admit agrees with the explanation.
        admitted = client.admit(TWO_NODE_POD)
        assert (admitted.admitted, admitted.reason) == (False, "TopologyAffinityError")


def test_explain_names_free_memory_and_multi_numa_groups() -> None:
    with serve_in_process(topology_manager_policy="best-effort") as server:
        client = server.client
        assert client.admit(pod("first", container("a", "9Gi"))).admitted  # node 0: 1Gi left
        resp = client.explain(pod("second", container("a", "2Gi")))
        assert resp.decision.admitted
        assert [list(b.numa_affinity) for b in resp.decision.containers[0].blocks] == [[1]]
        masks = _masks(resp.containers[0])
        assert masks[(0,)] == (False, False, "memory: 1Gi free < 2Gi requested")
        assert masks[(1,)] == (True, True, "")
        assert masks[(0, 1)] == (False, False, "node 0 already holds single-NUMA allocations")
        assert "second" not in client.get_state().entries

    with serve_in_process(topology_manager_policy="best-effort") as server:
        client = server.client
        assert client.admit(TWO_NODE_POD).admitted  # a group {0,1}
        masks = _masks(client.explain(pod("next", container("a", "2Gi"))).containers[0])
        assert masks == {
            (0,): (False, False, "node 0 belongs to the multi-NUMA group [0, 1]"),
            (1,): (False, False, "node 1 belongs to the multi-NUMA group [0, 1]"),
            (0, 1): (True, False, ""),  # the group can grow; not preferred (one node would do)
        }


def test_explain_pod_scope_and_notes() -> None:
    with serve_in_process(
        topology_manager_policy="restricted", topology_manager_scope="pod"
    ) as server:
        client = server.client
        resp = client.explain(ONE_NODE_POD)
        [step] = resp.containers
        assert step.container_name == ""
        assert dict(step.requested) == {"memory": 4 * GI}
        assert step.admitted and resp.decision.admitted
        burstable = pod("b", container("a", "1Gi", guaranteed=False))
        [step] = client.explain(burstable).containers
        assert step.note == "the pod's QoS class is Burstable; only Guaranteed pods get NUMA hints"
        assert not step.masks and not step.hints
        assert client.admit(ONE_NODE_POD).admitted
        [step] = client.explain(ONE_NODE_POD).containers
        # Upstream regenerates pod-scope hints by comparing the pod's request (4Gi) with the
        # first container's blocks (2Gi): a mismatch, so no preference. Explain says so.
        assert step.note.startswith(
            "container 'a' already holds memory 2Gi, which does not match the request; no preference"
        )
    with serve_in_process(topology_manager_policy="restricted") as server:
        assert server.client.admit(ONE_NODE_POD).admitted
        steps = server.client.explain(ONE_NODE_POD).containers
        assert [s.note for s in steps] == [
            "container 'a' is already allocated; the hints repeat its affinity",
            "container 'b' is already allocated; the hints repeat its affinity",
        ]
        assert [list(s.hints["memory"].hints[0].numa_nodes) for s in steps] == [[0], [0]]
    with serve_in_process(topology_manager_policy="none") as server:
        resp = server.client.explain(ONE_NODE_POD)
        assert resp.decision.admitted
        # The none policy asks for no hints; Allocate picks the policy's best hint itself.
        assert [(c.container_name, c.admitted, len(c.hints)) for c in resp.containers] == [
            ("a", True, 0),
            ("b", True, 0),
        ]
        # The second step sees the first container's allocation on node 0.
        assert _masks(resp.containers[1])[(0, 1)] == (
            False,
            False,
            "node 0 already holds single-NUMA allocations",
        )
        assert _masks(resp.containers[1])[(0,)] == (True, True, "")


def test_explain_stops_where_admission_stops() -> None:
    with serve_in_process(topology_manager_policy="best-effort") as server:
        resp = server.client.explain(pod("p", container("a", "2Gi"), container("b", "40Gi")))
        assert resp.decision.reason == "UnexpectedAdmissionError"
        assert [(c.container_name, c.admitted) for c in resp.containers] == [
            ("a", True),
            ("b", False),
        ]
        assert all(not m.offered for m in resp.containers[1].masks)
        assert dict(server.client.get_state().entries) == {}


def test_explain_on_a_16_node_machine_lists_the_first_masks_and_counts_the_rest() -> None:
    """65,535 masks per step would not fit a gRPC message: the smallest 256 are listed."""
    with serve_in_process(standard_nodes(16, hugepages={})) as server:
        server.client.timeout = 60
        resp = server.client.explain(pod("big", container("a", "1Gi")))
        [step] = resp.containers
        assert len(step.masks) == 256
        assert step.omitted_masks == 65535 - 256
        assert [list(m.numa_nodes) for m in step.masks[:2]] == [[0], [1]]
        assert step.masks[255].numa_nodes and len(step.masks[255].numa_nodes) == 3
        assert resp.ByteSize() < 100_000


def test_errors_carry_a_stable_machine_readable_reason(numamem_server: InProcessServer) -> None:
    """Clients branch on ErrorInfo.reason (domain numamem.v1), not on message texts."""
    client = numamem_server.client

    def reason_of(call: object) -> str | None:
        with pytest.raises(grpc.RpcError) as info:
            call()  # type: ignore[operator]
        return error_reason(info.value)

    assert reason_of(lambda: client.allocate(pod("p", container("a", "1Gb")), "a")) == (
        "INVALID_ARGUMENT"
    )
    assert reason_of(lambda: client.allocate(pod("p", container("a", "64Gi")), "a")) == (
        "ALLOCATION_FAILED"
    )
    assert reason_of(lambda: client.get_container_info("nope", "c")) == "NOT_FOUND"
    assert reason_of(lambda: client.get_pool_size("nope")) == "NOT_FOUND"
    assert set(REASONS) >= {"INVALID_ARGUMENT", "ALLOCATION_FAILED", "NOT_FOUND", "OVERLOADED"}
