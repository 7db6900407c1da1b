"""In-place resize of pinned memory (issue 30) as a table: every rule, through the core (the
Manager) and through the daemon's servicers (a real socket, in process).

Each row is a machine (node memory and 1Gi pages, optional distances), a topology manager
policy, the containers pinned first (with the affinity they were given) and one resize; the
expected answer is the action and nodes, or the refusal's verdict and a phrase of its reason.
Node 0 has 1Gi reserved, so its memory allocatable is 1Gi less than the others'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
import pytest

from numamem.client import NumamemClient, error_reason
from numamem.config.model import FeatureGates
from numamem.errors import PersistenceError, ResizeError, SearchBudgetError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.state.drift import EXACT
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.store import InMemoryStore
from numamem.pod import Container, Pod
from numamem.quantity import Quantity, parse_quantity
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import GIB_KB, FakeNode
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint, new_policy
from numamem.v1 import memorymanager_pb2 as mm

GI = 1024**3
HP_1G = 1048576


@dataclass(frozen=True)
class Pinned:
    """A container pinned before the resize: its pod, memory, 1Gi pages and nodes."""

    uid: str
    memory: str
    nodes: tuple[int, ...]
    pages: str = ""
    name: str = "app"


@dataclass(frozen=True)
class Row:
    id: str
    pinned: tuple[Pinned, ...]
    memory: str
    """The resized container's new memory (pod ``p``, container ``app``)."""
    action: str = ""
    nodes: tuple[int, ...] = ()
    refusal: str = ""
    phrase: str = ""
    policy: str = "none"
    options: tuple[tuple[str, str], ...] = ()
    gib: tuple[int, ...] = (8, 8)
    pages: tuple[int, ...] = ()
    """1Gi pages per node (none when empty; -1: the node has no 1Gi pool at all)."""
    distances: tuple[tuple[int, ...], ...] = ()
    new_pages: str | None = None
    """The resized container's 1Gi pages (None: as pinned)."""
    burstable: bool = False
    moved: tuple[tuple[str, str], ...] = field(default=())
    """The containers that get new nodes (default: the resized one when extended)."""

    @property
    def expected_moved(self) -> tuple[tuple[str, str], ...]:
        return self.moved or ((("p", "app"),) if self.action == resizing.EXTENDED else ())


