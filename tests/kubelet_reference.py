"""kubelet's hint generation and hint merge, written the straightforward exponential way.

The differential tests run numamem's algorithms (which never enumerate every
mask or every permutation) against these on machines small enough for them:
``calculate_hints`` visits all 2^n masks in ``IterateBitMasks`` order and
applies the Static policy's tests one by one; ``merge`` visits every
permutation of the providers' hint lists in nested-loop order and keeps the
best by the kubelet's ``compare``. Both follow the behavioural specification
(memory-manager spec sections 5 and 7) and the released code where the two
differ; nothing here imports numamem's hint or merge modules.

:class:`ReferenceStaticPolicy` and :class:`ReferenceTopologyPolicy` plug these
into numamem's manager, so that whole admissions (hints, merge, default and
extended hints, blocks) can be compared.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from numamem.config.model import FeatureGates
from numamem.errors import AllocationError, EmptyPodSharedPoolError
from numamem.memorymanager.policy.hints import Hints, regenerate_hints
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.model import State, StateReader
from numamem.memtypes import Block, NUMANodeState
from numamem.pod import GUARANTEED, Container, Pod, pod_qos
from numamem.topologymanager.policy import (
    BEST_EFFORT,
    NO_AFFINITY,
    NONE,
    SINGLE_NUMA_NODE,
    ProviderHints,
    TopologyHint,
    TopologyPolicy,
)

PERMUTATION_LIMIT = 400_000
"""The reference refuses merges larger than this (the test then uses a smaller case)."""


class TooLarge(Exception):  # noqa: N818 - a signal to the test, not an error
    """The reference would take too long on this input."""


def bits_of(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def mask_of(bits: Sequence[int]) -> int:
    out = 0
    for b in bits:
        out |= 1 << b
    return out


def iterate_bit_masks(nodes: Sequence[int]) -> Iterator[int]:
    """``IterateBitMasks``: by size, then in the combination order of the sorted ids."""
    ordered = sorted(nodes)
    for size in range(1, len(ordered) + 1):
        for combo in itertools.combinations(ordered, size):
            yield mask_of(combo)


def is_narrower(a: int, b: int) -> bool:
    if a.bit_count() == b.bit_count():
        return a < b
    return a.bit_count() < b.bit_count()


# --- the Static policy's hints ------------------------------------------------------------


def calculate_hints(
    machine_state: Mapping[int, NUMANodeState | None],
    requested: Mapping[str, int],
    reuse: Mapping[int, Mapping[str, int]],
    nodes: Sequence[int],
) -> list[TopologyHint]:
    """``calculateHints`` over ``nodes``: the one list every requested type gets.

    numamem's deviation is kept: a node lacking a requested type makes a mask
    fail the allocatable test (the kubelet dereferences a nil table there).
    """
    min_affinity_size = len(nodes)
    found: list[int] = []
    for mask in iterate_bit_masks(nodes):
        bits = bits_of(mask)
        free: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        lacking = False
        for n in bits:
            node = machine_state[n]
            assert node is not None
            for name in requested:
                table = (node.memory_map or {}).get(name)
                if table is None:
                    lacking = True
                    continue
                free[name] = free.get(name, 0) + table.free
                allocatable[name] = allocatable.get(name, 0) + table.allocatable
        if lacking or any(allocatable.get(t, 0) < size for t, size in requested.items()):
            continue
        min_affinity_size = min(min_affinity_size, len(bits))
        if len(bits) == 1:
            node = machine_state[bits[0]]
            assert node is not None
            if len(node.cells or []) > 1:
                continue
        else:
            rejected = False
            for n in bits:
                node = machine_state[n]
                assert node is not None
                if node.number_of_assignments > 0 and (
                    len(node.cells or []) == 1 or sorted(node.cells or []) != bits
                ):
                    rejected = True
                    break
            if rejected:
                continue
        reusable = reuse.get(mask, {})
        if any(free.get(t, 0) + reusable.get(t, 0) < size for t, size in requested.items()):
            continue
        found.append(mask)
    return [TopologyHint(m, m.bit_count() == min_affinity_size) for m in found]


def find_best_hint(hints: Sequence[TopologyHint]) -> TopologyHint:
    """``findBestHint``."""
    best = TopologyHint(None, False)
    for hint in hints:
        assert hint.affinity is not None
        if best.affinity is None:
            best = hint
            continue
        if hint.preferred and not best.preferred:
            best = hint
            continue
        if hint.preferred == best.preferred and is_narrower(hint.affinity, best.affinity):
            best = hint
    return best


@dataclass
class ReferenceSpace:
    """The hint list as kubelet has it, with the two searches Allocate makes over it."""

    hints: list[TopologyHint]

    def is_empty(self) -> bool:
        return not self.hints

    def best(self) -> TopologyHint | None:
        return find_best_hint(self.hints) if self.hints else None

    def best_superset(self, mask: int) -> TopologyHint | None:
        """``extendTopologyManagerHint``: findBestHint over the hints containing ``mask``."""
        within = [h for h in self.hints if h.affinity is not None and mask & ~h.affinity == 0]
        return find_best_hint(within) if within else None


class ReferenceStaticPolicy(StaticPolicy):
    """numamem's Static policy with every hint computed by :func:`calculate_hints`."""

    def _nodes(self, machine_state: Mapping[int, NUMANodeState | None]) -> list[int]:
        return sorted(machine_state) if self.numa_nodes is None else list(self.numa_nodes)

    def hint_space(  # type: ignore[override]
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        requested: Mapping[str, int],
        reuse: Mapping[int, Mapping[str, int]],
        work: object = None,
    ) -> ReferenceSpace:
        return ReferenceSpace(
            calculate_hints(machine_state, requested, reuse, self._nodes(machine_state))
        )

    def calculate_hints(
        self,
        machine_state: Mapping[int, NUMANodeState | None],
        requested: Mapping[str, int],
        reuse: Mapping[int, Mapping[str, int]],
        work: object = None,
    ) -> Hints:
        hints = calculate_hints(machine_state, requested, reuse, self._nodes(machine_state))
        return {name: list(hints) for name in requested} if hints else {}


