"""Differential tests: numamem's hint search and merge against kubelet's exponential algorithms.

The reference (tests/kubelet_reference.py) lists every mask and visits every
permutation. numamem must agree with it exactly: the hint lists and every
search Allocate makes over them, the merged hint under every policy and
option (on every tier of the merge, forced onto small machines, and on 9-16
nodes), and whole admissions with other providers' hints; on both sides of
every budget (a search that takes S steps answers with S and is refused with
S - 1). States include damaged ones (free and reserved drawn on their own),
node ids sparse ones, distances random ones, requests multi-node ones, and
other providers' lists every kubelet shape: nil, empty, any-node hints and
masks of nodes the topology manager does not use.

Admissions include pods that set pod-level resources (KEP-5526) with the feature gates on,
in both scopes, against the reference's transcription of AllocatePod, its hints and its
release (and with the gates off, where such pods are skipped).

``NUMAMEM_DIFFERENTIAL_EXAMPLES`` sets the examples per test (``make soak``
runs thousands; ``make test`` 10 to 300 each).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from numamem.config.model import FeatureGates
from numamem.errors import SearchBudgetError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.search import rules as rules_module
from numamem.memorymanager.search.space import HintSpace
from numamem.memorymanager.search.subsets import count_covering_subsets, exists_subset
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.store import InMemoryStore
from numamem.memtypes import MEMORY, MachineState, MemoryTable, NUMANodeState
from numamem.pod import Container, Pod, aggregate_container_resources
from numamem.quantity import Format, Quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager import meets
from numamem.topologymanager import merge as merge_module
from numamem.topologymanager.admission import GivenHints
from numamem.topologymanager.hintfamily import NARROWEST, Order, size_rank
from numamem.topologymanager.policy import (
    BEST_EFFORT,
    POLICIES,
    RESTRICTED,
    SCOPES,
    SINGLE_NUMA_NODE,
    NUMAInfo,
    PolicyOptions,
    ProviderHints,
    TopologyHint,
    TopologyPolicy,
    new_policy,
)
from numamem.work import Work
from tests import kubelet_reference as ref

EXAMPLES = int(os.environ.get("NUMAMEM_DIFFERENTIAL_EXAMPLES", "0")) or None
MI = 1024**2
GI = 1024**3
HUGEPAGES = ("hugepages-2Mi", "hugepages-1Gi")


def examples(default: int) -> Any:
    return settings(
        max_examples=EXAMPLES or default,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# --- machine states --------------------------------------------------------------------


@st.composite
def node_ids(draw: st.DrawFn, count: int) -> list[int]:
    """Dense ids, or sparse ones as the kernel numbers them (0, 8, 250-255, ...)."""
    if draw(st.booleans()):
        return list(range(count))
    return sorted(draw(st.sets(st.integers(0, 1023), min_size=count, max_size=count)))


@st.composite
def machine_states(
    draw: st.DrawFn, max_nodes: int, min_nodes: int = 1, consistent: bool | None = True
) -> MachineState:
    """States with random groups: some nodes pinned singly, some in multi-NUMA groups, some
    unused. Consistent ones (free = allocatable - reserved; unused nodes reserve nothing) are
    what the manager ever holds; with ``consistent=False`` (None: either) free and reserved
    are drawn on their own, unused nodes included, as a damaged state file could say."""
    if consistent is None:
        consistent = draw(st.integers(0, 3)) > 0
    count = draw(st.integers(min_nodes, max_nodes))
    ids = draw(node_ids(count))
    types = [MEMORY] + [t for t in HUGEPAGES if draw(st.booleans())]
    state: MachineState = {}
    order = list(ids)
    groups: list[list[int]] = []
    while order:
        size = draw(st.sampled_from([1, 1, 1, 2, 3]))
        groups.append(sorted(order[:size]))
        order = order[size:]
    for group in groups:
        used = draw(st.integers(0, 2)) > 0 and (len(group) == 1 or draw(st.booleans()))
        for n in group:
            tables: dict[str, MemoryTable] = {}
            for t in types:
                if t != MEMORY and draw(st.integers(0, 5)) == 0:
                    continue  # a node without this hugepage size (a memory-only node)
                allocatable = draw(st.integers(0, 8)) * GI
                reserved = draw(st.integers(0, allocatable // GI)) * GI if used else 0
                free = allocatable - reserved
                if not consistent:
                    reserved = draw(st.integers(0, 8)) * GI
                    free = draw(st.integers(0, 8)) * GI
                tables[t] = MemoryTable(allocatable + GI, GI, allocatable, reserved, free)
            cells = group if used else [n]
            state[n] = NUMANodeState(draw(st.integers(1, 3)) if used else 0, tables, list(cells))
    return state


@st.composite
def requests(draw: st.DrawFn, state: MachineState) -> dict[str, int]:
    types = sorted({t for n in state.values() if n for t in (n.memory_map or {})})
    out = {MEMORY: draw(st.integers(1, 20)) * GI // 2}
    for t in types:
        if t != MEMORY and draw(st.integers(0, 2)) == 0:
            out[t] = draw(st.integers(1, 6)) * GI
    return out


@st.composite
def reuse_tables(
    draw: st.DrawFn, state: MachineState, requested: dict[str, int]
) -> dict[int, dict[str, int]]:
    ids = sorted(state)
    table: dict[int, dict[str, int]] = {}
    for _ in range(draw(st.integers(0, 2))):
        bits = draw(st.sets(st.sampled_from(ids), min_size=1, max_size=min(3, len(ids))))
        mask = ref.mask_of(sorted(bits))
        table[mask] = {t: draw(st.integers(0, 4)) * GI for t in requested}
    return table


@dataclass
class SpaceCase:
    state: MachineState
    requested: dict[str, int]
    reuse: dict[int, dict[str, int]]
    nodes: list[int]

    def space(self) -> HintSpace:
        return HintSpace(self.state, self.requested, self.reuse, self.nodes)

    def reference(self) -> list[TopologyHint]:
        return ref.calculate_hints(self.state, self.requested, self.reuse, self.nodes)


@st.composite
def space_cases(draw: st.DrawFn, max_nodes: int = 9, min_nodes: int = 1) -> SpaceCase:
    state = draw(machine_states(max_nodes, min_nodes, consistent=None))
    requested = draw(requests(state))
    reuse = draw(reuse_tables(state, requested))
    ids = sorted(state)
    restricted = draw(st.booleans())
    nodes = sorted(draw(st.sets(st.sampled_from(ids), min_size=1))) if restricted else ids
    return SpaceCase(state, requested, reuse, nodes)


def distances_for(ids: Sequence[int], draw: st.DrawFn) -> dict[int, dict[int, int]]:
    """Symmetric tables mostly; now and then an asymmetric one (an ACPI SLIT may be, and the
    kernel reports it as it is: the distance from a to b in node a's row, b to a in b's)."""
    symmetric = draw(st.integers(0, 3)) > 0
    table: dict[int, dict[int, int]] = {a: {} for a in ids}
    for i, a in enumerate(ids):
        table[a][a] = 10
        for b in ids[i + 1 :]:
            d = draw(st.sampled_from([11, 12, 20, 21, 32]))
            table[a][b] = table[b][a] = d
            if not symmetric:
                table[b][a] = draw(st.sampled_from([11, 12, 20, 21, 32]))
    return table


# --- the hint space ------------------------------------------------------------------------


def sampled_masks(nodes: Sequence[int], draw: st.DrawFn, count: int = 24) -> list[int]:
    every = list(ref.iterate_bit_masks(nodes))
    if len(every) <= count:
        return every
    return draw(st.lists(st.sampled_from(every), min_size=count, max_size=count))


@examples(100)
@given(space_cases(), st.data())
def test_hint_space_is_kubelets_list_and_searches(case: SpaceCase, data: st.DataObject) -> None:
    space, expected = case.space(), case.reference()
    assert list(space) == expected
    assert space.is_empty() == (not expected)
    assert space.count() == len(expected)
    event(f"hints: {'none' if not expected else 'some'}")
    best = space.best()
    assert best == (ref.find_best_hint(expected) if expected else None)
    reference_space = ref.ReferenceSpace(expected)
    for mask in sampled_masks(case.nodes, data.draw):
        assert space.best_superset(mask) == reference_space.best_superset(mask), bin(mask)
        preferred = [h.affinity for h in expected if h.preferred]
        assert space.contains_preferred(mask) == (mask in preferred)
    assert list(space.preferred_by_value()) == sorted(
        h.affinity or 0 for h in expected if h.preferred
    )
    narrow = [h.affinity.bit_count() for h in expected if h.affinity is not None]
    assert space.narrowest_count() == (min(narrow) if narrow else None)
    limit = data.draw(st.integers(0, 12))
    materialized = space.materialize(limit)
    masks = [h.affinity for h in expected]
    assert materialized == (masks if len(masks) <= limit else None)
    ceiling = data.draw(st.integers(limit, limit + 12))
    listed = space.listed(limit, ceiling)
    want: list[TopologyHint] = []
    for h in expected:
        if len(want) >= limit and (not h.preferred or len(want) >= ceiling):
            break
        want.append(h)
    assert listed.hints == want
    assert (listed.omitted, listed.omitted_exact) == (len(expected) - len(want), True)


@examples(35)
@given(space_cases(), st.integers(0, 12))
def test_hint_count_budget_is_exact_on_both_sides(case: SpaceCase, limit: int) -> None:
    """GetTopologyHints counts the hints it leaves out exactly while the counting program
    stays within COUNT_STATE_BUDGET states, and reports a lower bound one state below it."""
    expected = case.reference()
    upsets = case.space().upsets
    need = next(b for b in itertools.count(1) if upsets.count(b) is not None)
    saved = rules_module.COUNT_STATE_BUDGET
    try:
        rules_module.COUNT_STATE_BUDGET = need
        listed = case.space().listed(limit, limit)
        assert listed.omitted_exact
        assert listed.omitted == len(expected) - len(listed.hints)
        rules_module.COUNT_STATE_BUDGET = need - 1
        short = case.space().listed(limit, limit)
        assert not short.omitted_exact and short.hints == listed.hints
        assert short.omitted <= listed.omitted
    finally:
        rules_module.COUNT_STATE_BUDGET = saved


@examples(10)
@given(space_cases(max_nodes=12, min_nodes=10), st.data())
def test_hint_space_on_ten_to_twelve_nodes(case: SpaceCase, data: st.DataObject) -> None:
    space, expected = case.space(), case.reference()
    assert list(space) == expected
    assert space.count() == len(expected)
    assert space.best() == (ref.find_best_hint(expected) if expected else None)
    reference_space = ref.ReferenceSpace(expected)
    for mask in sampled_masks(case.nodes, data.draw, 8):
        assert space.best_superset(mask) == reference_space.best_superset(mask), bin(mask)


@examples(60)
@given(space_cases(), st.data())
def test_best_meet_is_the_best_and(case: SpaceCase, data: st.DataObject) -> None:
    """``best_meet`` (the merge's search on machines too large to list) against every AND of
    one, two or three hints (the memory manager's list for memory and hugepages)."""
    space, expected = case.space(), case.reference()
    closest = data.draw(st.booleans())
    distances = distances_for(case.nodes, data.draw)
    order = Order(distances) if closest else NARROWEST
    copies = data.draw(st.integers(1, 3))
    members = {h.affinity for h in expected if h.affinity is not None}
    ands = set(members)
    for _ in range(copies - 1):
        ands = {a & m for a in ands for m in members}
    best_count = data.draw(st.integers(0, len(case.nodes)))
    for e in sampled_masks(case.nodes, data.draw, 12):
        meets = {e & a for a in ands if e & a}
        want = min(
            meets,
            key=lambda m: (*size_rank(m.bit_count(), best_count), *order.key(m)),
            default=None,
        )
        got = space.best_meet(e, copies, best_count, order)
        assert got == want, (bin(e), copies, best_count)
        if want is not None:
            # With an incumbent: nothing that ranks below the answer itself, the answer below
            # anything ranked just above it.
            rank = (*size_rank(want.bit_count(), best_count), *order.key(want))
            assert space.best_meet(e, copies, best_count, order, rank) is None
            above = (*rank[:-1], rank[-1] + 1)
            assert space.best_meet(e, copies, best_count, order, above) == want


def test_prefer_closest_with_asymmetric_distances_is_kubelets() -> None:
    """Distances 0->1 of 11 and 1->0 of 31: the pair {0, 1} averages 62/4, farther than {0, 2}
    and {1, 2} (60/4 each); the kubelet takes {0, 2}. The branch and bound counted each pair
    as twice one of its two distances and took {0, 1} (42/4)."""
    distances = {0: {0: 10, 1: 11, 2: 20}, 1: {0: 31, 1: 10, 2: 20}, 2: {0: 20, 1: 20, 2: 10}}
    node = {MEMORY: MemoryTable(5 * GI, GI, 4 * GI, 0, 4 * GI)}
    state: MachineState = {n: NUMANodeState(0, dict(node), [n]) for n in range(3)}
    space = HintSpace(state, {MEMORY: 6 * GI}, {}, [0, 1, 2])
    expected = ref.calculate_hints(state, {MEMORY: 6 * GI}, {}, [0, 1, 2])
    lists = [expected]
    want = ref.merge(lists, [0, 1, 2], True, distances)
    assert want == TopologyHint(0b101, True)
    assert space.best_preferred(Order(distances), None) == 0b101
    assert space.best_meet(0b111, 1, 2, Order(distances)) == 0b101


@examples(300)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=9),
    st.tuples(st.integers(0, 30), st.integers(0, 30)),
    st.integers(0, 10),
)
def test_subset_sums_against_every_subset(
    values: list[tuple[int, int]], need: tuple[int, int], k: int
) -> None:
    def ok(combo: tuple[tuple[int, int], ...]) -> bool:
        return all(sum(v[i] for v in combo) >= need[i] for i in range(2))

    assert exists_subset(values, k, need) == any(ok(c) for c in itertools.combinations(values, k))
    assert exists_subset([(v[0],) for v in values], k, need[:1]) == any(
        sum(v[0] for v in c) >= need[0] for c in itertools.combinations(values, k)
    )
    every = sum(
        ok(c) for size in range(2, len(values) + 1) for c in itertools.combinations(values, size)
    )
    assert count_covering_subsets(values, need, 10**6) == every


