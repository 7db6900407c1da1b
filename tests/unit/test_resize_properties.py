"""Property test of in-place resize (issue 30) against a reference written here.

Random machines (1 to 8 nodes, some with 1Gi pages and distances), random admitted states
(pods admitted under a random topology manager policy), random resizes. After each resize:

* numamem's answer is the reference's (:func:`ref_resize`: the rules of the issue, computed
  the plain way, from group sums of the blocks alone, every superset enumerated);
* the file numamem wrote passes the kubelet's ``validateState`` (drift tolerance off) and
  the state invariants hold (no two groups share a node, every block within its group, the
  reserved sums equal the blocks);
* every pinned container's memory block equals its current request;
* a refused resize changed nothing (same committed version, same file bytes).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from numamem.checkpoint import kubelet
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.errors import ResizeError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.state.drift import EXACT
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.model import MemoryState
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.topology import Machine
from numamem.topologymanager.policy import (
    POLICIES,
    PREFER_CLOSEST_NUMA_NODES,
    RESTRICTED,
    SINGLE_NUMA_NODE,
    new_policy,
)
from tests.kubelet_reference import average_distance, mask_of
from tests.unit.resize_worlds import machines, slow_settings, unchanged_if_refused

MI, GI = 1024**2, 1024**3
HP = "hugepages-1Gi"
UNIT = 512 * MI


@dataclass
class World:
    machine: Machine
    policy: str
    closest: bool
    pods: list[tuple[str, list[int], int]]
    """(uid, memory units per container, 1Gi pages of the first container)."""
    resizes: list[tuple[int, int, int, str]]
    """(pod index, container index, new memory units, what else changes: "", "pages", "qos")."""


@st.composite
def worlds(draw: st.DrawFn) -> World:
    pages = draw(st.booleans())
    machine = draw(machines(st.integers(1, 8), st.integers(3, 10), st.just(1 if pages else 0)))
    policy = draw(st.sampled_from(POLICIES))
    closest = policy != SINGLE_NUMA_NODE and draw(st.booleans())
    pods = [
        (
            f"pod-{i}",
            draw(st.lists(st.integers(1, 12), min_size=1, max_size=2)),
            draw(st.integers(0, 1)) if pages else 0,
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    resizes = [
        (
            draw(st.integers(0, len(pods) - 1)),
            draw(st.integers(0, 1)),
            draw(st.integers(1, 40)),
            draw(st.sampled_from(["", "", "", "", "pages", "qos"])),
        )
        for _ in range(draw(st.integers(1, 8)))
    ]
    return World(machine, policy, closest, pods, resizes)


def pod_of(uid: str, units: Sequence[int], pages: int, change: str = "", at: int = -1) -> Pod:
    """The pod: container ``c0`` has ``pages`` 1Gi pages; ``change`` at container ``at`` adds
    a page ("pages") or makes the pod Burstable ("qos")."""
    containers = []
    for i, unit in enumerate(units):
        res = {
            "cpu": Quantity.from_int(1),
            "memory": Quantity.from_int(unit * UNIT, Format.BINARY_SI),
        }
        count = (pages if i == 0 else 0) + (change == "pages" and i == at)
        if count:
            res[HP] = Quantity.from_int(count * GI, Format.BINARY_SI)
        limits = dict(res)
        if change == "qos" and i == at:
            limits["cpu"] = Quantity.from_int(2)
        containers.append(Container(f"c{i}", res, limits))
    return Pod(uid, containers=tuple(containers))


# --- the reference ---------------------------------------------------------------------


Blocks = list[tuple[str, str, tuple[int, ...], str, int]]
"""(pod uid, container, sorted affinity, type, size) of every block."""


def ref_resize(
    alloc: Mapping[int, Mapping[str, int]],
    blocks: Blocks,
    uid: str,
    name: str,
    new: int,
    policy: str,
    distances: Mapping[int, Mapping[int, int]] | None,
    request: Mapping[str, int],
) -> tuple[str, tuple[int, ...]]:
    """The action and nodes, or ("refused", ()), by the issue's rules."""
    [(group, old)] = [(b[2], b[4]) for b in blocks if b[:2] == (uid, name) and b[3] == "memory"]
    if new == old:
        return resizing.UNCHANGED, group
    if new < old:
        return resizing.SHRUNK, group
    growth = new - old
    members = set(group)
    used = sum(b[4] for b in blocks if set(b[2]) == members and b[3] == "memory")
    free = sum(alloc[n]["memory"] for n in group) - used
    if free >= growth:
        return resizing.GROWN, group
    if policy == SINGLE_NUMA_NODE:
        return "refused", ()
    busy = {n for b in blocks for n in b[2]}
    types = {b[3] for b in blocks if set(b[2]) == members}
    joinable = [n for n in alloc if n not in busy and all(t in alloc[n] for t in types)]
    preferred = None
    if policy == RESTRICTED:
        able = [n for n in alloc if all(t in alloc[n] for t in request)]
        sizes = (
            k
            for k in range(1, len(able) + 1)
            for s in itertools.combinations(able, k)
            if all(sum(alloc[n][t] for n in s) >= v for t, v in request.items())
        )
        preferred = next(sizes, len(alloc))
    best: tuple[tuple[float, ...], tuple[int, ...]] | None = None
    for k in range(1, len(joinable) + 1):
        for extra in itertools.combinations(joinable, k):
            nodes = tuple(sorted((*group, *extra)))
            if preferred is not None and len(nodes) != preferred:
                continue
            if free + sum(alloc[n]["memory"] for n in extra) < growth:
                continue
            mask = mask_of(nodes)
            distance = average_distance(mask, distances) if distances else 0.0
            key = (len(nodes), distance, mask)
            if best is None or key < best[0]:
                best = (key, nodes)
    return (resizing.EXTENDED, best[1]) if best else ("refused", ())


