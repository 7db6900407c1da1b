"""Pod-level resources (KEP-5526) in the memory manager core, transcribed from the spec.

Tables of the memory-manager spec's rules (section 5 and the [OPT-POD] items of section
4): ``validatePodScopeResources`` and its two texts, the partition of ``AllocatePod``
(regular init containers with and without requests of their own, sidecars with and
without, app containers exclusive and shared, hugepages), the pod-level QoS rule and
defaulting, then the manager: admission in both scopes, hints from the pod-level blocks
(#141070), idempotent AllocatePod (#141077), release at the last container, restore
(pod-level blocks replayed; an orphan pod entry refused, #141993/#141994) and the
gates-off skip. The daemon runs the same tables in ``test_pod_level_service.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from numamem.config.model import FeatureGates
from numamem.errors import EmptyPodSharedPoolError, FailedPreconditionError, StateMismatchError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.hints import POD_LEVEL_SKIPPED
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.requests.resources import (
    container_requested_resources,
    pod_requested_resources,
)
from numamem.memorymanager.state import drift
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.store import InMemoryStore
from numamem.memtypes import Block, Snapshot
from numamem.pod import (
    BURSTABLE,
    GUARANTEED,
    Container,
    Pod,
    compute_pod_qos,
    is_container_equivalent_guaranteed,
    with_defaulted_pod_resources,
)
from numamem.quantity import Format, Quantity, parse_quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager.policy import TopologyHint, new_policy
from tests.tables import named_rows

GI = 1024**3
MI = 1024**2
HP = "hugepages-1Gi"
ON = FeatureGates(True, True)


def q(n: int) -> Quantity:
    return Quantity.from_int(n, Format.BINARY_SI)


def own(name: str, memory: int, hugepages: int | None = None, sidecar: bool = False) -> Container:
    """An equivalent-Guaranteed container: memory of its own from the pod's budget."""
    res = {"cpu": Quantity.from_int(1), "memory": q(memory)}
    if hugepages is not None:
        res[HP] = q(hugepages)
    return Container(name, res, dict(res), "Always" if sidecar else "")


def shared(name: str, sidecar: bool = False, memory: int = 0) -> Container:
    """A container without requests == limits of its own: it shares the pod's pool."""
    requests = {"memory": q(memory)} if memory else {}
    return Container(name, requests, {}, "Always" if sidecar else "")


def pod_level(
    inits: tuple[Container, ...],
    apps: tuple[Container, ...],
    memory: int,
    hugepages: int = 0,
    uid: str = "p",
) -> Pod:
    res = {"cpu": Quantity.from_int(8), "memory": q(memory)}
    if hugepages:
        res[HP] = q(hugepages)
    return Pod(uid, "ns", uid, inits, apps, "", res, dict(res))


def exclusive_of(pod: Pod) -> podlevel.ExclusiveOf:
    return lambda c: container_requested_resources(c, pod, pod_level=True)


# --- validatePodScopeResources ---------------------------------------------------------------

SHARED_INIT = "pod rejected, pod has shared init containers but no {} available for them"
EQUALS_BUDGET = (
    "pod rejected, sum of exclusive container {} requests equals pod budget, leaving no memory "
    "for shared containers"
)

