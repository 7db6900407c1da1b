"""Property test of the resize of pods allocated as a whole by their pod-level resources
(issue 30, KEP-5526), in sequences: random machines (up to 8 nodes, some without 1Gi
pages), pod-level pods with regular init containers, sidecars and app containers, each
with memory of its own or sharing the pod's pool, beside pods pinned container by
container; admitted, started (AddContainer frees the regular init containers), resized
(the budget, a share, a container moved between its own memory and the pool, the named
container or the pod itself), resized while a write of ``memory_manager_state`` fails,
released, and the manager restarted from its files.

After every step: the state invariants hold; per pod, the pod-level blocks are the
budget, every container's blocks lie on the pod's nodes, the exclusive shares and the
pool add up to the budget, a released init container stays released; the file passes a
validateState written here from the spec (section 4.9: the pod-level blocks replayed, not
the containers') and numamem's (drift tolerance off); a restart reads what memory holds.
A refused resize changed nothing and wrote nothing, and its verdict is honest (with every
other pod released, a Deferred resize fits and an Infeasible one does not); a resize to
the current sizes writes nothing; a failed write leaves memory equal to the disk.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from numamem.api.validation import _pod_level
from numamem.checkpoint import kubelet
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.config.model import FeatureGates
from numamem.errors import AllocationError, InvalidArgumentError, ResizeError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.resize import decide as resizing
from numamem.memorymanager.state.arithmetic import default_machine_state
from numamem.memorymanager.state.drift import EXACT
from numamem.memorymanager.state.invariants import violations
from numamem.memtypes import MEMORY, Block
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.topology import Machine
from numamem.topologymanager.policy import POLICIES, new_policy
from tests.kubelet_reference import ref_reserve
from tests.unit import resize_worlds as rw

GI = 1024**3
UNIT = 512 * 1024**2
HP = "hugepages-1Gi"
GATES = FeatureGates(True, True)
RESERVED = {0: {MEMORY: GI}}
STAGES = ("open", "write", "fsync", "close", "rename", "dirsync")


@dataclass(frozen=True)
class Spec:
    """A pod: its budget (memory units, 1Gi pages; None: no pod-level resources) and its
    containers (name, kind, memory units of its own or 0 to share, 1Gi pages of its own)."""

    uid: str
    budget: tuple[int, int] | None
    containers: tuple[tuple[str, str, int, int], ...]

    def pod(self) -> Pod:
        def res(units: int, pages: int, cpu: int) -> dict[str, Quantity]:
            out = {
                "cpu": Quantity.from_int(cpu),
                MEMORY: Quantity.from_int(units * UNIT, Format.BINARY_SI),
            }
            if pages:
                out[HP] = Quantity.from_int(pages * GI, Format.BINARY_SI)
            return out

        def container(name: str, kind: str, units: int, pages: int) -> Container:
            own = res(units, pages, 1) if units else {}
            return Container(name, own, dict(own), "Always" if kind == "sidecar" else "")

        inits = tuple(container(*c) for c in self.containers if c[1] != "app")
        apps = tuple(container(*c) for c in self.containers if c[1] == "app")
        budget = res(*self.budget, 4) if self.budget else {}
        return Pod(self.uid, "ns", self.uid, inits, apps, "", budget, dict(budget))


@st.composite
def specs(draw: st.DrawFn, uid: str) -> Spec:
    if not draw(st.booleans()) and draw(st.booleans()):  # a pod pinned container by container
        return Spec(uid, None, (("c0", "app", draw(st.integers(1, 6)), 0),))
    share = st.sampled_from([0, 0, 1, 2, 3, 4])
    containers = []
    if draw(st.booleans()):
        containers.append(("init", "init", draw(share), 0))
    if draw(st.booleans()):
        containers.append(("side", "sidecar", draw(share), 0))
    for i in range(draw(st.integers(1, 2))):
        containers.append((f"c{i}", "app", draw(share), draw(st.sampled_from([0, 0, 1]))))
    budget = (draw(st.integers(1, 14)), draw(st.sampled_from([0, 0, 1, 2])))
    return Spec(uid, budget, tuple(containers))


@dataclass
class World:
    machine: Machine
    policy: str
    specs: list[Spec]
    ops: list[tuple[str, int, int, int, int]]
    """(kind, pod index, a, b, c): random numbers each kind reads as it needs."""


@st.composite
def worlds(draw: st.DrawFn) -> World:
    machine = draw(
        rw.machines(
            st.integers(1, 8),
            st.integers(3, 8),
            st.sampled_from([0, 0, 2, 3]),
            st.sampled_from([11, 20, 32]),
            pages_in_memory=True,
        )
    )
    n = draw(st.integers(1, 5))
    pod_specs = [draw(specs(f"pod-{i}")) for i in range(n)]
    kinds = st.sampled_from(["resize"] * 8 + ["fault", "start", "release", "admit", "restart"])
    numbers = st.integers(0, 1000)
    ops = [("admit", i, 0, 0, 0) for i in range(n)]
    ops += [
        (draw(kinds), draw(st.integers(0, n - 1)), draw(numbers), draw(numbers), draw(numbers))
        for _ in range(draw(st.integers(1, 20)))
    ]
    return World(
        machine,
        draw(st.sampled_from([p for p in POLICIES if p != "none"] * 3 + ["none"])),
        pod_specs,
        ops,
    )


def resized(spec: Spec, a: int, b: int, c: int) -> Spec:
    """The budget and one container changed (or moved between its own memory and the pool)."""
    assert spec.budget is not None
    units, pages = spec.budget
    if a % 4 != 0:
        units = 1 + b % 28
    if a % 23 == 0:
        pages = (pages + 1) % 3  # the API server forbids it: refused
    containers = list(spec.containers)
    if a % 3 != 1:
        i = c % len(containers)
        name, kind, share, own_pages = containers[i]
        if share and a % 5 == 0:
            share = 0  # moves to the pool: refused
        elif not share and a % 5 == 0:
            share = 1 + c % 4  # moves to its own memory: refused
        elif share:
            share = 1 + (b + c) % 6
        containers[i] = (name, kind, share, own_pages)
    if a % 7 == 0:  # the budget to the exclusive sum: the pool emptied, refused if shared
        units = max(1, sum(u for _, k, u, _ in containers if k != "init"))
    return replace(spec, budget=(units, pages), containers=tuple(containers))


def accepted_by_the_api_server(pod: Pod) -> bool:
    try:
        _pod_level(pod, "pod")
    except InvalidArgumentError:
        return False
    return True


def _policy(machine: Machine, exact: bool = False) -> StaticPolicy:
    options = StaticOptions(EXACT) if exact else StaticOptions()
    return StaticPolicy(machine, RESERVED, options=options, gates=GATES)


def _manager(world: World, directory: str | Path, exact: bool = False) -> Manager:
    topology = new_policy(world.policy, world.machine)[0]
    store = KubeletStateStore(directory, pod_level=True)
    manager = Manager(_policy(world.machine, exact), store, topology, "pod")
    manager.start()
    return manager


def spec_validate_state(world: World, directory: str) -> None:
    """validateState (spec section 4.9) on the file, written from the spec: the default
    machine state, every assignment replayed by updateMachineState (a pod's pod-level
    blocks instead of its containers'), then the stored state compared with group sums."""
    loaded = kubelet.load((Path(directory) / STATE_FILE).read_bytes())
    expected = default_machine_state(world.machine, RESERVED)
    for pod, containers in loaded.assignments.items():
        pod_blocks = loaded.pod_entries.get(pod)
        replayed = {"": pod_blocks} if pod_blocks else containers
        for name, blocks in replayed.items():
            for b in blocks:
                for n in b.numa_affinity or ():
                    node = expected.get(n)
                    assert node is not None, f"(pod: {pod}, container: {name}) unknown NUMA"
                    assert b.type in (node.memory_map or {}), (
                        f"(pod: {pod}, container: {name}) the memory assignment uses memory "
                        f"resource that does not exist ({b.type} on node {n})"
                    )
                ref_reserve(expected, list(b.numa_affinity or ()), b.type, b.size)
    stored = loaded.machine_state
    assert set(stored) == set(expected)
    for n, want in expected.items():
        got = stored[n]
        assert got is not None and want is not None
        assert got.number_of_assignments == want.number_of_assignments, n
        assert set(got.cells or ()) == set(want.cells or ()), n
        assert set(got.memory_map or {}) == set(want.memory_map or {}), n
        for name, t in (want.memory_map or {}).items():
            g = (got.memory_map or {})[name]
            assert (g.total, g.system_reserved, g.allocatable) == (
                t.total,
                t.system_reserved,
                t.allocatable,
            )
            cells = want.cells or [n]

            def total(ms: dict, field: str, name: str = name, cells: list[int] = cells) -> int:
                tables = [(ms[c].memory_map or {}).get(name) for c in cells]
                return sum(getattr(t, field) for t in tables if t is not None)

            assert total(stored, "free") == total(expected, "free"), (n, name)
            assert total(stored, "reserved") == total(expected, "reserved"), (n, name)


def _sizes(blocks: list[Block] | None) -> dict[str, int]:
    return {b.type: b.size for b in blocks or ()}


def check(
    world: World, manager: Manager, directory: str, specs: dict[str, Spec], gone: set
) -> None:
    state = manager.reader()
    pods = state.get_pod_memory_assignments()
    problems = violations(state.get_machine_state(), state.get_memory_assignments(), pods)
    assert problems == [], problems
    for uid, spec in specs.items():
        if spec.budget is None or uid not in pods:
            continue  # pinned container by container (the topology manager policy none)
        budget = _sizes(pods.get(uid))
        want = {MEMORY: spec.budget[0] * UNIT, HP: spec.budget[1] * GI}
        assert budget == {k: v for k, v in want.items() if v}, (uid, budget, spec)
        nodes = {n for b in pods[uid] for n in b.numa_affinity or ()}
        shared: dict[str, int] | None = None
        exclusive: dict[str, int] = {}
        for name, kind, share, pages in spec.containers:
            blocks = state.get_memory_blocks(uid, name)
            if (uid, name) in gone:
                assert not blocks, f"released init container {name} came back: {blocks}"
                continue
            assert blocks, (uid, name)
            assert {n for b in blocks for n in b.numa_affinity or ()} == nodes, (uid, name)
            level = manager.isolation_level(uid, name)
            if share:
                assert _sizes(blocks) == {
                    MEMORY: share * UNIT,
                    **({HP: pages * GI} if pages else {}),
                }
                assert level == "container", (uid, name, level)
                if kind != "init":
                    for k, v in _sizes(blocks).items():
                        exclusive[k] = exclusive.get(k, 0) + v
            else:
                assert level == "pod", (uid, name, level)
                if kind != "init":
                    assert shared in (None, _sizes(blocks)), "two shared containers differ"
                    shared = _sizes(blocks)
        if shared is not None:
            for k, v in budget.items():
                assert exclusive.get(k, 0) + shared.get(k, 0) == v, (uid, k, exclusive, shared)
    spec_validate_state(world, directory)
    again = _manager(world, directory, exact=True)  # validateState, drift tolerance off
    assert again.reader().same_as(state), "a restart reads other state"
    for uid, containers in state.get_memory_assignments().items():
        for name in containers:
            assert again.isolation_level(uid, name) == manager.isolation_level(uid, name)


class Fault:
    def __init__(self, stage: str) -> None:
        self.stage, self.fired = stage, False

    def __call__(self, stage: str, target: Path) -> None:
        if stage == self.stage and target.name.startswith(STATE_FILE) and not self.fired:
            self.fired = True
            raise OSError(28, "No space left on device")


@rw.slow_settings(40)
@given(worlds())
def test_pod_level_resize_sequences(world: World) -> None:
    with tempfile.TemporaryDirectory(prefix="nm") as tmp:
        manager = _manager(world, tmp)
        path = Path(tmp) / STATE_FILE
        pods = rw.Incarnations(world.specs)
        gone: set[tuple[str, str]] = set()
        for kind, spec, (a, b, c) in pods.steps(world.ops):
            if kind == "admit":
                if not accepted_by_the_api_server(spec.pod()):
                    continue
                try:
                    admitted = manager.admit(spec.pod()).result.admitted
                except AllocationError:
                    admitted = False
                if admitted:
                    pods.admitted(spec)
                    event("admitted" + (" pod-level" if spec.budget else ""))
            elif kind == "restart":
                manager = _manager(world, tmp)
            elif kind == "release":
                manager.release_pod(spec.uid)
                pods.released(spec)
                gone = {g for g in gone if g[0] != spec.uid}
            elif kind == "start":
                pod = spec.pod()
                for ctr in pod.all_containers():
                    manager.add_container(pod, ctr.name, f"{spec.uid}/{ctr.name}")
                gone |= {(spec.uid, c.name) for c in pod.init_containers if not c.restartable}
            elif spec.budget is not None:
                new = resized(spec, a, b, c)
                pod = new.pod()
                if not accepted_by_the_api_server(pod):
                    event("refused by the API server")
                    continue
                names = ["", *(n for n, k, _, _ in spec.containers if k != "init")]
                name = names[b % len(names)]
                if kind == "fault":
                    fault = Fault(STAGES[a % len(STAGES)])
                    manager._versions.store.faults = fault  # type: ignore[attr-defined]
                try:
                    with rw.unchanged_if_refused(manager, path) as before:
                        done = manager.resize(pod, name)
                except ResizeError as err:
                    if kind != "fault":
                        with rw.alone(tmp, spec.uid, lambda d: _manager(world, d)) as only:
                            rw.assert_honest(only, pod, name, err)
                    continue
                except AssertionError:  # a check of unchanged_if_refused: never the fault's
                    raise
                except Exception as err:  # the faulted write
                    assert kind == "fault", err
                    event(f"write failed at {fault.stage}")
                    manager._versions.store.faults = None  # type: ignore[attr-defined]
                    if manager.committed() is not before:  # published: the disk has it
                        pods.live[spec.uid] = new
                    check(world, manager, tmp, pods.live, gone)
                    continue
                finally:
                    manager._versions.store.faults = None  # type: ignore[attr-defined]
                event(done.action)
                assert (done.pod_level is None) == (manager.get_pod_memory(spec.uid) is None)
                pods.live[spec.uid] = new
                committed, file_after = manager.committed(), path.read_bytes()
                again = manager.resize(pod, name).action
                assert again in (resizing.UNCHANGED, resizing.NOT_PINNED), "not idempotent"
                assert manager.committed() is committed and path.read_bytes() == file_after
            check(world, manager, tmp, pods.live, gone)