# --- the merge -------------------------------------------------------------------------------


@st.composite
def given_answers(
    draw: st.DrawFn, nodes: Sequence[int], max_hints: int, outside: Sequence[int] = ()
) -> ProviderHints:
    """One provider's answer: None, {}, or per resource None / [] / a few hints, whose masks
    may hold ``outside`` ids (nodes the topology manager does not use, or no node at all:
    such masks AND to nothing or to less)."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return None
    if kind == 1:
        return {}
    out: dict[str, list[TopologyHint] | None] = {}
    for resource in draw(st.sets(st.sampled_from(["cpu", "gpu", "nic"]), min_size=1)):
        shape = draw(st.integers(0, 9))
        if shape == 0:
            out[resource] = None
        elif shape == 1:
            out[resource] = []
        else:
            hints = []
            for _ in range(draw(st.integers(1, max_hints))):
                if draw(st.integers(0, 9)) == 0:
                    hints.append(TopologyHint(None, draw(st.booleans())))
                else:
                    pool = [*nodes, *outside] if outside and draw(st.integers(0, 3)) == 0 else nodes
                    bits = draw(st.sets(st.sampled_from(list(pool)), min_size=1))
                    hints.append(TopologyHint(ref.mask_of(sorted(bits)), draw(st.booleans())))
            out[resource] = hints
    return out


def machine_for(
    ids: Sequence[int], distances: dict[int, dict[int, int]], cpu_nodes: Sequence[int]
) -> Machine:
    return Machine(
        tuple(
            NUMANode(
                n,
                8 * GI,
                cpus=(n,) if n in cpu_nodes else (),
                distances=tuple(distances[n][m] for m in ids),
            )
            for n in ids
        )
    )


@dataclass
class MergeCase:
    policy: str
    options: PolicyOptions
    machine: Machine
    space: SpaceCase
    """The memory manager's list (over the CPU nodes under restrict-to-cpu-numa-nodes)."""
    families: int
    """How many resources share the memory manager's list (0: it gives no answer)."""
    given: list[ProviderHints]
    """The other providers' answers."""

    def answers(self, work: Work | None = None) -> list[ProviderHints]:
        """The answers with a new memory manager list (charged to ``work``)."""
        if not self.families:
            return list(self.given)
        c = self.space
        space = HintSpace(c.state, c.requested, c.reuse, c.nodes, work or Work())
        own = {f"r{i}": space for i in range(self.families)} if not space.is_empty() else {}
        return [own, *self.given]

    def topology(self) -> TopologyPolicy:
        return TopologyPolicy(self.policy, NUMAInfo(self.machine, self.options), self.options)


