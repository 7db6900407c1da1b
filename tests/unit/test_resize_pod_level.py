"""In-place resize of a pod allocated by its pod-level resources (issue 30, KEP-5526) as a
table: every rule of the budget's resize, through the core (the Manager) and through the
daemon's servicers (a real socket, in process); then the container scope.

The pod ``p`` sets ``spec.resources`` (its budget) and has two containers: ``db``
(equivalent-Guaranteed: memory of its own) and ``web`` (no resources: it shares the pool,
the budget minus db). Nodes have 8Gi; node 0 has 1Gi reserved (7Gi allocatable).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from numamem.checkpoint import kubelet, kubeletwrite
from numamem.client import error_reason
from numamem.config.model import FeatureGates
from numamem.errors import ResizeError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.state.drift import EXACT
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.model import MemoryState, StateView
from numamem.memorymanager.state.store import InMemoryStore
from numamem.pod import Container, Pod
from numamem.quantity import Quantity, parse_quantity
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import GIB_KB, FakeNode
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint, new_policy
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_resize import WIRE_ACTIONS, assert_refused_unchanged

GI = 1024**3
HP_1G = 1048576
GATES = FeatureGates(True, True)


@dataclass(frozen=True)
class Row:
    id: str
    admitted: tuple[str, str]
    """The budget and db's memory at admission."""
    resized: tuple[str, str]
    """The budget and db's memory of the resized pod."""
    view: str = ""
    """The container the resize names ("": the pod itself)."""
    action: str = ""
    nodes: tuple[int, ...] = ()
    refusal: str = ""
    phrase: str = ""
    policy: str = "best-effort"
    gib: tuple[int, ...] = (8, 8)
    other: tuple[int, ...] = ()
    """The nodes of another pod's 1Gi container pinned first (none when empty)."""
    pages: tuple[str, str] = ("", "")
    """The budget's 1Gi pages at admission and resized (the nodes have 2 each when set)."""
    burstable: bool = False
    db_cpu_limit: str = "1"
    wire: tuple[grpc.StatusCode, str, str] | None = None
    """Through the servicers when the API server's validation answers first."""