VALIDATION = [
    # (case, init containers, app containers, budget memory, budget hugepages, expected)
    ("a shared app and room left", (), (own("a", 2 * GI), shared("b")), 4 * GI, 0, None),
    (
        "exclusive apps take the whole budget, an app shares",
        (),
        (own("a", 2 * GI), own("b", 2 * GI), shared("c")),
        4 * GI,
        0,
        EQUALS_BUDGET.format("memory"),
    ),
    (
        "no container shares: the budget may be taken whole",
        (),
        (own("a", 2 * GI), own("b", 2 * GI)),
        4 * GI,
        0,
        None,
    ),
    (
        "a shared sidecar and an exclusive app taking the budget",
        (shared("mesh", sidecar=True),),
        (own("a", 4 * GI),),
        4 * GI,
        0,
        EQUALS_BUDGET.format("memory"),
    ),
    (
        "a regular init container without a request after a sidecar taking the budget",
        (own("log", 4 * GI, sidecar=True), shared("setup")),
        (own("a", 0 * GI + 1),),
        4 * GI,
        0,
        SHARED_INIT.format("memory"),
    ),
    (
        "the same with apps that share (a pod the API server lets through)",
        (own("log", 4 * GI, sidecar=True), shared("setup")),
        (shared("a"),),
        4 * GI,
        0,
        SHARED_INIT.format("memory"),
    ),
    (
        "the same init container before that sidecar",
        (shared("setup"), own("log", 4 * GI, sidecar=True)),
        (own("a", 1 * MI),),
        4 * GI,
        0,
        None,
    ),
    (
        "a regular init container with its own request does not share",
        (own("log", 4 * GI, sidecar=True), own("setup", GI)),
        (own("a", MI),),
        4 * GI,
        0,
        None,
    ),
    (
        "a request that is not requests == limits shares",
        (),
        (own("a", 4 * GI), shared("b", memory=GI)),
        4 * GI,
        0,
        EQUALS_BUDGET.format("memory"),
    ),
    (
        "hugepages: the exclusive hugepages take the budget's",
        (),
        (own("a", GI, hugepages=2 * GI), shared("b")),
        4 * GI,
        2 * GI,
        EQUALS_BUDGET.format(HP),
    ),
    (
        "both types fail: memory is named (Go names a random one)",
        (),
        (own("a", 4 * GI, hugepages=2 * GI), shared("b")),
        4 * GI,
        2 * GI,
        EQUALS_BUDGET.format("memory"),
    ),
]


@pytest.mark.parametrize(
    ("inits", "apps", "memory", "hugepages", "expected"),
    named_rows(VALIDATION),
)
def test_validate_pod_scope_resources(
    inits: tuple[Container, ...],
    apps: tuple[Container, ...],
    memory: int,
    hugepages: int,
    expected: str | None,
) -> None:
    pod = pod_level(inits, apps, memory, hugepages)
    budget = pod_requested_resources(pod, pod_level=True)
    assert podlevel.validate_pod_scope_resources(pod, budget, exclusive_of(pod)) == expected
    if expected is None:
        podlevel.check_pod_scope_resources(pod, budget, exclusive_of(pod))
    else:
        with pytest.raises(EmptyPodSharedPoolError, match=expected) as info:
            podlevel.check_pod_scope_resources(pod, budget, exclusive_of(pod))
        assert info.value.admission_reason == "EmptyPodSharedPoolError"


# --- the partition ----------------------------------------------------------------------------


@dataclass
class PartitionCase:
    name: str
    inits: tuple[Container, ...]
    apps: tuple[Container, ...]
    memory: int
    expected: dict[str, dict[str, int]]
    """container -> type -> size of its blocks."""
    pool: dict[str, int]
    hugepages: int = 0
    exclusive: tuple[str, ...] = ()