# --- the topology manager's merge -----------------------------------------------------------


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """``filterProvidersHints``; resources in name order."""
    lists: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            lists.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            lst = hints[resource]
            if lst is None:
                lists.append([TopologyHint(None, True)])
            elif len(list(lst)) == 0:
                lists.append([TopologyHint(None, False)])
            else:
                lists.append(list(lst))  # type: ignore[arg-type]
    return lists


def average_distance(mask: int, distances: Mapping[int, Mapping[int, int]]) -> float:
    bits = bits_of(mask)
    total = 0.0
    count = 0.0
    for a in bits:
        for b in bits:
            total += float(distances[a][b])
            count += 1
    return total / count if count else 0.0


def merge(
    lists: Sequence[Sequence[TopologyHint]],
    nodes: Sequence[int],
    closest: bool,
    distances: Mapping[int, Mapping[int, int]] | None,
) -> TopologyHint:
    """``HintMerger.Merge`` over every permutation."""
    size = 1
    for lst in lists:
        size *= len(lst)
    if size > PERMUTATION_LIMIT:
        raise TooLarge(size)
    default = mask_of(nodes)

    def narrowest(m1: int, m2: int) -> int:
        return m1 if is_narrower(m1, m2) else m2

    def closest_of(m1: int, m2: int) -> int:
        if m1.bit_count() != m2.bit_count():
            return narrowest(m1, m2)
        assert distances is not None
        d1, d2 = average_distance(m1, distances), average_distance(m2, distances)
        if d1 == d2:
            return m1 if m1 < m2 else m2
        return m1 if d1 < d2 else m2

    def compare_masks(current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        assert current.affinity is not None and candidate.affinity is not None
        if candidate.affinity == current.affinity:
            return current
        pick = closest_of if closest else narrowest
        return (
            current if pick(current.affinity, candidate.affinity) == current.affinity else candidate
        )

    best_count = 0
    for lst in lists:
        narrow: int | None = None
        for h in lst:
            if h.affinity is not None and (narrow is None or is_narrower(h.affinity, narrow)):
                narrow = h.affinity
        if narrow is not None:
            best_count = max(best_count, narrow.bit_count())

    def compare(current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        assert candidate.affinity is not None
        if candidate.affinity.bit_count() == 0:
            return current
        if current is None:
            return candidate
        assert current.affinity is not None
        if not current.preferred and candidate.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return compare_masks(current, candidate)
        c, d = current.affinity.bit_count(), candidate.affinity.bit_count()
        if c > best_count:
            return compare_masks(current, candidate)
        if c == best_count:
            return compare_masks(current, candidate) if d == best_count else current
        if d > best_count:
            return current
        if d == best_count:
            return candidate
        if d > c:
            return candidate
        if d < c:
            return current
        return compare_masks(current, candidate)

    best: TopologyHint | None = None
    for permutation in itertools.product(*lists):
        preferred = True
        affinities: list[int] = []
        for hint in permutation:
            if hint.affinity is not None:
                affinities.append(hint.affinity)
                if hint.affinity != affinities[0]:
                    preferred = False
            if not hint.preferred:
                preferred = False
        merged = default
        for a in affinities:
            merged &= a
        best = compare(best, TopologyHint(merged, preferred))
    return best if best is not None else TopologyHint(default, False)


class ReferenceTopologyPolicy(TopologyPolicy):
    """numamem's topology policy with the merge done by :func:`merge`."""

    def merge(
        self, providers_hints: Sequence[ProviderHints], work: object = None
    ) -> tuple[TopologyHint, bool]:
        if self.name == NONE:
            return NO_AFFINITY, True
        lists = filter_providers_hints(providers_hints)
        if self.name == SINGLE_NUMA_NODE:
            lists = [
                [
                    h
                    for h in lst
                    if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)
                ]
                for lst in lists
            ]
        closest = self.name != SINGLE_NUMA_NODE and self.options.prefer_closest_numa
        distances = (
            {a: {b: self.info.distance(a, b) for b in self.info.nodes} for a in self.info.nodes}
            if closest
            else None
        )
        best = merge(lists, self.info.nodes, closest, distances)
        if self.name == SINGLE_NUMA_NODE and best.affinity == mask_of(self.info.nodes):
            best = TopologyHint(None, best.preferred)
        if self.name == BEST_EFFORT:
            return best, True
        return best, best.preferred


# --- pod-level resources (KEP-5526) ---------------------------------------------------------
#
# Transcribed from the memory-manager spec, section 5, independently of
# numamem.memorymanager.requests.podlevel: the container's and the pod's requests under the gate,
# validatePodScopeResources, AllocatePod's partition, its pod-scope hints and the
# pod-level branch of RemoveContainer.


def ref_equivalent_guaranteed(container: Container) -> bool:
    for name in ("cpu", "memory"):
        req, lim = container.requests.get(name), container.limits.get(name)
        if req is None or req.value == 0 or lim is None or lim.value != req.value:
            return False
    return True


def ref_container_requested(pod: Pod, container: Container) -> dict[str, int]:
    """getContainerRequestedResources with PodLevelResourceManagers on."""
    if pod.pod_level_resources_set and not ref_equivalent_guaranteed(container):
        return {}
    return {
        name: int(q.value)
        for name, q in container.requests.items()
        if name == "memory" or name.startswith("hugepages-")
    }


def ref_pod_budget(pod: Pod) -> dict[str, int]:
    """getPodRequestedResources for a pod that sets pod-level resources."""
    return {
        name: int(q.value)
        for name, q in pod.requests.items()
        if (name == "memory" or name.startswith("hugepages-")) and q.value > 0
    }


def ref_validate(pod: Pod, total: dict[str, int]) -> str | None:
    shared = False
    exclusive: dict[str, int] = {}
    order = sorted(total, key=lambda n: (n != "memory", n))
    for c in pod.init_containers:
        reqs = ref_container_requested(pod, c)
        if c.restart_policy != "Always":
            if not reqs:
                for r in order:
                    if exclusive.get(r, 0) >= total[r]:
                        return f"pod rejected, pod has shared init containers but no {r} available for them"
        elif not reqs:
            shared = True
        else:
            for r, v in reqs.items():
                exclusive[r] = exclusive.get(r, 0) + v
    for c in pod.containers:
        reqs = ref_container_requested(pod, c)
        if not reqs:
            shared = True
        for r, v in reqs.items():
            exclusive[r] = exclusive.get(r, 0) + v
    if shared:
        for r in order:
            if exclusive.get(r, 0) >= total[r]:
                return (
                    f"pod rejected, sum of exclusive container {r} requests equals pod budget, "
                    "leaving no memory for shared containers"
                )
    return None


def ref_blocks(bits: list[int], sizes: dict[str, int]) -> list[Block]:
    return [
        Block(tuple(bits), r, sizes[r])
        for r in sorted(sizes, key=lambda n: (n != "memory", n))
        if sizes[r] > 0
    ]


class ReferencePodLevelPolicy(ReferenceStaticPolicy):
    """The reference Static policy with the pod-level gates on and the pod-level operations
    transcribed from the spec (the mask choice is the Allocate's, over the reference hints)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, gates=FeatureGates(True, True), **kwargs)  # type: ignore[arg-type]

    def get_pod_topology_hints(  # type: ignore[override]
        self, state: StateReader, pod: Pod, work: object = None
    ) -> Hints | None:
        if not pod.pod_level_resources_set or pod_qos(pod) != GUARANTEED:
            return super().get_pod_topology_hints(state, pod)
        total = ref_pod_budget(pod)
        if ref_validate(pod, total) is not None:
            return {r: [] for r in total}
        if not total:
            return None
        blocks = state.get_pod_memory_blocks(pod.uid)
        if blocks is not None:
            return regenerate_hints(blocks, total)
        for c in pod.all_containers():
            blocks = state.get_memory_blocks(pod.uid, c.name)
            if blocks is not None:
                return regenerate_hints(blocks, total)
        return self.calculate_hints(state.machine_view(), total, {})

    def allocate_pod(  # type: ignore[override]
        self, state: State, pod: Pod, affinity: TopologyHint, work: object = None
    ) -> None:
        if pod_qos(pod) != GUARANTEED or not pod.pod_level_resources_set:
            return
        if state.get_pod_memory_blocks(pod.uid) is not None:
            return
        total = ref_pod_budget(pod)
        rejection = ref_validate(pod, total)
        if rejection is not None:
            raise EmptyPodSharedPoolError(rejection)
        if any(state.get_memory_blocks(pod.uid, c.name) for c in pod.all_containers()):
            raise AllocationError("container-level memory before AllocatePod")
        machine = state.machine_view()
        bits, _ = self._place(machine, total, {}, affinity, None)
        exclusive: dict[str, list[Block]] = {}
        own: list[str] = []
        sidecars: dict[str, int] = {}
        for c in pod.init_containers:
            reqs = ref_container_requested(pod, c)
            pool = {r: total[r] - sidecars.get(r, 0) for r in total}
            if not reqs:
                if c.restart_policy == "Always":
                    continue
                exclusive[c.name] = ref_blocks(bits, pool)
                continue
            exclusive[c.name] = ref_blocks(bits, reqs)
            own.append(c.name)
            if c.restart_policy == "Always":
                for r, v in reqs.items():
                    sidecars[r] = sidecars.get(r, 0) + v
        app_pool = {r: total[r] - sidecars.get(r, 0) for r in total}
        for c in pod.containers:
            reqs = ref_container_requested(pod, c)
            if not reqs:
                continue
            exclusive[c.name] = ref_blocks(bits, reqs)
            own.append(c.name)
            for r, v in reqs.items():
                if v > 0 and r in app_pool:
                    app_pool[r] -= v
        shared = ref_blocks(bits, app_pool)
        changed = {n: (s.copy() if n in bits and s is not None else s) for n, s in machine.items()}
        for r in sorted(total, key=lambda n: (n != "memory", n)):
            ref_reserve(changed, bits, r, total[r])
        state.adopt_machine_state(changed)
        state.set_pod_memory_blocks(pod.uid, ref_blocks(bits, total), own)
        for c in pod.all_containers():
            state.set_memory_blocks(pod.uid, c.name, exclusive.get(c.name, shared))

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> None:
        pod_blocks = state.get_pod_memory_blocks(pod_uid)
        if pod_blocks is None:
            super().remove_container(state, pod_uid, container_name)
            return
        state.delete(pod_uid, container_name)
        if state.container_names(pod_uid):
            return
        machine = {n: (s.copy() if s is not None else s) for n, s in state.machine_view().items()}
        for b in pod_blocks:
            size = b.size
            for n in b.numa_affinity or ():
                node = machine[n]
                assert node is not None
                node.number_of_assignments -= 1
                if node.number_of_assignments == 0:
                    node.cells = [n]
                table = (node.memory_map or {}).get(b.type)
                if size == 0 or table is None or table.reserved == 0:
                    continue
                take = min(table.reserved, size)
                table.reserved -= take
                table.free += take
                size -= take
        state.adopt_machine_state(machine)
        state.delete_pod(pod_uid)


def ref_reserve(
    machine: dict[int, NUMANodeState | None], bits: list[int], r: str, size: int
) -> None:
    """updateMachineState."""
    for n in bits:
        node = machine[n]
        assert node is not None
        node.number_of_assignments += 1
        node.cells = list(bits)
        table = (node.memory_map or {}).get(r)
        if size == 0 or table is None or table.free <= 0:
            continue
        take = min(table.free, size)
        table.reserved += take
        table.free -= take
        size -= take