ROWS = [
    Row("budget-grows-in-group", ("4Gi", "1Gi"), ("6Gi", "1Gi"), "", resizing.GROWN, (0,)),
    Row("budget-grows-to-the-last-byte", ("4Gi", "1Gi"), ("7Gi", "1Gi"), "", resizing.GROWN, (0,)),
    Row(
        "budget-grows-by-extension",
        ("4Gi", "1Gi"),
        ("10Gi", "1Gi"),
        "",
        resizing.EXTENDED,
        (0, 1),
    ),
    Row(
        "budget-growth-without-free-neighbour-is-deferred",
        ("4Gi", "1Gi"),
        ("10Gi", "1Gi"),
        refusal="Deferred",
        phrase="no node outside [0] can join it (node 1 is used by the group [1])",
        other=(1,),
    ),
    Row(
        "budget-extension-skips-a-used-neighbour",
        ("4Gi", "1Gi"),
        ("10Gi", "1Gi"),
        "",
        resizing.EXTENDED,
        (0, 2),
        gib=(8, 8, 8),
        other=(1,),
    ),
    Row(
        "budget-too-big-even-alone-is-infeasible",
        ("4Gi", "1Gi"),
        ("30Gi", "1Gi"),
        refusal="Infeasible",
        phrase='spec.resources.requests["memory"] 4Gi -> 30Gi',
        other=(1,),
    ),
    Row(
        "single-numa-node-never-extends-a-budget",
        ("4Gi", "1Gi"),
        ("10Gi", "1Gi"),
        refusal="Infeasible",
        phrase="single-numa-node never extends a group; fix: resize to at most 7Gi",
        policy="single-numa-node",
    ),
    Row("budget-shrinks", ("10Gi", "1Gi"), ("4Gi", "1Gi"), "", resizing.SHRUNK, (0, 1)),
    Row("same-sizes-are-unchanged", ("4Gi", "1Gi"), ("4Gi", "1Gi"), "", resizing.UNCHANGED, (0,)),
    Row(
        "exclusive-share-grows-inside-the-budget",
        ("4Gi", "1Gi"),
        ("4Gi", "2Gi"),
        "db",
        resizing.REPARTITIONED,
        (0,),
    ),
    Row(
        "exclusive-share-shrinks-inside-the-budget",
        ("4Gi", "2Gi"),
        ("4Gi", "1Gi"),
        "web",
        resizing.REPARTITIONED,
        (0,),
    ),
    Row(
        "budget-and-share-grow-together",
        ("4Gi", "1Gi"),
        ("8Gi", "3Gi"),
        "db",
        resizing.EXTENDED,
        (0, 1),
    ),
    Row(
        "exclusive-share-over-the-budget-is-refused",
        ("4Gi", "1Gi"),
        ("4Gi", "5Gi"),
        "db",
        refusal="Infeasible",
        phrase=(
            'spec.resources.requests["memory"]: 4Gi (4294967296): the exclusive memory of the '
            "sidecars and app containers would be 5Gi (5368709120) ('db' 5Gi (5368709120)), "
            "more than the pod's budget; fix: resize the pod's spec.resources too"
        ),
        wire=(
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            "must be greater than or equal to aggregate container requests of 5Gi",
        ),
    ),
    Row(
        "exclusive-share-emptying-the-pool-is-refused",
        ("4Gi", "1Gi"),
        ("4Gi", "4Gi"),
        "db",
        refusal="Infeasible",
        phrase=(
            "EmptyPodSharedPoolError: pod rejected, sum of exclusive container memory requests "
            "equals pod budget, leaving no memory for shared containers (memory: exclusive 4Gi "
            '(4294967296) of spec.resources.requests["memory"] 4Gi (4294967296))'
        ),
    ),
    Row(
        "budget-shrink-emptying-the-pool-is-refused",
        ("4Gi", "2Gi"),
        ("2Gi", "2Gi"),
        refusal="Infeasible",
        phrase="EmptyPodSharedPoolError: pod rejected, sum of exclusive container memory",
    ),
    Row(
        "hugepage-change-is-refused",
        ("4Gi", "1Gi"),
        ("4Gi", "1Gi"),
        refusal="Infeasible",
        phrase='spec.resources.requests["hugepages-1Gi"]: 2Gi (2147483648), pinned 1Gi',
        pages=("1Gi", "2Gi"),
    ),
    Row(
        "qos-change-is-refused",
        ("4Gi", "1Gi"),
        ("6Gi", "1Gi"),
        refusal="Infeasible",
        phrase="QoS class is Burstable, it was Guaranteed",
        burstable=True,
    ),
    Row(
        "a-container-losing-its-own-memory-is-refused",
        ("4Gi", "1Gi"),
        ("4Gi", "1Gi"),
        "db",
        refusal="Infeasible",
        phrase="container 'db': the container holds memory of its own, and its resized",
        db_cpu_limit="2",
    ),
]


def core_pod(row: Row, budget: str, db: str, pages: str, resized: bool = False) -> Pod:
    pod_res = {"cpu": Quantity.from_int(4), "memory": parse_quantity(budget)}
    if pages:
        pod_res["hugepages-1Gi"] = parse_quantity(pages)
    pod_limits = {**pod_res, "cpu": Quantity.from_int(5)} if resized and row.burstable else pod_res
    own = {"cpu": Quantity.from_int(1), "memory": parse_quantity(db)}
    own_limits = {**own, "cpu": parse_quantity(row.db_cpu_limit)} if resized else dict(own)
    containers = (Container("db", own, own_limits), Container("web", {}, {}))
    return Pod("p", "ns", "p", (), containers, "", pod_res, dict(pod_limits))