PARTITIONS = [
    PartitionCase(
        "an exclusive app, a shared app: the pool is the budget minus the exclusive",
        (),
        (own("a", 2 * GI), shared("b")),
        8 * GI,
        {"a": {"memory": 2 * GI}, "b": {"memory": 6 * GI}},
        {"memory": 6 * GI},
        exclusive=("a",),
    ),
    PartitionCase(
        "a regular init container without a request gets the whole budget",
        (shared("setup"),),
        (own("a", 2 * GI), shared("b")),
        8 * GI,
        {"setup": {"memory": 8 * GI}, "a": {"memory": 2 * GI}, "b": {"memory": 6 * GI}},
        {"memory": 6 * GI},
        exclusive=("a",),
    ),
    PartitionCase(
        "after an exclusive sidecar, the budget minus the sidecar's",
        (own("log", GI, sidecar=True), shared("setup")),
        (own("a", 2 * GI), shared("b")),
        8 * GI,
        {
            "log": {"memory": GI},
            "setup": {"memory": 7 * GI},
            "a": {"memory": 2 * GI},
            "b": {"memory": 5 * GI},
        },
        {"memory": 5 * GI},
        exclusive=("log", "a"),
    ),
    PartitionCase(
        "before the sidecar, the whole budget",
        (shared("setup"), own("log", GI, sidecar=True)),
        (shared("b"),),
        8 * GI,
        {"setup": {"memory": 8 * GI}, "log": {"memory": GI}, "b": {"memory": 7 * GI}},
        {"memory": 7 * GI},
        exclusive=("log",),
    ),
    PartitionCase(
        "a regular init container with a request: its own, not taken from the pool",
        (own("setup", 3 * GI),),
        (shared("b"),),
        8 * GI,
        {"setup": {"memory": 3 * GI}, "b": {"memory": 8 * GI}},
        {"memory": 8 * GI},
        exclusive=("setup",),
    ),
    PartitionCase(
        "a sidecar without a request shares the app pool",
        (shared("mesh", sidecar=True),),
        (own("a", GI),),
        4 * GI,
        {"mesh": {"memory": 3 * GI}, "a": {"memory": GI}},
        {"memory": 3 * GI},
        exclusive=("a",),
    ),
    PartitionCase(
        "every container exclusive: nothing is shared, the budget may be used up",
        (),
        (own("a", 2 * GI), own("b", 2 * GI)),
        4 * GI,
        {"a": {"memory": 2 * GI}, "b": {"memory": 2 * GI}},
        {},
        exclusive=("a", "b"),
    ),
    PartitionCase(
        "hugepages are divided on their own",
        (),
        (own("a", GI, hugepages=GI), shared("b")),
        4 * GI,
        {"a": {"memory": GI, HP: GI}, "b": {"memory": 3 * GI, HP: GI}},
        {"memory": 3 * GI, HP: GI},
        hugepages=2 * GI,
        exclusive=("a",),
    ),
    PartitionCase(
        "a zero request makes no block",
        (),
        (own("a", GI, hugepages=0), own("b", GI, hugepages=2 * GI), shared("c")),
        4 * GI,
        {"a": {"memory": GI}, "b": {"memory": GI, HP: 2 * GI}, "c": {"memory": 2 * GI, HP: GI}},
        {"memory": 2 * GI, HP: GI},
        hugepages=3 * GI,
        exclusive=("a", "b"),
    ),
    PartitionCase(
        "the example pod (examples/pod-level.yaml)",
        (own("log-agent", 512 * MI, sidecar=True), shared("setup"), shared("mesh", sidecar=True)),
        (own("db", 4 * GI), shared("exporter")),
        8 * GI,
        {
            "log-agent": {"memory": 512 * MI},
            "setup": {"memory": 7 * GI + 512 * MI},
            "mesh": {"memory": 3 * GI + 512 * MI},
            "db": {"memory": 4 * GI},
            "exporter": {"memory": 3 * GI + 512 * MI},
        },
        {"memory": 3 * GI + 512 * MI},
        exclusive=("log-agent", "db"),
    ),
]


def sizes(blocks: list[Block]) -> dict[str, int]:
    return {b.type: b.size for b in blocks}


@pytest.mark.parametrize("case", PARTITIONS, ids=[c.name for c in PARTITIONS])
def test_partition(case: PartitionCase) -> None:
    pod = pod_level(case.inits, case.apps, case.memory, case.hugepages)
    budget = pod_requested_resources(pod, pod_level=True)
    plan = podlevel.partition(pod, budget, [1], exclusive_of(pod))
    assert {name: sizes(blocks) for name, blocks in plan.containers.items()} == case.expected
    assert list(plan.containers) == [c.name for c in pod.all_containers()]  # spec order
    assert sizes(plan.pod_blocks) == budget
    assert plan.pool == case.pool
    assert plan.exclusive == case.exclusive
    for blocks in (plan.pod_blocks, *plan.containers.values()):
        assert all(b.numa_affinity == (1,) for b in blocks)
        assert [b.type for b in blocks] == sorted(
            (b.type for b in blocks), key=lambda t: t != "memory"
        )
    summary = podlevel.plan(pod, budget, exclusive_of(pod))
    assert list(summary.exclusive) == list(case.exclusive)
    assert summary.pool == {t: case.pool.get(t, 0) for t in budget}


