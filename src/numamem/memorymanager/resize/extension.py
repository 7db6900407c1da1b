"""Which superset of its NUMA nodes a group grows to when a resize does not fit in it (issue 30).

A group (the nodes a block's affinity names, the ``cells`` of those nodes) may only grow by
nodes no group uses (nodes without assignments), that have every memory type the group's
blocks use, and that hints may be made of (every node, or only those with CPUs under
``restrict-to-cpu-numa-nodes``). Of the supersets built so, the resize takes the narrowest
whose free memory covers the growth, ranked as the kubelet ranks masks of one size
(``IsNarrowerThan``: the smaller integer value; with ``prefer-closest-numa-nodes`` the
smaller average distance first, as admission does) and admitted by the topology manager
policy:

* ``none`` and ``best-effort``: any superset;
* ``restricted``: only a superset that is a preferred hint for the container's new request
  (as many nodes as the fewest whose allocatable covers it: kubelet's ``minAffinitySize``);
* ``single-numa-node``: never (a group of one node stays one node).

The best superset of a size is found by search, not by listing the supersets (64 nodes have 7
million supersets of 5 more nodes): :class:`~numamem.memorymanager.search.best_subset.Ground`, exact
in both orders, each node visited charged to the :class:`~numamem.work.Work` (its budget and
deadline refuse a search too large by name: SearchBudgetError, DeadlineExceededError); sizes whose
largest free nodes cannot cover the growth are skipped. The first :data:`MAX_LISTED` supersets of
the size taken (and the one taken) are listed with why each was taken or not, the others counted,
for ``numamem explain --resize``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from numamem.memorymanager.search.best_subset import Ground
from numamem.memorymanager.search.space import HintSpace
from numamem.memtypes import MEMORY, NUMANodeState
from numamem.quantity import format_bytes
from numamem.topologymanager.hintfamily import NARROWEST, Order
from numamem.topologymanager.policy import NONE, RESTRICTED, SINGLE_NUMA_NODE, TopologyPolicy
from numamem.work import Work

MAX_LISTED = 64
"""Candidate supersets an answer lists (the rest are counted in ``omitted``)."""


@dataclass(frozen=True)
class Candidate:
    """One superset looked at: its nodes, whether it was taken, and why (or why not)."""

    nodes: tuple[int, ...]
    taken: bool
    reason: str


@dataclass(frozen=True)
class Extension:
    """The outcome of the search: the superset taken (None: none), what was looked at."""

    nodes: tuple[int, ...] | None
    candidates: tuple[Candidate, ...] = ()
    omitted: int = 0
    notes: tuple[str, ...] = ()
    """Nodes that could not join and sizes skipped, in words."""
    failure: str = ""
    """Why no superset was taken ("" when one was)."""
    capacity: int | None = None
    """The most memory the widest superset the policy allows could take on top of the group's
    (None when the policy's rule depends on the request: ``restricted``)."""


def find_extension(
    machine_state: Mapping[int, NUMANodeState | None],
    group: Sequence[int],
    growth: int,
    types: Collection[str],
    hint_nodes: Sequence[int],
    topology: TopologyPolicy | None,
    new_request: Mapping[str, int],
    work: Work,
) -> Extension:
    """The superset ``group`` grows to so that ``growth`` more bytes of memory fit (see the
    module docstring). ``types``: every memory type of the group's blocks; ``new_request``: the
    resized container's request (for ``restricted``)."""
    policy = topology.name if topology is not None else NONE
    group_free = sum(memory_free(machine_state, n) for n in group)
    need = growth - group_free
    if policy == SINGLE_NUMA_NODE:
        return Extension(
            None,
            failure=f"the topology manager policy {SINGLE_NUMA_NODE} never extends a group",
            capacity=0,
        )
    eligible, notes = _eligible(machine_state, group, types, hint_nodes)
    frees = {n: memory_free(machine_state, n) for n in eligible}
    closest = topology is not None and topology.options.prefer_closest_numa
    order: Order = topology.info.closest if closest and topology is not None else NARROWEST
    preferred_size: int | None = None
    if policy == RESTRICTED:
        space = HintSpace(machine_state, new_request, {}, hint_nodes, work)
        preferred_size = space.min_affinity_size
    capacity = None if preferred_size is not None else sum(frees.values())
    listed: list[Candidate] = []
    omitted = 0
    by_size = sorted(frees.values(), reverse=True)
    for k in range(1, len(eligible) + 1):
        size = len(group) + k
        if preferred_size is not None and size != preferred_size:
            if size > preferred_size:
                notes.append(
                    f"{RESTRICTED}: a superset of {size} or more nodes is not a preferred hint "
                    f"for the new request (those have {preferred_size} nodes)"
                )
                break
            continue
        if sum(by_size[:k]) < need:
            notes.append(
                f"no superset with {k} more node(s) fits: the {k} with the most free memory "
                f"have {format_bytes(sum(by_size[:k]))}, {format_bytes(need)} more is needed"
            )
            continue
        found = _best(eligible, frees, need, k, group, order, work)
        if found is None:  # cannot happen: the k largest cover the growth
            continue
        best = tuple(sorted((*group, *found)))
        why = "closer" if closest else "a lower mask"
        looked: list[tuple[tuple[int, ...], int]] = []
        for combo in itertools.islice(itertools.combinations(eligible, k), MAX_LISTED):
            work.spend(1)
            looked.append((tuple(sorted((*group, *combo))), sum(frees[n] for n in combo)))
        if best not in (nodes for nodes, _ in looked):
            looked[-1:] = [(best, sum(frees[n] for n in found))]
        omitted += math.comb(len(eligible), k) - len(looked)
        for nodes, have in looked:
            if nodes == best:
                taken = "taken: the narrowest superset that fits" + (
                    ", the closest" if closest else ""
                )
                if preferred_size is not None:
                    taken += f", a preferred hint ({preferred_size} nodes)"
                omitted += _add(listed, Candidate(nodes, True, taken))
            elif have >= need:
                omitted += _add(listed, Candidate(nodes, False, f"fits, but {list(best)} is {why}"))
            else:
                omitted += _add(listed, Candidate(nodes, False, _short(group_free + have, growth)))
        return Extension(best, tuple(listed), omitted, tuple(notes), capacity=capacity)
    if not eligible:
        why = f" ({'; '.join(notes[:3])})" if notes else ""
        failure = f"no node outside {list(group)} can join it{why}"
    elif preferred_size is not None and preferred_size <= len(group):
        failure = (
            f"{RESTRICTED}: the new request's preferred hints have {preferred_size} node(s), "
            f"the group already has {len(group)}"
        )
    else:
        failure = f"no superset of {list(group)} made of unused nodes has enough free memory"
    return Extension(None, tuple(listed), omitted, tuple(notes), failure, capacity)


def _best(
    eligible: Sequence[int],
    frees: Mapping[int, int],
    need: int,
    k: int,
    group: Sequence[int],
    order: Order,
    work: Work,
) -> tuple[int, ...] | None:
    """The ``k`` eligible nodes that, added to ``group``, make the superset smallest under
    ``order`` among those whose free memory covers ``need``, found without listing the
    k-subsets (:class:`~numamem.memorymanager.search.best_subset.Ground`: 64 nodes have 10^17).
    By distance, each node's self distance carries its distances to and from the group, so
    the subset's sum is the superset's, less the group's own."""
    values = [(frees[n],) for n in eligible]
    cap = (sum(frees[n] for n in eligible) - need,)
    ground = Ground(eligible, values, cap, 1, len(eligible) - 1, work)
    distances = order.distances
    if distances is not None:
        work.spend(len(eligible) * (len(group) + len(eligible)))
        distances = {
            r: {
                s: distances[r][s]
                + (sum(distances[g][r] + distances[r][g] for g in group) if r == s else 0)
                for s in eligible
            }
            for r in eligible
        }
    mask = ground.best(k, distances)
    return None if mask is None else tuple(n for n in eligible if mask >> n & 1)


def _add(listed: list[Candidate], candidate: Candidate) -> int:
    """List ``candidate`` if there is room; 1 when it was left out (counted as omitted)."""
    if len(listed) < MAX_LISTED:
        listed.append(candidate)
        return 0
    return 1


def _short(have: int, growth: int) -> str:
    return f"memory: {format_bytes(have)} free < {format_bytes(growth)} more needed"


def memory_free(machine_state: Mapping[int, NUMANodeState | None], node_id: int) -> int:
    node = machine_state.get(node_id)
    table = None if node is None else (node.memory_map or {}).get(MEMORY)
    return 0 if table is None else table.free


def _eligible(
    machine_state: Mapping[int, NUMANodeState | None],
    group: Sequence[int],
    types: Collection[str],
    hint_nodes: Sequence[int],
) -> tuple[list[int], list[str]]:
    """The nodes that may join ``group`` (ascending) and why the others may not."""
    eligible: list[int] = []
    notes: list[str] = []
    members = set(group)
    hints = set(hint_nodes)
    for n in sorted(machine_state):
        if n in members:
            continue
        if n not in hints:
            notes.append(f"node {n} has no CPUs (restrict-to-cpu-numa-nodes=true)")
            continue
        node = machine_state.get(n)
        if node is None:
            notes.append(f"node {n} has no state")
            continue
        if node.number_of_assignments > 0:
            notes.append(f"node {n} is used by the group {sorted(node.cells or [n])}")
            continue
        missing = [t for t in sorted(types) if t not in (node.memory_map or {})]
        if missing:
            notes.append(f"node {n} has no {missing[0]}")
            continue
        eligible.append(n)
    return eligible, notes