@st.composite
def merge_cases(draw: st.DrawFn, max_nodes: int = 7, min_nodes: int = 1) -> MergeCase:
    case = draw(space_cases(max_nodes, min_nodes))
    ids = sorted(case.state)
    distances = distances_for(ids, draw)
    restrict = draw(st.booleans())
    cpu_nodes = case.nodes if restrict else ids
    machine = machine_for(ids, distances, cpu_nodes)
    options = PolicyOptions(
        prefer_closest_numa=draw(st.booleans()),
        max_allowable_numa_nodes=64,
        restrict_to_cpu_numa_nodes=restrict,
    )
    case = SpaceCase(case.state, case.requested, case.reuse, cpu_nodes)
    members = max(case.space().count() or 1, 1)
    # Memory and hugepages share the one list: keep kubelet's product within reach.
    types = 1 if members > 60 else draw(st.integers(1, 3 if members <= 12 else 2))
    families = types if draw(st.integers(0, 5)) > 0 else 0
    budget = ref.PERMUTATION_LIMIT // 4 // max(members**types, 1)
    # Ids the topology manager does not use: memory-only nodes, and nodes of no machine.
    outside = [n for n in ids if n not in cpu_nodes] + [max(ids) + 1, max(ids) + 7]
    given = []
    for _ in range(draw(st.integers(0, 4))):
        per = 1 if budget < 3 else min(8, int(budget ** (1 / 3)))
        given.append(draw(given_answers(cpu_nodes, max(per, 1), outside)))
    policy = draw(st.sampled_from([BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE]))
    return MergeCase(policy, options, machine, case, families, given)