# --- requests, QoS and defaulting -----------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "equivalent"),
    [
        (own("a", GI), True),
        (Container("a", {"cpu": q(1), "memory": q(GI)}, {"cpu": q(2), "memory": q(GI)}), False),
        (Container("a", {"memory": q(GI)}, {"memory": q(GI)}), False),  # no cpu
        (Container("a", {"cpu": q(0), "memory": q(GI)}, {"cpu": q(0), "memory": q(GI)}), False),
        (shared("a"), False),
    ],
    ids=["requests == limits", "cpu limit above", "no cpu", "zero cpu", "no resources"],
)
def test_equivalent_guaranteed(container: Container, equivalent: bool) -> None:
    assert is_container_equivalent_guaranteed(container) is equivalent
    pod = pod_level((), (container,), 4 * GI)
    expected = {"memory": GI} if equivalent else {}
    assert container_requested_resources(container, pod, pod_level=True) == expected
    # Without the gate (or without pod-level resources) a container asks for its requests.
    plain = {k: int(v.value) for k, v in container.requests.items() if k == "memory"}
    assert container_requested_resources(container, pod, pod_level=False) == plain


def test_pod_request_is_the_budget_with_the_gate_and_the_containers_without() -> None:
    pod = pod_level((own("setup", 6 * GI),), (own("a", GI),), 4 * GI, hugepages=GI)
    assert pod_requested_resources(pod, pod_level=True) == {"memory": 4 * GI, HP: GI}
    assert pod_requested_resources(pod, pod_level=False) == {"memory": 6 * GI}
    zero = Pod("p", containers=(own("a", GI),), requests={"memory": q(0)}, limits={"cpu": q(1)})
    assert pod_requested_resources(zero, pod_level=True) == {}  # values <= 0 are skipped


def test_init_only_hugepages_are_dropped_as_the_released_code_does() -> None:
    """kubernetes#140814 (open): the pod-scope request of a container-level pod drops a type
    only init containers request; released code does, and so does numamem. A pod-level pod
    has no such gap: its budget names every type."""
    init = own("setup", GI, hugepages=2 * GI)
    pod = Pod("p", init_containers=(init,), containers=(own("a", GI),))
    assert pod_requested_resources(pod) == {"memory": GI}


QOS = [
    (
        "pod-level requests == limits decide, whatever the containers",
        {"cpu": "2", "memory": "4Gi"},
        {"cpu": "2", "memory": "4Gi"},
        GUARANTEED,
    ),
    ("a pod-level limit without cpu", {"memory": "4Gi"}, {"memory": "4Gi"}, BURSTABLE),
    ("pod-level requests only", {"cpu": "2", "memory": "4Gi"}, {}, BURSTABLE),
    (
        "requests below limits",
        {"cpu": "2", "memory": "2Gi"},
        {"cpu": "2", "memory": "4Gi"},
        BURSTABLE,
    ),
    (
        "hugepages do not count",
        {"cpu": "2", "memory": "4Gi", HP: "1Gi"},
        {"cpu": "2", "memory": "4Gi", HP: "1Gi"},
        GUARANTEED,
    ),
]


@pytest.mark.parametrize(("requests", "limits", "qos"), named_rows(QOS))
def test_pod_level_qos(requests: dict[str, str], limits: dict[str, str], qos: str) -> None:
    burstable = Container("c", {"memory": q(GI)}, {})
    pod = Pod(
        "p",
        containers=(burstable,),
        requests={k: parse_quantity(v) for k, v in requests.items()},
        limits={k: parse_quantity(v) for k, v in limits.items()},
    )
    assert compute_pod_qos(pod) == qos
    assert compute_pod_qos(pod, pod_level=False) == BURSTABLE  # the gate off: the containers'


