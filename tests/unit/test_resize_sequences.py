"""Property test of in-place resize (issue 30) in sequences: pods with regular init
containers (whose memory later containers reuse), sidecars, several app containers and 1Gi
pages, admitted, started (AddContainer frees the init containers), resized several times in
a row, released, admitted again, and the manager restarted from its file in between.

After every step: the state invariants hold, the file passes the kubelet's validateState
(drift tolerance off) and a restart reads the state served; every pinned container's memory
block is its current request. A refused resize changed nothing, and its verdict is honest:
with every other pod released (on a copy of the state file), a Deferred resize succeeds and
an Infeasible one is still refused; an Infeasible "resize to at most N" fits then.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field, replace
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
from numamem.quantity import Format, Quantity, parse_quantity
from numamem.topology import Machine
from numamem.topologymanager.policy import POLICIES, PREFER_CLOSEST_NUMA_NODES, new_policy
from tests.unit import resize_worlds as rw

GI = 1024**3
UNIT = 512 * 1024**2
HP = "hugepages-1Gi"


@dataclass
class Spec:
    """A pod's containers: (name, kind, memory units, 1Gi pages); kind is init, sidecar, app."""

    uid: str
    containers: list[tuple[str, str, int, int]] = field(default_factory=list)

    def pod(self) -> Pod:
        def container(name: str, kind: str, units: int, pages: int) -> Container:
            res = {
                "cpu": Quantity.from_int(1),
                "memory": Quantity.from_int(units * UNIT, Format.BINARY_SI),
            }
            if pages:
                res[HP] = Quantity.from_int(pages * GI, Format.BINARY_SI)
            return Container(name, res, dict(res), "Always" if kind == "sidecar" else "")

        inits = tuple(container(*c) for c in self.containers if c[1] != "app")
        apps = tuple(container(*c) for c in self.containers if c[1] == "app")
        return Pod(self.uid, init_containers=inits, containers=apps)

    def resized(self, name: str, units: int) -> Spec:
        return replace(
            self,
            containers=[(n, k, units if n == name else u, p) for n, k, u, p in self.containers],
        )


@st.composite
def specs(draw: st.DrawFn, uid: str, pages: bool) -> Spec:
    units = st.integers(1, 10)
    containers = []
    if draw(st.booleans()):
        containers.append(("init", "init", draw(units), 0))
    if draw(st.booleans()):
        containers.append(("side", "sidecar", draw(units), 0))
    for i in range(draw(st.integers(1, 2))):
        containers.append((f"c{i}", "app", draw(units), draw(st.integers(0, 1)) if pages else 0))
    return Spec(uid, containers)


@dataclass
class World:
    machine: Machine
    policy: str
    closest: bool
    ops: list[tuple[str, int, int, int]]
    """(kind, pod index, container index, new units)."""
    specs: list[Spec]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    machine = draw(rw.machines(st.integers(1, 5), st.integers(3, 8), st.integers(0, 2)))
    policy = draw(st.sampled_from(POLICIES))
    closest = policy != "single-numa-node" and draw(st.booleans())
    n = draw(st.integers(1, 5))
    pages = any(node.hugepages for node in machine.nodes)
    pod_specs = [draw(specs(f"pod-{i}", pages)) for i in range(n)]
    kinds = st.sampled_from(["resize"] * 6 + ["start", "release", "admit", "restart"])
    ops = [
        (
            draw(kinds),
            draw(st.integers(0, n - 1)),
            draw(st.integers(0, 3)),
            draw(st.integers(1, 24)),
        )
        for _ in range(draw(st.integers(1, 14)))
    ]
    return World(machine, policy, closest, ops, pod_specs)


def _policy(machine: Machine, exact: bool = False) -> StaticPolicy:
    options = StaticOptions(EXACT) if exact else StaticOptions()
    return StaticPolicy(machine, {0: {"memory": GI}}, options=options)