def wire_pod(row: Row, budget: str, db: str, pages: str, resized: bool = False) -> mm.Pod:
    pod_res = {"cpu": "4", "memory": budget}
    if pages:
        pod_res["hugepages-1Gi"] = pages
    pod_limits = dict(pod_res, cpu="5") if resized and row.burstable else dict(pod_res)
    own = {"cpu": "1", "memory": db}
    own_limits = dict(own, cpu=row.db_cpu_limit) if resized else dict(own)
    return mm.Pod(
        uid="p",
        namespace="ns",
        name="p",
        containers=[
            mm.Container(name="db", requests=own, limits=own_limits),
            mm.Container(name="web"),
        ],
        requests=pod_res,
        limits=pod_limits,
    )


def other_pod() -> Pod:
    res = {"cpu": Quantity.from_int(1), "memory": parse_quantity("1Gi")}
    return Pod("q", containers=(Container("app", res, dict(res)),))


def machine_of(row: Row) -> Machine:
    pools = (HugePagePool(HP_1G, 2, 2),) if row.pages[0] else ()
    return Machine(tuple(NUMANode(i, g * GI, pools, cpus=(i,)) for i, g in enumerate(row.gib)))


def fake_nodes(row: Row) -> list[FakeNode]:
    pools = {HP_1G: (2, 2)} if row.pages[0] else {}
    return [FakeNode(i, g * GIB_KB, str(i), pools) for i, g in enumerate(row.gib)]


def core_manager(row: Row, scope: str = "pod") -> tuple[Manager, InMemoryStore]:
    machine = machine_of(row)
    store = InMemoryStore()
    policy = StaticPolicy(machine, {0: {"memory": GI}}, gates=GATES)
    manager = Manager(policy, store, new_policy(row.policy, machine)[0], scope)
    manager.start()
    for node in row.other:
        manager.allocate(other_pod(), "app", TopologyHint(bitmask.new_mask([node]), True))
    budget, db = row.admitted
    assert manager.admit(core_pod(row, budget, db, row.pages[0])).result.admitted
    return manager, store


def sizes(state: StateView) -> tuple[tuple[int, ...], int, int, int]:
    """(pod nodes, budget, db's memory, web's memory) of ``p``."""
    [budget] = [b for b in state.get_pod_memory_blocks("p") or [] if b.type == "memory"]

    def memory(name: str) -> int:
        [block] = [b for b in state.get_memory_blocks("p", name) or [] if b.type == "memory"]
        assert block.numa_affinity == budget.numa_affinity, name
        return block.size

    return tuple(budget.numa_affinity or ()), budget.size, memory("db"), memory("web")


def expected(row: Row) -> tuple[tuple[int, ...], int, int, int]:
    budget, db = (parse_quantity(q).value for q in row.resized)
    return row.nodes, int(budget), int(db), int(budget - db)