DEFAULTING = [
    (
        "pod-level limits without requests: the requests are the limits",
        {},
        {"cpu": "4", "memory": "8Gi"},
        (shared("a"),),
        {"cpu": "4", "memory": "8Gi"},
        {"cpu": "4", "memory": "8Gi"},
    ),
    (
        "cpu and memory requests default to the containers' aggregate when they request any",
        {},
        {"cpu": "4", "memory": "8Gi"},
        (own("a", GI), own("b", 2 * GI)),
        {"cpu": "2", "memory": "3Gi"},
        {"cpu": "4", "memory": "8Gi"},
    ),
    (
        "a container hugepage limit the pod does not set becomes the pod's",
        {"cpu": "4", "memory": "8Gi"},
        {"cpu": "4", "memory": "8Gi"},
        (own("a", GI, hugepages=2 * GI),),
        {"cpu": "4", "memory": "8Gi", HP: "2Gi"},
        {"cpu": "4", "memory": "8Gi", HP: "2Gi"},
    ),
    (
        "requests only: nothing to default from (defaultPodLimits is not applied)",
        {"cpu": "4", "memory": "8Gi"},
        {},
        (own("a", GI),),
        {"cpu": "4", "memory": "8Gi"},
        {},
    ),
]


@pytest.mark.parametrize(
    ("requests", "limits", "apps", "want_requests", "want_limits"),
    named_rows(DEFAULTING),
)
def test_pod_level_defaulting(
    requests: dict[str, str],
    limits: dict[str, str],
    apps: tuple[Container, ...],
    want_requests: dict[str, str],
    want_limits: dict[str, str],
) -> None:
    pod = Pod(
        "p",
        containers=apps,
        requests={k: parse_quantity(v) for k, v in requests.items()},
        limits={k: parse_quantity(v) for k, v in limits.items()},
    )
    done = with_defaulted_pod_resources(pod)
    assert {k: v.value for k, v in done.requests.items()} == {
        k: parse_quantity(v).value for k, v in want_requests.items()
    }
    assert {k: v.value for k, v in done.limits.items()} == {
        k: parse_quantity(v).value for k, v in want_limits.items()
    }


# --- the manager ----------------------------------------------------------------------------


def machine(memory: int = 16 * GI, pages: int = 4, nodes: int = 2) -> Machine:
    return Machine(
        tuple(NUMANode(i, memory, (HugePagePool(1048576, pages, pages),)) for i in range(nodes))
    )


def build(
    store: InMemoryStore | None = None,
    scope: str = "pod",
    topology: str = "best-effort",
    gates: FeatureGates = ON,
    m: Machine | None = None,
    options: StaticOptions | None = None,
) -> Manager:
    m = m or machine()
    mgr = Manager(
        StaticPolicy(m, {0: {"memory": GI}}, options=options, gates=gates),
        store or InMemoryStore(),
        new_policy(topology, m)[0],
        scope,
    )
    mgr.start()
    return mgr


def consistent(mgr: Manager) -> None:
    view = mgr.reader()
    assert not violations(
        view.get_machine_state(), view.get_memory_assignments(), view.get_pod_memory_assignments()
    )


@pytest.mark.parametrize("case", PARTITIONS, ids=[c.name for c in PARTITIONS])
def test_admission_in_the_pod_scope_is_one_allocation_partitioned(case: PartitionCase) -> None:
    mgr = build()
    pod = pod_level(case.inits, case.apps, case.memory, case.hugepages)
    outcome = mgr.admit(pod)
    assert outcome.result.admitted, outcome.result
    assert {n: sizes(b) for n, b in outcome.blocks.items()} == case.expected
    budget = pod_requested_resources(pod, pod_level=True)
    assert outcome.pod_blocks is not None and sizes(outcome.pod_blocks) == budget
    [node] = {n for b in outcome.pod_blocks for n in b.numa_affinity or ()}
    ms = mgr.reader().get_machine_state()
    table = ms[node].memory_map  # type: ignore[union-attr]
    assert table is not None
    assert {t: table[t].reserved for t in budget} == budget  # the budget, reserved once
    assert ms[node].number_of_assignments == len(budget)  # type: ignore[union-attr]
    consistent(mgr)
    # Every container is pinned to the pod's node; isolation follows the exclusive ones.
    for ctr in pod.all_containers():
        level = mgr.isolation_level(pod.uid, ctr.name)
        if not case.expected[ctr.name]:
            assert level == podlevel.HOST
        else:
            assert level == (podlevel.CONTAINER if ctr.name in case.exclusive else podlevel.POD)
        assert mgr.get_memory_numa_nodes(pod.uid, ctr.name) in (None, [node])