def allocatable(policy: StaticPolicy) -> dict[int, dict[str, int]]:
    return {
        n: {t: table.allocatable for t, table in (node.memory_map or {}).items()}
        for n, node in policy.default_machine_state().items()
        if node is not None
    }


def blocks_of(manager: Manager) -> Blocks:
    return [
        (uid, name, tuple(sorted(b.numa_affinity or ())), b.type, b.size)
        for uid, ctrs in manager.reader().get_memory_assignments().items()
        for name, blocks in ctrs.items()
        for b in blocks
    ]


def validate_file(path: Path, policy: StaticPolicy) -> MemoryState:
    """The kubelet's validateState (exact) on the written file."""
    loaded = kubelet.load(path.read_bytes())
    restored = MemoryState(loaded.machine_state, loaded.assignments)
    work = restored.fork()
    StaticPolicy(policy.machine, policy.system_reserved, options=StaticOptions(EXACT)).start(work)
    assert work.same_as(restored), "validateState re-baselined the written state"
    return restored


@slow_settings(50)
@given(worlds())
def test_random_resizes_match_the_reference_and_keep_the_kubelets_invariants(world: World) -> None:
    policy = StaticPolicy(world.machine, {0: {"memory": GI}})
    options = {PREFER_CLOSEST_NUMA_NODES: "true"} if world.closest else {}
    topology = new_policy(world.policy, world.machine, options)[0]
    distances = topology.info.closest.distances if world.closest else None
    alloc = allocatable(policy)
    with tempfile.TemporaryDirectory(prefix="nm") as tmp:
        store = KubeletStateStore(tmp)
        manager = Manager(policy, store, topology)
        manager.start()
        path = Path(tmp) / STATE_FILE
        sizes: dict[tuple[str, str], int] = {}
        current = {uid: list(units) for uid, units, _ in world.pods}
        for uid, units, pages in world.pods:
            if manager.admit(pod_of(uid, units, pages)).result.admitted:
                sizes.update({(uid, f"c{i}"): u * UNIT for i, u in enumerate(units)})
        for index, at, units, change in world.resizes:
            uid, _, pages = world.pods[index]
            name = f"c{at}"
            if (uid, name) not in sizes:
                continue
            shape = list(current[uid])
            shape[at] = units
            pod = pod_of(uid, shape, pages, change, at)
            blocks = blocks_of(manager)
            try:
                with unchanged_if_refused(manager, path):
                    done = manager.resize(pod, name)
            except ResizeError as err:
                if change:
                    assert err.verdict == "Infeasible"
                    continue
                request = {
                    "memory": units * UNIT,
                    **({HP: pages * GI} if at == 0 and pages else {}),
                }
                ref = ref_resize(
                    alloc, blocks, uid, name, units * UNIT, world.policy, distances, request
                )
                assert ref == ("refused", ()), (ref, str(err))
                alone = [b for b in blocks if b[0] == uid]
                again = ref_resize(
                    alloc, alone, uid, name, units * UNIT, world.policy, distances, request
                )
                assert err.verdict == ("Infeasible" if again[0] == "refused" else "Deferred"), str(
                    err
                )
                continue
            assert not change, f"a {change} change was not refused"
            event(done.action)
            request = {"memory": units * UNIT, **({HP: pages * GI} if at == 0 and pages else {})}
            ref = ref_resize(
                alloc, blocks, uid, name, units * UNIT, world.policy, distances, request
            )
            assert (done.action, done.nodes) == ref
            current[uid] = shape
            sizes[(uid, name)] = units * UNIT
            state = manager.reader()
            assert violations(state.get_machine_state(), state.get_memory_assignments()) == []
            restored = validate_file(path, policy)
            assert restored.get_memory_assignments() == state.get_memory_assignments()
            for (p, c), size in sizes.items():
                [memory] = [b for b in manager.get_memory(p, c) if b.type == "memory"]
                assert memory.size == size, (p, c)