def reference_answers(answers: Sequence[ProviderHints]) -> list[ProviderHints]:
    """The same answers with every family listed, as the kubelet has them."""
    out: list[ProviderHints] = []
    for answer in answers:
        if answer is None:
            out.append(None)
            continue
        out.append({k: (list(v) if isinstance(v, HintSpace) else v) for k, v in answer.items()})
    return out


def reference_merge(case: MergeCase) -> tuple[TopologyHint, bool]:
    info = NUMAInfo(case.machine, case.options)
    try:
        return ref.ReferenceTopologyPolicy(case.policy, info, case.options).merge(
            reference_answers(case.answers())
        )
    except ref.TooLarge:
        assume(False)
        raise


def both_merges(case: MergeCase) -> tuple[tuple[TopologyHint, bool], tuple[TopologyHint, bool]]:
    work = Work(limit=1 << 60)  # a forced tier may cost more than the budget (tested apart)
    ours = case.topology().merge(case.answers(work), work)
    return ours, reference_merge(case)


TIERS: dict[str, dict[tuple[ModuleType, str], float]] = {
    "auto": {},
    "counting": {(meets, "PAIRWISE_COST_FACTOR"): 0},
    "pairwise": {(meets, "MOBIUS_MAX_NODES"): 0},
    "by-rule": {(meets, "MOBIUS_MAX_NODES"): 0, (merge_module, "MATERIALIZE_MEMBERS"): 0},
}
"""The thresholds each tier lowers, by the module that reads them (a name the module does
not have fails in getattr below, never set silently)."""