def example_pod(uid: str = "p") -> Pod:
    case = PARTITIONS[-1]
    return pod_level(case.inits, case.apps, case.memory, uid=uid)


def test_hints_allocate_pod_and_restart_are_kubelets() -> None:
    store = InMemoryStore()
    mgr = build(store)
    pod = example_pod()
    assert mgr.admit(pod).result.admitted
    # kubernetes#141070: the pod's hints repeat its pod-level blocks (not one container's).
    hints = mgr.get_pod_topology_hints(pod)
    assert hints == {"memory": [TopologyHint(0b01, True)]}
    before = mgr.reader()
    # kubernetes#141077: a second AllocatePod (re-admission after a restart) changes nothing.
    restarted = build(store)
    assert restarted.reader().get_pod_memory_assignments() == before.get_pod_memory_assignments()
    assert restarted.admit(pod).result.admitted
    assert restarted.reader().same_as(restarted.committed().view)
    assert restarted.reader().get_machine_state() == before.get_machine_state()
    assert restarted.reader().get_memory_assignments() == before.get_memory_assignments()
    assert restarted.allocate_pod(pod)[0] == before.get_pod_memory_blocks(pod.uid)
    assert restarted.reader().exclusive_containers(pod.uid) == {"log-agent", "db"}


def test_release_only_at_the_last_container_and_init_containers_free_no_memory() -> None:
    mgr = build()
    pod = example_pod()
    assert mgr.admit(pod).result.admitted
    reserved = mgr.reader().get_machine_state()[0].memory_map["memory"].reserved  # type: ignore[union-attr,index]
    for name in ("log-agent", "setup", "mesh", "db"):
        mgr.add_container(pod, name, f"id-{name}")
    # AddContainer of the app freed the regular init container's entry, not its memory.
    assert mgr.reader().get_memory_blocks(pod.uid, "setup") is None
    for name in ("log-agent", "mesh", "db"):
        assert mgr.remove_container(f"id-{name}") is not None
        state = mgr.reader()
        assert state.get_pod_memory_blocks(pod.uid) is not None
        assert state.get_machine_state()[0].memory_map["memory"].reserved == reserved  # type: ignore[union-attr,index]
        consistent(mgr)
    assert mgr.release_pod(pod.uid) == [(pod.uid, "exporter")]
    state = mgr.reader()
    assert state.get_pod_memory_blocks(pod.uid) is None
    assert state.get_machine_state()[0].memory_map["memory"].reserved == 0  # type: ignore[union-attr,index]
    assert state.get_machine_state()[0].number_of_assignments == 0  # type: ignore[union-attr]
    consistent(mgr)


@pytest.mark.parametrize(
    ("scope", "topology"), [("container", "best-effort"), ("pod", "none"), ("container", "none")]
)
def test_container_scope_pins_only_the_equivalent_guaranteed_containers(
    scope: str, topology: str
) -> None:
    """The container scope, and the policy none in either scope (the kubelet's none scope
    allocates container by container)."""
    mgr = build(scope=scope, topology=topology)
    pod = example_pod()
    outcome = mgr.admit(pod)
    assert outcome.result.admitted
    assert outcome.pod_blocks is None
    assert {n: sizes(b) for n, b in outcome.blocks.items()} == {
        "log-agent": {"memory": 512 * MI},
        "setup": {},
        "mesh": {},
        "db": {"memory": 4 * GI},
        "exporter": {},
    }
    assert mgr.get_topology_hints(pod, "exporter") is None
    assert [mgr.isolation_level(pod.uid, c) for c in ("db", "exporter")] == ["container", "host"]
    consistent(mgr)