P4 = Pinned("p", "4Gi", (0,))
ROWS = [
    Row("grow-in-group", (P4,), "6Gi", resizing.GROWN, (0,)),
    Row("grow-to-the-last-byte", (P4,), "7Gi", resizing.GROWN, (0,)),
    Row("grow-by-extension", (P4,), "10Gi", resizing.EXTENDED, (0, 1), moved=(("p", "app"),)),
    Row(
        "extension-without-free-neighbour-is-deferred",
        (P4, Pinned("q", "1Gi", (1,))),
        "10Gi",
        refusal="Deferred",
        phrase="no node outside [0] can join it (node 1 is used by the group [1])",
    ),
    Row(
        "extension-skips-a-used-neighbour",
        (P4, Pinned("q", "1Gi", (1,))),
        "10Gi",
        resizing.EXTENDED,
        (0, 2),
        gib=(8, 8, 8),
    ),
    Row(
        "extension-takes-every-container-of-the-group",
        (P4, Pinned("q", "2Gi", (0,))),
        "8Gi",
        resizing.EXTENDED,
        (0, 1),
        moved=(("p", "app"), ("q", "app")),
    ),
    Row(
        "extension-needs-the-groups-hugepage-types",
        (Pinned("p", "2Gi", (0,), pages="1Gi"),),
        "12Gi",
        resizing.EXTENDED,
        (0, 2),
        gib=(8, 8, 8),
        pages=(1, -1, 1),
    ),
    Row(
        "single-numa-node-never-extends",
        (P4,),
        "10Gi",
        refusal="Infeasible",
        phrase="single-numa-node never extends a group; fix: resize to at most 7Gi",
        policy="single-numa-node",
    ),
    Row(
        "single-numa-node-grows-in-group",
        (P4,),
        "7Gi",
        resizing.GROWN,
        (0,),
        policy="single-numa-node",
    ),
    Row(
        "restricted-extends-to-a-preferred-hint",
        (P4,),
        "10Gi",
        resizing.EXTENDED,
        (0, 1),
        policy="restricted",
    ),
    Row(
        "restricted-refuses-a-superset-that-is-not-preferred",
        (Pinned("p", "2Gi", (0,)), Pinned("q", "4Gi", (0,))),
        "5Gi",
        refusal="Deferred",
        phrase="restricted: the new request's preferred hints have 1 node(s), the group already has 1",
        policy="restricted",
    ),
    Row(
        "best-effort-extends-where-restricted-does-not",
        (Pinned("p", "2Gi", (0,)), Pinned("q", "4Gi", (0,))),
        "5Gi",
        resizing.EXTENDED,
        (0, 1),
        policy="best-effort",
        moved=(("p", "app"), ("q", "app")),
    ),
    Row("narrowest-is-the-lower-mask", (P4,), "10Gi", resizing.EXTENDED, (0, 1), gib=(8, 8, 8, 8)),
    Row(
        "prefer-closest-takes-the-closer-node",
        (P4,),
        "10Gi",
        resizing.EXTENDED,
        (0, 3),
        policy="best-effort",
        options=(("prefer-closest-numa-nodes", "true"),),
        gib=(8, 8, 8, 8),
        distances=((10, 30, 30, 11), (30, 10, 11, 30), (30, 11, 10, 30), (11, 30, 30, 10)),
    ),
    Row(
        "too-big-even-alone-is-infeasible",
        (P4, Pinned("q", "1Gi", (1,))),
        "30Gi",
        refusal="Infeasible",
        phrase="even if every other pod left",
    ),
    Row("shrink-keeps-the-group", (Pinned("p", "10Gi", (0, 1)),), "4Gi", resizing.SHRUNK, (0, 1)),
    Row("shrink-in-a-single-node", (P4,), "1Gi", resizing.SHRUNK, (0,)),
    Row("same-size-is-unchanged", (P4,), "4Gi", resizing.UNCHANGED, (0,)),
    Row(
        "hugepage-change-is-refused",
        (Pinned("p", "2Gi", (0,), pages="1Gi"),),
        "2Gi",
        refusal="Infeasible",
        phrase="the API server does not allow hugepage resize",
        pages=(2, 2),
        new_pages="2Gi",
    ),
    Row(
        "qos-change-is-refused",
        (P4,),
        "6Gi",
        refusal="Infeasible",
        phrase="QoS class is Burstable, it was Guaranteed (container 'app' requests cpu 1 "
        "but limits it to 2;",
        burstable=True,
    ),
]


def resources(memory: str, pages: str) -> dict[str, Quantity]:
    res = {"cpu": Quantity.from_int(1), "memory": parse_quantity(memory)}
    if pages:
        res["hugepages-1Gi"] = parse_quantity(pages)
    return res


def core_pod(uid: str, memory: str, pages: str = "", burstable: bool = False) -> Pod:
    res = resources(memory, pages)
    limits = {**res, "cpu": Quantity.from_int(2)} if burstable else dict(res)
    return Pod(uid, containers=(Container("app", res, limits),))


def wire_pod(uid: str, memory: str, pages: str = "", burstable: bool = False) -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    if pages:
        res["hugepages-1Gi"] = pages
    limits = dict(res, cpu="2") if burstable else dict(res)
    return mm.Pod(uid=uid, containers=[mm.Container(name="app", requests=res, limits=limits)])


def has_pool(row: Row, node: int) -> bool:
    return bool(row.pages) and row.pages[node] >= 0


def machine_of(row: Row) -> Machine:
    return Machine(
        tuple(
            NUMANode(
                i,
                gib * GI,
                (HugePagePool(HP_1G, row.pages[i], row.pages[i]),) if has_pool(row, i) else (),
                cpus=(i,),
                distances=row.distances[i] if row.distances else (),
            )
            for i, gib in enumerate(row.gib)
        )
    )


def fake_nodes(row: Row) -> list[FakeNode]:
    return [
        FakeNode(
            i,
            gib * GIB_KB,
            str(i),
            {HP_1G: (row.pages[i], row.pages[i])} if has_pool(row, i) else {},
            distances=row.distances[i] if row.distances else None,
        )
        for i, gib in enumerate(row.gib)
    ]


def new_pages(row: Row) -> str:
    pinned = next(c for c in row.pinned if c.uid == "p")
    return pinned.pages if row.new_pages is None else row.new_pages