@contextlib.contextmanager
def forced_tier(tier: str) -> Iterator[None]:
    """Run with the merge's thresholds lowered, so that a small machine takes ``tier``."""
    saved = {(module, name): getattr(module, name) for module, name in TIERS[tier]}
    for (module, name), value in TIERS[tier].items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


@pytest.mark.parametrize("tier", list(TIERS))
@examples(50)
@given(case=merge_cases())
def test_merge_is_kubelets_on_every_tier(tier: str, case: MergeCase) -> None:
    with forced_tier(tier):
        ours, theirs = both_merges(case)
    event(f"{case.policy}: {'preferred' if theirs[0].preferred else 'non-preferred'} merge")
    event(f"memory manager lists: {case.families}")
    assert ours == theirs


@examples(50)
@given(case=merge_cases())
def test_merge_budget_is_exact_on_both_sides(case: MergeCase) -> None:
    """A merge that takes S steps gives kubelet's answer with a budget of S and is refused by
    name with S - 1, on every tier (the memory manager's list charged to the same budget)."""
    theirs = reference_merge(case)
    for tier in TIERS:
        with forced_tier(tier):
            probe = Work(limit=1 << 60)
            assert case.topology().merge(case.answers(probe), probe) == theirs, tier
            steps = probe.spent
            exact = Work(limit=steps)
            assert case.topology().merge(case.answers(exact), exact) == theirs, tier
            if steps:
                short = Work(limit=steps - 1)
                with pytest.raises(SearchBudgetError, match="SEARCH_BUDGET"):
                    case.topology().merge(case.answers(short), short)