def kubelet_validate(row: Row, state: StateView) -> None:
    """The kubelet's V3 encoding of the state, read back and validated as the kubelet does
    (validateState replays the pod-level blocks; drift tolerance off)."""
    pods = state.get_pod_memory_assignments()
    data = kubeletwrite.encode_v3(
        "Static", state.get_machine_state(), state.get_memory_assignments(), pods
    )
    loaded = kubelet.load(data)
    restored = MemoryState(loaded.machine_state, loaded.assignments, loaded.pod_entries)
    work = restored.fork()
    policy = StaticPolicy(machine_of(row), {0: {"memory": GI}}, gates=GATES)
    StaticPolicy(
        policy.machine, policy.system_reserved, options=StaticOptions(EXACT), gates=GATES
    ).start(work)
    assert work.same_as(restored), "validateState re-baselined the written state"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_pod_level_resize_through_the_core(row: Row) -> None:
    manager, store = core_manager(row)
    before, writes = manager.reader(), store.writes
    budget, db = row.resized
    pod = core_pod(row, budget, db, row.pages[1], resized=True)
    explained = manager.explain_resize(pod, row.view)
    assert manager.reader() is before and store.writes == writes, "explain changed something"
    if row.refusal:
        with pytest.raises(ResizeError) as info:
            manager.resize(pod, row.view)
        head = "pod 'p'" + (f", container '{row.view}'" if row.view else "")
        assert info.value.verdict == row.refusal
        assert str(info.value).startswith(f"{row.refusal}: {head}: "), str(info.value)
        assert row.phrase in str(info.value)
        assert manager.reader() is before, "a refused resize changed the state"
        assert store.writes == writes, "a refused resize wrote"
        assert explained.refusal is not None and str(explained.refusal) == str(info.value)
        return
    done = manager.resize(pod, row.view)
    assert (done.action, done.nodes) == (row.action, row.nodes)
    assert (explained.action, explained.nodes) == (row.action, row.nodes), "explain predicts"
    assert done.pod_level is not None and explained.pod_level == done.pod_level
    assert store.writes == writes + (row.action != resizing.UNCHANGED), "one write per resize"
    state = manager.reader()
    assert sizes(state) == expected(row)
    assert done.pod_level.new_size == expected(row)[1]
    shown = {"": expected(row)[1], "db": expected(row)[2], "web": expected(row)[3]}
    assert done.new_size == shown[row.view]
    if row.action == resizing.EXTENDED:
        assert done.moved == (("p", "db"), ("p", "web"))
        assert manager.get_memory_numa_nodes("p", "web") == list(row.nodes)
    pods = state.get_pod_memory_assignments()
    assert violations(state.get_machine_state(), state.get_memory_assignments(), pods) == []
    kubelet_validate(row, state)
    # A restart validates what was written as the kubelet does (drift tolerance off).
    exact = StaticOptions(EXACT)
    policy = StaticPolicy(machine_of(row), {0: {"memory": GI}}, options=exact, gates=GATES)
    again = Manager(policy, store, new_policy(row.policy, machine_of(row))[0], "pod")
    again.start()
    assert again.reader().same_as(state)
    # Idempotent: the same resize again changes nothing and writes nothing.
    writes = store.writes
    assert manager.resize(pod, row.view).action == resizing.UNCHANGED
    assert store.writes == writes


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_pod_level_resize_through_the_servicers(row: Row) -> None:
    with serve_in_process(
        fake_nodes(row),
        topology_manager_policy=row.policy,
        topology_manager_scope="pod",
        feature_gates=GATES,
    ) as server:
        client = server.client
        for node in row.other:
            q = mm.Pod(
                uid="q",
                containers=[
                    mm.Container(
                        name="app",
                        requests={"cpu": "1", "memory": "1Gi"},
                        limits={"cpu": "1", "memory": "1Gi"},
                    )
                ],
            )
            client.allocate(q, "app", mm.TopologyHint(numa_nodes=[node], preferred=True))
        budget, db = row.admitted
        assert client.admit(wire_pod(row, budget, db, row.pages[0])).admitted
        before = client.get_state()
        budget, db = row.resized
        pod = wire_pod(row, budget, db, row.pages[1], resized=True)
        if row.wire is not None:
            code, reason, phrase = row.wire
            with pytest.raises(grpc.RpcError) as info:
                client.resize(pod, row.view)
            assert (info.value.code(), error_reason(info.value)) == (code, reason)
            assert phrase in (info.value.details() or "")
            assert client.get_state() == before
            return
        explained = client.explain_resize(pod, row.view)
        if row.refusal:
            assert_refused_unchanged(
                client, pod, row.view, row.refusal, row.phrase, explained, before
            )
            return
        resp = client.resize(pod, row.view)
        assert resp.action == WIRE_ACTIONS[row.action]
        assert tuple(resp.numa_nodes) == row.nodes
        assert resp.affinity_changed == (row.action == resizing.EXTENDED)
        assert explained.decision == resp
        nodes, budget_size, db_size, web_size = expected(row)
        assert resp.pod_level and resp.pod_memory == budget_size
        assert [(tuple(b.numa_affinity), b.size) for b in resp.pod_blocks] == [(nodes, budget_size)]
        entry = client.get_state().entries["p"]
        got = {
            name: [(tuple(b.numa_affinity), b.size) for b in c.blocks]
            for name, c in entry.containers.items()
        }
        assert got == {"db": [(nodes, db_size)], "web": [(nodes, web_size)]}
        assert [(tuple(b.numa_affinity), b.size) for b in entry.pod_blocks.blocks] == [
            (nodes, budget_size)
        ]