def _manager(world: World, directory: str) -> Manager:
    options = {PREFER_CLOSEST_NUMA_NODES: "true"} if world.closest else {}
    topology = new_policy(world.policy, world.machine, options)[0]
    manager = Manager(_policy(world.machine), KubeletStateStore(directory), topology)
    manager.start()
    return manager


def _check(world: World, manager: Manager, directory: str, specs: dict[str, Spec]) -> None:
    state = manager.reader()
    problems = violations(state.get_machine_state(), state.get_memory_assignments())
    assert problems == [], problems
    loaded = kubelet.load((Path(directory) / STATE_FILE).read_bytes())
    restored = MemoryState(loaded.machine_state, loaded.assignments)
    work = restored.fork()
    _policy(world.machine, exact=True).start(work)
    assert work.same_as(restored), "validateState re-baselined the written state"
    assert restored.get_memory_assignments() == state.get_memory_assignments()
    for uid, ctrs in state.get_memory_assignments().items():
        for name, blocks in ctrs.items():
            kind, units = next((k, u) for n, k, u, _ in specs[uid].containers if n == name)
            [memory] = [b for b in blocks if b.type == "memory"]
            if kind != "init":  # a regular init container's block shrinks by reuse
                assert memory.size == units * UNIT, (uid, name, memory.size, units * UNIT)


@rw.slow_settings(30)
@given(worlds())
def test_resize_sequences_keep_the_invariants_and_honest_verdicts(world: World) -> None:
    with tempfile.TemporaryDirectory(prefix="nm") as tmp:
        manager = _manager(world, tmp)
        path = Path(tmp) / STATE_FILE
        pods = rw.Incarnations(world.specs)
        for kind, spec, (at, units) in pods.steps(world.ops):
            if kind == "admit":
                if manager.admit(spec.pod()).result.admitted:
                    pods.admitted(spec)
                    event("admitted")
                _check(world, manager, tmp, pods.live)
                continue
            if kind == "restart":
                manager = _manager(world, tmp)
            elif kind == "release":
                manager.release_pod(spec.uid)
                pods.released(spec)
            elif kind == "start":
                app = next(n for n, k, _, _ in spec.containers if k == "app")
                manager.add_container(spec.pod(), app, f"{spec.uid}/{app}")
            else:
                name, ckind, _, _ = spec.containers[at % len(spec.containers)]
                resized = spec.resized(name, units)
                try:
                    with rw.unchanged_if_refused(manager, path):
                        done = manager.resize(resized.pod(), name)
                except ResizeError as err:
                    if ckind == "init":
                        assert err.verdict == "Infeasible"
                        continue
                    if not manager.get_memory(spec.uid, name):
                        continue  # freed init container
                    with rw.alone(tmp, spec.uid, lambda d: _manager(world, d)) as only:
                        rw.assert_honest(only, resized.pod(), name, err)
                        most = re.search(r"resize to at most (\S+),", str(err))
                        if err.verdict == "Infeasible" and most:
                            size = parse_quantity(most.group(1)).value_ceil()
                            only.resize(_with_bytes(resized.pod(), name, size), name)
                    continue
                if ckind == "init":
                    assert done.action == resizing.NOT_PINNED, done
                else:
                    event(done.action)
                    pods.live[spec.uid] = resized
            _check(world, manager, tmp, pods.live)


def _with_bytes(pod: Pod, name: str, size: int) -> Pod:
    """``pod`` with container ``name``'s memory ``size`` bytes."""

    def sized(c: Container) -> Container:
        if c.name != name:
            return c
        res = {**c.requests, "memory": Quantity.from_int(size, Format.BINARY_SI)}
        return Container(c.name, res, dict(res), c.restart_policy)

    return replace(
        pod,
        init_containers=tuple(sized(c) for c in pod.init_containers),
        containers=tuple(sized(c) for c in pod.containers),
    )