@examples(10)
@given(case=merge_cases(max_nodes=16, min_nodes=9))
def test_merge_is_kubelets_on_nine_to_sixteen_nodes(case: MergeCase) -> None:
    """Nine to sixteen nodes: the merge against every permutation, where kubelet's product of
    list sizes stays within reach (the memory manager's list included)."""
    for tier in TIERS:
        with forced_tier(tier):
            ours, theirs = both_merges(case)
        assert ours == theirs, tier


# --- whole admissions ----------------------------------------------------------------------


def q(n: int) -> Quantity:
    return Quantity.from_int(n, Format.BINARY_SI)


@st.composite
def admission_machines(draw: st.DrawFn) -> tuple[Machine, dict[int, dict[str, int]]]:
    count = draw(st.integers(1, 6))
    ids = draw(node_ids(count))
    distances = distances_for(ids, draw)
    cpu_nodes = (
        set(ids) if draw(st.booleans()) else set(draw(st.sets(st.sampled_from(ids), min_size=1)))
    )
    nodes = []
    reserved: dict[int, dict[str, int]] = {}
    for i, n in enumerate(ids):
        pools = []
        if draw(st.booleans()):
            pools.append(HugePagePool(1048576, draw(st.integers(0, 3)), 0))
        nodes.append(
            NUMANode(
                n,
                draw(st.integers(2, 10)) * GI + sum(p.total_bytes for p in pools),
                tuple(pools),
                cpus=(i,) if n in cpu_nodes else (),
                distances=tuple(distances[n][m] for m in ids),
            )
        )
        reserved[n] = {MEMORY: draw(st.integers(1 if i == 0 else 0, 4)) * 256 * MI}
    return Machine(tuple(nodes)), reserved


@st.composite
def admission_pods(draw: st.DrawFn, index: int, hugepages: bool) -> Pod:
    guaranteed = draw(st.integers(0, 9)) > 0

    def container(name: str, sidecar: bool = False) -> Container:
        # Up to 4Gi mostly; now and then up to 12Gi, which takes several nodes.
        most = 16 if draw(st.integers(0, 3)) else 48
        res = {"cpu": Quantity.from_int(1), MEMORY: q(draw(st.integers(1, most)) * 256 * MI)}
        if hugepages and draw(st.booleans()):
            res["hugepages-1Gi"] = q(draw(st.integers(0, 3)) * GI)
        return Container(name, res, dict(res) if guaranteed else {}, "Always" if sidecar else "")

    inits = tuple(
        container(f"init{i}", sidecar=draw(st.booleans())) for i in range(draw(st.integers(0, 2)))
    )
    apps = tuple(container(f"app{i}") for i in range(draw(st.integers(1, 3))))
    return Pod(f"pod-{index}", "ns", f"p{index}", inits, apps)


@st.composite
def pod_level_pods(draw: st.DrawFn, index: int, hugepages: bool) -> Pod:
    """A pod that sets pod-level resources, as the API server lets through: its budget covers
    the aggregate requests of its equivalent-Guaranteed containers (exactly, now and then,
    which leaves a shared pool empty), the others request nothing or not requests == limits."""

    def container(name: str, sidecar: bool = False) -> Container:
        kind = draw(st.integers(0, 2))
        restart = "Always" if sidecar else ""
        if kind == 0:
            return Container(name, restart_policy=restart)
        res = {"cpu": Quantity.from_int(1), MEMORY: q(draw(st.integers(1, 12)) * 256 * MI)}
        if hugepages and draw(st.booleans()):
            res["hugepages-1Gi"] = q(draw(st.integers(0, 2)) * GI)
        if kind == 1:  # not equivalent-Guaranteed: shares the pod's pool
            return Container(name, {MEMORY: res[MEMORY]}, {}, restart)
        return Container(name, res, dict(res), restart)

    inits = tuple(
        container(f"init{i}", sidecar=draw(st.booleans())) for i in range(draw(st.integers(0, 2)))
    )
    apps = tuple(container(f"app{i}") for i in range(draw(st.integers(1, 3))))
    plain = Pod(f"pod-{index}", "ns", f"p{index}", inits, apps)
    exclusive = Pod(
        plain.uid,
        init_containers=tuple(c for c in inits if c.limits),
        containers=tuple(c for c in apps if c.limits),
    )
    budget = {
        name: qty.value
        for name, qty in aggregate_container_resources(exclusive).items()
        if name != "cpu"
    }
    budget[MEMORY] = budget.get(MEMORY, 0) + draw(st.sampled_from([0, 0, 256 * MI, GI, 3 * GI]))
    if budget[MEMORY] == 0:
        budget[MEMORY] = 256 * MI
    if hugepages and draw(st.booleans()):
        budget["hugepages-1Gi"] = budget.get("hugepages-1Gi", 0) + draw(st.integers(0, 1)) * GI
    resources = {name: q(int(value)) for name, value in budget.items() if value}
    resources["cpu"] = Quantity.from_int(8)
    limits = dict(resources) if draw(st.integers(0, 9)) > 0 else {MEMORY: resources[MEMORY]}
    return Pod(plain.uid, "ns", plain.name, inits, apps, "", resources, limits)