def core_manager(row: Row) -> tuple[Manager, InMemoryStore]:
    machine = machine_of(row)
    store = InMemoryStore()
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}),
        store,
        new_policy(row.policy, machine, dict(row.options))[0],
    )
    manager.start()
    for c in row.pinned:
        hint = TopologyHint(bitmask.new_mask(c.nodes), True)
        manager.allocate(core_pod(c.uid, c.memory, c.pages), c.name, hint)
        assert manager.get_memory_numa_nodes(c.uid, c.name) == list(c.nodes)
    return manager, store


def check_blocks(row: Row, blocks: Sequence[tuple[tuple[int, ...], str, int]]) -> None:
    memory = [b for b in blocks if b[1] == "memory"]
    assert memory == [(row.nodes, "memory", parse_quantity(row.memory).value)]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_resize_through_the_core(row: Row) -> None:
    manager, store = core_manager(row)
    before = manager.reader()
    writes = store.writes
    pod = core_pod("p", row.memory, new_pages(row), row.burstable)
    explained = manager.explain_resize(pod, "app")
    assert manager.reader() is before and store.writes == writes, "explain changed something"
    if row.refusal:
        with pytest.raises(ResizeError) as info:
            manager.resize(pod, "app")
        assert info.value.verdict == row.refusal
        assert str(info.value).startswith(f"{row.refusal}: pod 'p', container 'app': ")
        assert row.phrase in str(info.value)
        assert manager.reader() is before, "a refused resize changed the state"
        assert store.writes == writes, "a refused resize wrote"
        assert explained.refusal is not None and str(explained.refusal) == str(info.value)
        return
    done = manager.resize(pod, "app")
    assert (done.action, done.nodes) == (row.action, row.nodes)
    assert (explained.action, explained.nodes) == (row.action, row.nodes), "explain predicts"
    assert store.writes == writes + (row.action != resizing.UNCHANGED), "one write per resize"
    assert manager.get_memory_numa_nodes("p", "app") == list(row.nodes)
    check_blocks(
        row, [(b.numa_affinity or (), b.type, b.size) for b in manager.get_memory("p", "app")]
    )
    assert done.moved == row.expected_moved
    for uid, name in done.moved:
        assert manager.get_memory_numa_nodes(uid, name) == list(row.nodes)
    state = manager.reader()
    assert violations(state.get_machine_state(), state.get_memory_assignments()) == []
    # A restart validates what was written as the kubelet does (drift tolerance off: exact).
    exact = StaticOptions(EXACT)
    again = Manager(StaticPolicy(machine_of(row), {0: {"memory": GI}}, options=exact), store)
    again.start()
    assert again.reader().same_as(state)
    # Idempotent: the same resize again changes nothing, writes nothing.
    writes = store.writes
    assert manager.resize(pod, "app").action == resizing.UNCHANGED
    assert store.writes == writes