def test_explain_shows_the_budgets_supersets() -> None:
    row = Row("x", ("4Gi", "1Gi"), ("12Gi", "1Gi"), gib=(8, 8, 4, 8), other=(1,))
    manager, _ = core_manager(row)
    decided = manager.explain_resize(core_pod(row, "12Gi", "1Gi", ""), "")
    assert decided.action == resizing.EXTENDED and decided.nodes == (0, 3)
    assert decided.pod_level is not None
    assert (decided.pod_level.old_size, decided.pod_level.new_size) == (4 * GI, 12 * GI)
    assert decided.extension is not None
    listed = [(c.nodes, c.taken, c.reason) for c in decided.extension.candidates]
    assert listed == [
        ((0, 2), False, "memory: 7Gi free < 8Gi more needed"),
        ((0, 3), True, "taken: the narrowest superset that fits"),
    ]


@pytest.mark.parametrize(("policy", "scope"), [("best-effort", "container"), ("none", "pod")])
def test_outside_the_pod_scope_a_pod_level_pods_containers_resize_as_any(
    policy: str, scope: str
) -> None:
    """In the container scope (and with the policy none, in either scope) only the
    equivalent-Guaranteed containers of a pod-level pod are pinned, one by one: they are
    resized by the container rules, and the pod has no budget pinned."""
    row = Row("x", ("4Gi", "1Gi"), ("4Gi", "2Gi"), policy=policy)
    manager, store = core_manager(row, scope)
    assert manager.get_pod_memory("p") is None
    assert manager.get_memory("p", "web") == []
    done = manager.resize(core_pod(row, "4Gi", "2Gi", ""), "db")
    assert (done.action, done.nodes, done.pod_level) == (resizing.GROWN, (0,), None)
    assert [b.size for b in manager.get_memory("p", "db")] == [2 * GI]
    writes = store.writes
    assert manager.resize(core_pod(row, "4Gi", "2Gi", ""), "web").action == resizing.NOT_PINNED
    assert manager.resize(core_pod(row, "6Gi", "2Gi", ""), "").action == resizing.NOT_PINNED
    assert store.writes == writes
    with pytest.raises(ResizeError) as info:
        manager.resize(core_pod(row, "32Gi", "30Gi", ""), "db")
    assert info.value.verdict == "Infeasible"
    assert "even if every other pod left" in str(info.value)


def test_a_released_init_container_stays_released() -> None:
    """A regular init container of a pod allocated as a whole is released when the app
    containers start; a later resize of the budget does not bring its entry back."""
    machine = machine_of(Row("x", ("", ""), ("", "")))
    store = InMemoryStore()
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}, gates=GATES),
        store,
        new_policy("best-effort", machine)[0],
        "pod",
    )
    manager.start()

    def pod_of(budget: str) -> Pod:
        res = {"cpu": Quantity.from_int(2), "memory": parse_quantity(budget)}
        return Pod(
            "p", "ns", "p", (Container("setup", {}, {}),), (Container("web", {}, {}),), "", res,
            dict(res),
        )  # fmt: skip

    assert manager.admit(pod_of("4Gi")).result.admitted
    manager.add_container(pod_of("4Gi"), "setup", "c-setup")
    manager.add_container(pod_of("4Gi"), "web", "c-web")
    assert manager.get_memory("p", "setup") == []
    done = manager.resize(pod_of("6Gi"), "")
    assert done.action == resizing.GROWN
    assert manager.get_memory("p", "setup") == []
    assert [b.size for b in manager.get_memory("p", "web")] == [6 * GI]