@st.composite
def other_providers(draw: st.DrawFn, pod: Pod, nodes: Sequence[int]) -> list[GivenHints]:
    outside = [max(nodes) + 1, max(nodes) + 5]  # ids of no node (Admit's validation refuses
    # them; the manager and the merge take them as the kubelet does: they AND to nothing)
    out = []
    for i in range(draw(st.integers(0, 2))):
        containers = {
            c.name: draw(given_answers(nodes, 3, outside))
            for c in pod.all_containers()
            if draw(st.booleans())
        }
        out.append(GivenHints(f"provider{i}", containers, draw(given_answers(nodes, 3, outside))))
    return out


@dataclass
class AdmissionScenario:
    machine: Machine
    reserved: dict[int, dict[str, int]]
    policy: str
    scope: str
    options: dict[str, str]
    ops: list[tuple[str, Any]] = field(default_factory=list)
    pod_level: bool = False
    """The pod-level feature gates are on (KEP-5526)."""


@st.composite
def admission_scenarios(draw: st.DrawFn) -> AdmissionScenario:
    machine, reserved = draw(admission_machines())
    options = {
        "max-allowable-numa-nodes": "64",
        "prefer-closest-numa-nodes": draw(st.sampled_from(["true", "false"])),
        "restrict-to-cpu-numa-nodes": draw(st.sampled_from(["true", "false"])),
    }
    scenario = AdmissionScenario(
        machine, reserved, draw(st.sampled_from(POLICIES)), draw(st.sampled_from(SCOPES)), options
    )
    scenario.pod_level = draw(st.integers(0, 2)) == 0
    hugepages = bool(machine.hugepage_resources)
    made: list[Pod] = []
    for step in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["admit", "admit", "admit", "allocate", "remove"]))
        if kind == "remove" and made:
            scenario.ops.append(("remove", draw(st.sampled_from(made)).uid))
            continue
        pod_level = (
            draw(st.integers(0, 2)) == 0 if scenario.pod_level else draw(st.integers(0, 19)) == 0
        )
        if pod_level:
            pod = draw(pod_level_pods(step, hugepages))
            event("pod-level pod" + ("" if scenario.pod_level else " (gates off)"))
        else:
            pod = draw(admission_pods(step, hugepages))
        made.append(pod)
        if kind == "allocate":
            bits = draw(st.sets(st.sampled_from(machine.node_ids), max_size=2))
            affinity = TopologyHint(
                ref.mask_of(sorted(bits)) if bits else None, draw(st.booleans())
            )
            scenario.ops.append(("allocate", (pod, affinity)))
        else:
            scenario.ops.append(("admit", (pod, draw(other_providers(pod, machine.node_ids)))))
    return scenario