WIRE_ACTIONS = {
    resizing.GROWN: mm.RESIZE_GROWN_IN_GROUP,
    resizing.EXTENDED: mm.RESIZE_GROWN_BY_EXTENSION,
    resizing.SHRUNK: mm.RESIZE_SHRUNK,
    resizing.UNCHANGED: mm.RESIZE_UNCHANGED,
    resizing.REPARTITIONED: mm.RESIZE_REPARTITIONED,
}
WIRE_REFUSALS = {
    "Deferred": (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESIZE_DEFERRED"),
    "Infeasible": (grpc.StatusCode.FAILED_PRECONDITION, "RESIZE_INFEASIBLE"),
}


def assert_refused_unchanged(
    client: NumamemClient,
    pod: mm.Pod,
    view: str,
    refusal: str,
    phrase: str,
    explained: mm.ExplainResizeResponse,
    before: mm.GetStateResponse,
) -> None:
    """The daemon refuses the resize of ``view`` with ``refusal``'s status code and reason,
    a message holding ``phrase`` that ``explained`` (explain_resize's answer) gave too, and
    its state is still ``before``."""
    with pytest.raises(grpc.RpcError) as info:
        client.resize(pod, view)
    err = info.value
    assert (err.code(), error_reason(err)) == WIRE_REFUSALS[refusal]
    assert phrase in (err.details() or "")
    assert (explained.refusal, explained.message) == (refusal, err.details())
    assert client.get_state() == before


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_resize_through_the_daemon(row: Row) -> None:
    with serve_in_process(
        fake_nodes(row),
        topology_manager_policy=row.policy,
        topology_manager_policy_options=row.options,
    ) as server:
        client = server.client
        for c in row.pinned:
            affinity = mm.TopologyHint(numa_nodes=c.nodes, preferred=True)
            client.allocate(wire_pod(c.uid, c.memory, c.pages), c.name, affinity)
        before = client.get_state()
        pod = wire_pod("p", row.memory, new_pages(row), row.burstable)
        explained = client.explain_resize(pod, "app")
        if row.refusal:
            assert_refused_unchanged(client, pod, "app", row.refusal, row.phrase, explained, before)
            return
        resp = client.resize(pod, "app")
        assert resp.action == WIRE_ACTIONS[row.action]
        assert tuple(resp.numa_nodes) == row.nodes
        assert resp.affinity_changed == (row.action == resizing.EXTENDED)
        assert explained.decision == resp
        assert [(r.pod_uid, r.container_name) for r in resp.moved] == list(row.expected_moved)
        check_blocks(row, [(tuple(b.numa_affinity), b.type, b.size) for b in resp.blocks])
        entry = client.get_state().entries["p"].containers["app"]
        check_blocks(row, [(tuple(b.numa_affinity), b.type, b.size) for b in entry.blocks])


def test_explain_lists_the_candidates_and_why() -> None:
    row = Row("x", (P4, Pinned("q", "1Gi", (1,))), "12Gi", gib=(8, 8, 4, 8))
    manager, _ = core_manager(row)
    decided = manager.explain_resize(core_pod("p", "12Gi"), "app")
    assert decided.action == resizing.EXTENDED and decided.nodes == (0, 3)
    assert decided.extension is not None
    listed = [(c.nodes, c.taken, c.reason) for c in decided.extension.candidates]
    assert listed == [
        ((0, 2), False, "memory: 7Gi free < 8Gi more needed"),
        ((0, 3), True, "taken: the narrowest superset that fits"),
    ]
    assert decided.extension.notes == ("node 1 is used by the group [1]",)


def test_a_failed_write_changes_nothing() -> None:
    manager, store = core_manager(Row("x", (P4,), "10Gi"))
    before = manager.reader()
    store.fail_next = "No space left on device"
    with pytest.raises(PersistenceError):
        manager.resize(core_pod("p", "10Gi"), "app")
    assert manager.reader() is before
    assert manager.resize(core_pod("p", "10Gi"), "app").action == resizing.EXTENDED


def test_not_pinned_and_regular_init_containers() -> None:
    manager, store = core_manager(Row("x", (P4,), "4Gi"))
    writes = store.writes
    assert manager.resize(core_pod("other", "4Gi"), "app").action == resizing.NOT_PINNED
    res = resources("1Gi", "")
    pod = Pod(
        "i",
        init_containers=(Container("init", res, dict(res)),),
        containers=(Container("app", res, dict(res)),),
    )
    manager.allocate(pod, "init")
    grown = Pod(
        "i",
        init_containers=(Container("init", resources("2Gi", ""), resources("2Gi", "")),),
        containers=pod.containers,
    )
    with pytest.raises(ResizeError, match="a regular init container cannot be resized in place"):
        manager.resize(grown, "init")
    assert store.writes == writes + 1  # the allocation only


def test_shrink_returns_memory_from_the_last_node_filled() -> None:
    manager, _ = core_manager(Row("x", (Pinned("p", "10Gi", (0, 1)),), "4Gi"))
    tables = manager.reader().get_machine_state()
    assert [tables[n].memory_map["memory"].reserved for n in (0, 1)] == [7 * GI, 3 * GI]  # type: ignore[union-attr,index]
    manager.resize(core_pod("p", "4Gi"), "app")
    tables = manager.reader().get_machine_state()
    assert [tables[n].memory_map["memory"].reserved for n in (0, 1)] == [4 * GI, 0]  # type: ignore[union-attr,index]
    assert tables[1].cells == [0, 1] and tables[1].number_of_assignments == 1  # type: ignore[union-attr]


def test_sync_active_pods_releases_a_pod_of_an_extended_group() -> None:
    manager, store = core_manager(Row("x", (P4, Pinned("q", "2Gi", (0,))), "8Gi"))
    manager.resize(core_pod("p", "8Gi"), "app")  # the group {0} of p and q becomes {0,1}
    assert manager.get_memory_numa_nodes("q", "app") == [0, 1]
    removed = manager.sync_active_pods([core_pod("q", "2Gi")])
    assert removed == [("p", "app")]
    state = manager.reader()
    assert violations(state.get_machine_state(), state.get_memory_assignments()) == []
    machine = state.get_machine_state()
    assert [machine[n].cells for n in (0, 1)] == [[0, 1], [0, 1]]  # type: ignore[union-attr]
    assert sum(machine[n].memory_map["memory"].reserved for n in (0, 1)) == 2 * GI  # type: ignore[union-attr,index]
    exact = StaticOptions(EXACT)
    again = Manager(
        StaticPolicy(machine_of(Row("x", (), "")), {0: {"memory": GI}}, options=exact), store
    )
    again.start()
    assert again.reader().same_as(state)
    manager.sync_active_pods([])
    assert (
        manager.reader().get_machine_state()
        == StaticPolicy(machine_of(Row("x", (), "")), {0: {"memory": GI}}).default_machine_state()
    ), "releasing everything returns to the default state"


def test_the_fit_replay_restores_an_extended_group_on_a_changed_machine() -> None:
    row = Row("x", (P4,), "10Gi")
    manager, store = core_manager(row)
    manager.resize(core_pod("p", "10Gi"), "app")
    grown = Row("x", (), "", gib=(8, 9))  # node 1 has 1Gi more after a reboot
    again = Manager(StaticPolicy(machine_of(grown), {0: {"memory": GI}}), store)  # fit: the default
    again.start()
    assert again.get_memory("p", "app") == manager.get_memory("p", "app")
    state = again.reader()
    assert violations(state.get_machine_state(), state.get_memory_assignments()) == []
    assert state.get_machine_state()[1].memory_map["memory"].allocatable == 9 * GI  # type: ignore[union-attr,index]
    assert again.resize(core_pod("p", "11Gi"), "app").action == resizing.GROWN


@pytest.mark.parametrize(
    ("policy", "as_a_whole"), [("best-effort", True), ("none", False)], ids=["pod-scope", "none"]
)
def test_a_pod_level_pod_is_resized_and_an_impossible_resize_refused(
    policy: str, as_a_whole: bool
) -> None:
    """Allocated as a whole (its budget) or container by container (the policy none), a pod
    that sets pod-level resources is resized (tests/unit/test_resize_pod_level.py has every
    rule); a resize that cannot be done is still refused as Infeasible, naming why."""
    machine = machine_of(Row("x", (), "", gib=(16, 16)))
    gates = FeatureGates(True, True)
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}, gates=gates),
        InMemoryStore(),
        new_policy(policy, machine)[0],
        "pod",
    )
    manager.start()
    budget = {"cpu": Quantity.from_int(4), "memory": parse_quantity("4Gi")}

    def pod_of(memory: str) -> Pod:
        own = resources(memory, "")
        containers = (Container("app", own, dict(own)),)
        return Pod("plp", "ns", "db", (), containers, "", budget, dict(budget))

    assert manager.admit(pod_of("1Gi")).result.admitted
    assert (manager.get_pod_memory("plp") is not None) == as_a_whole
    done = manager.resize(pod_of("2Gi"), "app")
    assert done.action == (resizing.REPARTITIONED if as_a_whole else resizing.GROWN)
    assert [b.size for b in manager.get_memory("plp", "app")] == [2 * GI]
    before = manager.reader()
    with pytest.raises(ResizeError) as info:
        manager.resize(pod_of("5Gi" if as_a_whole else "40Gi"), "app")
    assert info.value.verdict == "Infeasible"
    assert str(info.value).startswith("Infeasible: pod 'plp', container 'app': ")
    why = "more than the pod's budget" if as_a_whole else "even if every other pod left"
    assert why in str(info.value)
    assert manager.reader() is before