def test_an_extension_keeps_to_nodes_with_the_budgets_hugepages() -> None:
    """The budget holds 1Gi pages that no container's block names (every container has
    memory of its own, so the pool is nobody's): an extension must still keep to nodes that
    have 1Gi pages, or the file fails the kubelet's validateState ("uses memory resource
    that does not exist") and the daemon does not restart."""
    pools = (HugePagePool(HP_1G, 2, 2),)
    machine = Machine(
        (
            NUMANode(0, 8 * GI, pools, cpus=(0,)),
            NUMANode(1, 8 * GI, (), cpus=(1,)),
            NUMANode(2, 8 * GI, pools, cpus=(2,)),
        )
    )
    store = InMemoryStore()
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}, gates=GATES),
        store,
        new_policy("best-effort", machine)[0],
        "pod",
    )
    manager.start()

    def pod_of(budget: str) -> Pod:
        res = {
            "cpu": Quantity.from_int(4),
            "memory": parse_quantity(budget),
            "hugepages-1Gi": parse_quantity("1Gi"),
        }
        own = {"cpu": Quantity.from_int(1), "memory": parse_quantity("1Gi")}
        return Pod("p", "ns", "p", (), (Container("db", own, dict(own)),), "", res, dict(res))

    assert manager.admit(pod_of("4Gi")).result.admitted
    assert [b.type for b in manager.get_memory("p", "db")] == ["memory"]
    done = manager.resize(pod_of("10Gi"), "")
    assert (done.action, done.nodes) == (resizing.EXTENDED, (0, 2))
    state = manager.reader()
    pods = state.get_pod_memory_assignments()
    assert violations(state.get_machine_state(), state.get_memory_assignments(), pods) == []
    exact = StaticOptions(EXACT)
    again = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}, options=exact, gates=GATES),
        store,
        new_policy("best-effort", machine)[0],
        "pod",
    )
    again.start()
    assert again.reader().same_as(state)


def test_a_shared_container_gaining_own_memory_is_refused_in_a_pod_without_exclusives(
    tmp_path: Path,
) -> None:
    """Found by the review's property test: a pod whose containers all share its pool had no
    record of own memory, as a pod taken over from a kubelet's file has none, so a shared
    container gaining memory of its own was re-partitioned instead of refused. The record
    is now kept even when empty (numamem_containers' "exclusive": {uid: []}), also across a
    restart."""
    from numamem.checkpoint.mmstore import KubeletStateStore

    machine = machine_of(Row("x", ("", ""), ("", "")))

    def manager() -> Manager:
        policy = StaticPolicy(machine, {0: {"memory": GI}}, gates=GATES)
        store = KubeletStateStore(tmp_path, pod_level=True)
        m = Manager(policy, store, new_policy("best-effort", machine)[0], "pod")
        m.start()
        return m

    def pod(db_own: bool) -> Pod:
        res = {"cpu": Quantity.from_int(4), "memory": parse_quantity("4Gi")}
        own = {"cpu": Quantity.from_int(1), "memory": parse_quantity("1Gi")} if db_own else {}
        containers = (Container("db", own, dict(own)), Container("web", {}, {}))
        return Pod("p", "ns", "p", (), containers, "", res, dict(res))

    first = manager()
    assert first.admit(pod(False)).result.admitted
    assert first.isolation_level("p", "db") == "pod"
    for m in (first, manager()):  # the running manager, then one restarted from the files
        with pytest.raises(ResizeError, match="shares its pod's memory") as info:
            m.resize(pod(True), "db")
        assert info.value.verdict == "Infeasible"
        assert m.isolation_level("p", "db") == "pod"