def managers(scenario: AdmissionScenario) -> tuple[Manager, Manager]:
    topology, _ = new_policy(scenario.policy, scenario.machine, scenario.options)
    restricted = topology.info.nodes if topology.options.restrict_to_cpu_numa_nodes else None
    gates = FeatureGates(True, True) if scenario.pod_level else None
    ours = Manager(
        StaticPolicy(scenario.machine, scenario.reserved, restricted, gates=gates),
        InMemoryStore(),
        topology,
        scenario.scope,
    )
    reference_topology = ref.ReferenceTopologyPolicy(topology.name, topology.info, topology.options)
    reference = ref.ReferencePodLevelPolicy if scenario.pod_level else ref.ReferenceStaticPolicy
    theirs = Manager(
        reference(scenario.machine, scenario.reserved, restricted),
        InMemoryStore(),
        reference_topology,
        scenario.scope,
    )
    ours.start()
    theirs.start()
    return ours, theirs


def comparable(outcome: Any) -> tuple[Any, ...]:
    r = outcome.result
    return (
        r.admitted,
        r.reason,
        r.message,
        r.affinities,
        r.merged,
        outcome.blocks,
        outcome.pod_blocks,
    )


def materialized(hints: ProviderHints) -> ProviderHints:
    return None if hints is None else {k: None if v is None else list(v) for k, v in hints.items()}


@examples(50)
@given(admission_scenarios())
def test_admissions_are_kubelets(scenario: AdmissionScenario) -> None:
    """Lockstep: numamem's manager and one built from the reference take the same steps."""
    ours, theirs = managers(scenario)
    for kind, arg in scenario.ops:
        if kind == "admit":
            pod, others = arg
            for ctr in pod.all_containers():
                assert materialized(ours.get_topology_hints(pod, ctr.name)) == materialized(
                    theirs.get_topology_hints(pod, ctr.name)
                )
            assert materialized(ours.get_pod_topology_hints(pod)) == materialized(
                theirs.get_pod_topology_hints(pod)
            )
            try:
                expected = theirs.admit(pod, others)
            except ref.TooLarge:
                assume(False)
            got = ours.admit(pod, others)
            event(f"{scenario.policy}: {got.result.reason or 'admitted'}")
            if pod.pod_level_resources_set and scenario.pod_level:
                event(f"pod-level, {scenario.scope} scope: {got.result.reason or 'admitted'}")
            assert comparable(got) == comparable(expected)
        elif kind == "allocate":
            pod, affinity = arg
            for ctr in pod.all_containers():
                errors = []
                for manager in (ours, theirs):
                    try:
                        manager.allocate(pod, ctr.name, affinity)
                        errors.append("")
                    except Exception as err:
                        errors.append(f"{type(err).__name__}: {err}")
                assert errors[0] == errors[1]
                if errors[0]:
                    event("allocate refused")
                    break
        else:
            ours.release_pod(arg)
            theirs.release_pod(arg)
        assert ours.reader().get_machine_state() == theirs.reader().get_machine_state()
        assert ours.reader().get_memory_assignments() == theirs.reader().get_memory_assignments()
        assert (
            ours.reader().get_pod_memory_assignments()
            == theirs.reader().get_pod_memory_assignments()
        )
        assert not violations(
            ours.reader().get_machine_state(),
            ours.reader().get_memory_assignments(),
            ours.reader().get_pod_memory_assignments(),
        )


@examples(35)
@given(admission_scenarios())
def test_admission_budget_is_exact_on_both_sides(scenario: AdmissionScenario) -> None:
    """Two numamem managers in lockstep: an admission that took S search steps on one is
    refused by name on the other with a budget of S - 1, leaving its state as it was, and
    gives the same outcome with S."""
    first, _ = managers(scenario)
    second, _ = managers(scenario)
    for kind, arg in scenario.ops:
        if kind == "admit":
            pod, others = arg
            done = first.admit(pod, others)
            if done.steps:
                before = second.committed()
                with pytest.raises(SearchBudgetError, match="SEARCH_BUDGET"):
                    second.admit(pod, others, budget=done.steps - 1)
                assert second.committed() is before
            again = second.admit(pod, others, budget=done.steps)
            assert comparable(again) == comparable(done)
            assert again.steps == done.steps
        elif kind == "allocate":
            pod, affinity = arg
            for ctr in pod.all_containers():
                outcomes = []
                for manager in (first, second):
                    try:
                        outcomes.append(manager.allocate(pod, ctr.name, affinity))
                    except Exception as err:
                        outcomes.append(f"{type(err).__name__}: {err}")
                assert outcomes[0] == outcomes[1]
                if isinstance(outcomes[0], str):
                    break
        else:
            first.release_pod(arg)
            second.release_pod(arg)
        assert first.reader().same_as(second.reader())