@pytest.mark.parametrize("scope", ["pod", "container"])
@pytest.mark.parametrize("gates", [FeatureGates(), FeatureGates(True, False)], ids=["off", "PLR"])
def test_with_a_gate_off_a_pod_level_pod_is_skipped(scope: str, gates: FeatureGates) -> None:
    mgr = build(scope=scope, gates=gates)
    pod = example_pod()
    assert mgr.get_pod_topology_hints(pod) is None
    assert all(mgr.get_topology_hints(pod, c.name) is None for c in pod.all_containers())
    outcome = mgr.admit(pod)
    assert outcome.result.admitted and outcome.pod_blocks is None
    assert all(blocks == [] for blocks in outcome.blocks.values())
    assert mgr.reader().pod_count() == 0
    assert mgr.explain(pod).containers[0].explanation.note == POD_LEVEL_SKIPPED
    with pytest.raises(FailedPreconditionError, match="PodLevelResourceManagers=true"):
        mgr.allocate_pod(pod)


POD_SCOPE_REFUSAL = (
    "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
)
"""The kubelet's pod scope refusing a pod allocated as a whole (scope_pod.go,
``admitUsingPodResources``: ``NewPodLevelTopologyAffinityError``, v1.36)."""
LOCALITY = "Resources cannot be allocated with Topology locality"

TOPOLOGY_REFUSALS = [
    # (case, scope, topology policy, gates, pod, expected (reason, message))
    (
        "pod scope, a pod-level pod whose shared pool is empty",
        "pod",
        "restricted",
        ON,
        pod_level((), (own("a", 4 * GI), shared("b")), 4 * GI),
        ("TopologyAffinityError", POD_SCOPE_REFUSAL),
    ),
    (
        "pod scope, a pod-level pod larger than one node",
        "pod",
        "single-numa-node",
        ON,
        pod_level((), (own("a", 2 * GI), shared("b")), 20 * GI),
        ("TopologyAffinityError", POD_SCOPE_REFUSAL),
    ),
    (
        "pod scope, a pod without pod-level resources larger than one node",
        "pod",
        "single-numa-node",
        ON,
        Pod("p", "ns", "p", (), (own("a", 20 * GI),)),
        ("TopologyAffinityError", LOCALITY),
    ),
    (
        "container scope, a pod-level pod's exclusive container larger than one node",
        "container",
        "single-numa-node",
        ON,
        pod_level((), (own("a", 20 * GI), shared("b")), 24 * GI),
        ("TopologyAffinityError", LOCALITY),
    ),
    (
        "pod scope with PodLevelResourceManagers off: a pod-level pod is skipped, not refused",
        "pod",
        "single-numa-node",
        FeatureGates(True, False),
        pod_level((), (own("a", 2 * GI), shared("b")), 20 * GI),
        None,
    ),
]


@pytest.mark.parametrize(
    ("scope", "topology", "gates", "pod", "expected"),
    named_rows(TOPOLOGY_REFUSALS),
)
def test_topology_refusals_say_the_kubelets_text(
    scope: str,
    topology: str,
    gates: FeatureGates,
    pod: Pod,
    expected: tuple[str, str] | None,
) -> None:
    """Admit and Explain's decision say what the kubelet's scope says: a pod allocated as a
    whole (pod scope, both gates, pod-level resources) with the pod-level text, any other
    with the topology manager's usual one; the reason is TopologyAffinityError either way."""
    mgr = build(scope=scope, topology=topology, gates=gates)
    result = mgr.admit(pod).result
    decision = mgr.explain(pod).outcome.result
    if expected is None:
        assert result.admitted and decision.admitted
        return
    assert (result.admitted, result.reason, result.message) == (False, *expected)
    assert (decision.admitted, decision.reason, decision.message) == (False, *expected)
    assert mgr.reader().pod_count() == 0