@pytest.mark.parametrize(
    ("closest", "nodes"),
    [(False, (0, 1, 2, 3, 4, 32)), (True, (27, 28, 29, 30, 31, 32))],
    ids=["narrowest", "prefer-closest"],
)
def test_an_extension_on_64_nodes_is_found_without_listing_the_supersets(
    closest: bool, nodes: tuple[int, ...]
) -> None:
    """Growing by five 16Gi nodes on 64: C(63, 5) = 7 million supersets of that size, which
    listing one by one refused (SEARCH_BUDGET_EXCEEDED, after 10 s of CPU with the default
    budget) though any five fit; the best is found by search, within a small budget."""
    distances = tuple(
        tuple(10 if a == b else 20 + abs(a - b) for b in range(64)) for a in range(64)
    )
    machine = Machine(
        tuple(NUMANode(i, 16 * GI, (), cpus=(i,), distances=distances[i]) for i in range(64))
    )
    options = {"max-allowable-numa-nodes": "64"}
    if closest:
        options["prefer-closest-numa-nodes"] = "true"
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}),
        InMemoryStore(),
        new_policy("best-effort", machine, options)[0],
    )
    manager.start()
    manager.allocate(core_pod("p", "4Gi"), "app", TopologyHint(bitmask.new_mask([32]), True))
    decided = manager.resize(core_pod("p", "81Gi"), "app", budget=200_000)
    assert (decided.action, decided.nodes) == (resizing.EXTENDED, nodes)
    assert decided.extension is not None
    taken = [c.nodes for c in decided.extension.candidates if c.taken]
    assert taken == [nodes], "the superset taken is listed"
    listed = len(decided.extension.candidates)
    assert listed + decided.extension.omitted == 7_028_847  # C(63, 5)
    assert (
        violations(manager.reader().get_machine_state(), manager.reader().get_memory_assignments())
        == []
    )


def test_a_resize_removes_stale_state_first_like_allocate() -> None:
    """With the kubelet's active pods, the memory of a pod that is gone (stale state) is
    removed before a resize decides, as before an Allocate: else a resize that needs it was
    Deferred, and retried alone it stayed Deferred until some admission came by."""
    machine = machine_of(Row("x", (), ""))
    active = [core_pod("p", "4Gi"), core_pod("q", "3Gi")]
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}),
        InMemoryStore(),
        new_policy("single-numa-node", machine)[0],
        active_pods=lambda: active,
    )
    manager.start()
    for pod in active:
        manager.allocate(pod, "app", TopologyHint(bitmask.new_mask([0]), True))
    del active[1]  # q was deleted
    decided = manager.resize(core_pod("p", "7Gi"), "app")
    assert (decided.action, decided.nodes) == (resizing.GROWN, (0,))
    assert manager.get_memory("q", "app") == []


def test_a_node_left_out_by_restrict_to_cpu_numa_nodes_is_named() -> None:
    """A memory-only node under restrict-to-cpu-numa-nodes cannot join a group; the refusal
    says so (it named only the node used by another group, and the free memory-only node
    was left unexplained)."""
    machine = Machine(tuple(NUMANode(i, 8 * GI, (), cpus=(i,) if i < 2 else ()) for i in range(3)))
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}, numa_nodes=(0, 1)),
        InMemoryStore(),
        new_policy("best-effort", machine)[0],
    )
    manager.start()
    for uid, size, node in (("p", "4Gi", 0), ("q", "1Gi", 1)):
        manager.allocate(core_pod(uid, size), "app", TopologyHint(1 << node, True))
    with pytest.raises(ResizeError) as info:
        manager.resize(core_pod("p", "10Gi"), "app")
    assert info.value.verdict == "Deferred"
    assert (
        "no node outside [0] can join it (node 1 is used by the group [1]; node 2 has no CPUs "
        "(restrict-to-cpu-numa-nodes=true))"
    ) in str(info.value)


def test_a_resize_past_the_search_budget_gives_a_resizes_advice() -> None:
    """A resize refused for SEARCH_BUDGET names the budget and what would let a resize
    through, not the admission's advice about other providers' hints (a resize has none)."""
    machine = Machine(tuple(NUMANode(i, 16 * GI, (), cpus=(i,)) for i in range(16)))
    manager = Manager(
        StaticPolicy(machine, {0: {"memory": GI}}),
        InMemoryStore(),
        new_policy("best-effort", machine, {"max-allowable-numa-nodes": "16"})[0],
    )
    manager.start()
    manager.allocate(core_pod("p", "4Gi"), "app", TopologyHint(bitmask.new_mask([8]), True))
    before = manager.committed()
    with pytest.raises(SearchBudgetError) as info:
        manager.resize(core_pod("p", "81Gi"), "app", budget=10)
    text = str(info.value)
    assert "SEARCH_BUDGET" in text and "grow in smaller steps" in text, text
    assert "hints from other providers" not in text, text
    assert manager.committed() is before, "a refused resize changes nothing"