def test_an_empty_shared_pool_is_refused_at_the_merge_or_by_allocate_pod() -> None:
    pod = pod_level((), (own("a", 4 * GI), shared("b")), 4 * GI)
    text = EQUALS_BUDGET.format("memory")
    restricted = build(topology="restricted")
    assert restricted.get_pod_topology_hints(pod) == {"memory": []}  # no placement
    rejected = restricted.admit(pod).result
    assert (rejected.reason, rejected.message) == ("TopologyAffinityError", POD_SCOPE_REFUSAL)
    best_effort = build()  # admits the empty hint: AllocatePod refuses itself
    refused = best_effort.admit(pod).result
    assert (refused.admitted, refused.reason, refused.message) == (
        False,
        "EmptyPodSharedPoolError",
        text,
    )
    assert best_effort.reader().pod_count() == 0
    plan = best_effort.explain(pod).pod_level
    assert plan is not None and plan.rejection == text
    with pytest.raises(EmptyPodSharedPoolError, match=text):
        best_effort.allocate_pod(pod)


def test_restore_replays_the_pod_level_blocks_and_refuses_an_orphan_entry() -> None:
    store = InMemoryStore()
    mgr = build(store, options=StaticOptions(drift.EXACT, state_file="/s/memory_manager_state"))
    pod = example_pod("a")
    assert mgr.admit(pod).result.admitted
    saved = store.saved
    assert saved is not None and saved.pod_entries
    # The exact comparison (memory-drift-tolerance=off) holds: pod blocks are what is reserved.
    build(store, options=StaticOptions(drift.EXACT, state_file="/s/memory_manager_state"))
    orphan = Snapshot(
        saved.policy_name,
        saved.machine_state,
        {},
        pod_entries=saved.pod_entries,
    )
    with pytest.raises(StateMismatchError) as info:
        build(InMemoryStore(orphan), options=StaticOptions(state_file="/s/memory_manager_state"))
    assert str(info.value).startswith(
        "[memorymanager] (pod: a, container: ) the pod-level memory assignment has no container "
        "assignments"
    )
    assert "kubernetes#141993" in str(info.value) and "remove /s/memory_manager_state" in str(
        info.value
    )


def test_a_changed_machine_is_restored_by_replaying_pod_blocks() -> None:
    """The drift ``fit`` replay (numamem's default) replays pod-level blocks: a node that grew
    is re-baselined; one that shrank below the budget refuses, naming the pod."""
    store = InMemoryStore()
    mgr = build(store)
    pod = example_pod("a")
    assert mgr.admit(pod).result.admitted
    grown = build(store, m=machine(memory=17 * GI))
    assert grown.reader().get_pod_memory_blocks("a") == mgr.reader().get_pod_memory_blocks("a")
    consistent(grown)
    with pytest.raises(
        StateMismatchError, match=r"\(pod: a, container: \) the memory assignment does not fit"
    ):
        build(store, m=machine(memory=8 * GI))


def test_allocate_pod_refuses_a_pod_with_container_level_memory() -> None:
    mgr = build()
    pod = example_pod()
    mgr.allocate(pod, "db", TopologyHint(0b01, True))
    with pytest.raises(Exception, match="already holds container-level memory"):
        mgr.allocate_pod(pod)
    consistent(mgr)


def test_pod_level_and_container_level_pods_share_a_machine() -> None:
    """Pod-level pods and ordinary ones on the same nodes, admitted and released in turn, keep
    every invariant (groups, counts, reservations)."""
    mgr = build(m=machine(memory=8 * GI, nodes=3))
    pods = [
        pod_level((), (own("a", GI), shared("b")), 6 * GI, uid="big"),  # needs two nodes
        Pod("plain", containers=(own("c", 2 * GI),)),
        example_pod("ex"),
    ]
    for pod in pods:
        mgr.admit(pod)
        consistent(mgr)
    big = mgr.reader().get_pod_memory_blocks("big")
    assert big is not None and big[0].numa_affinity == (0, 1)  # 3Gi + 4Gi allocatable
    for pod in pods:
        mgr.release_pod(pod.uid)
        consistent(mgr)
    assert mgr.reader().pod_count() == 0
