"""Property-based tests: random machines and pod sequences keep the memory manager's invariants."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from numamem.errors import AllocationError
from numamem.memorymanager.manager.forked import AdmitOutcome
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.invariants import violations
from numamem.memorymanager.state.model import MemoryState
from numamem.memorymanager.state.store import InMemoryStore
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topologymanager.policy import POLICIES, SCOPES, new_policy
from tests.properties import examples

MI = 1024**2
GI = 1024**3
HP_2M, HP_1G = 2048, 1048576


@st.composite
def machines(draw: st.DrawFn) -> tuple[Machine, dict[int, dict[str, int]]]:
    count = draw(st.integers(1, 4))
    nodes = []
    reserved: dict[int, dict[str, int]] = {}
    for i in range(count):
        memory = draw(st.integers(4, 12)) * GI
        pools = []
        if draw(st.booleans()):
            pools.append(HugePagePool(HP_2M, draw(st.integers(0, 512)), 0))
        if draw(st.booleans()):
            pools.append(HugePagePool(HP_1G, draw(st.integers(0, 2)), 0))
        nodes.append(NUMANode(i, memory, tuple(pools)))
        reserved[i] = {"memory": draw(st.integers(1 if i == 0 else 0, 4)) * 256 * MI}
    return Machine(tuple(nodes)), reserved


def q(n: int) -> Quantity:
    return Quantity.from_int(n, Format.BINARY_SI)


@st.composite
def containers(
    draw: st.DrawFn, name: str, hugepages: list[str], guaranteed: bool, sidecar: bool = False
) -> Container:
    res = {"cpu": Quantity.from_int(1), "memory": q(draw(st.integers(1, 24)) * 256 * MI)}
    for hp in hugepages:
        unit = 2 * MI if hp == "hugepages-2Mi" else GI
        if draw(st.booleans()):
            res[hp] = q(draw(st.integers(0, 3 if unit == GI else 300)) * unit)
    limits = dict(res) if guaranteed else {}
    return Container(name, res, limits, "Always" if sidecar else "")


@st.composite
def pods(draw: st.DrawFn, index: int, hugepages: list[str]) -> Pod:
    guaranteed = draw(st.integers(0, 9)) > 0
    inits = [
        draw(containers(f"init{i}", hugepages, guaranteed, sidecar=draw(st.booleans())))
        for i in range(draw(st.integers(0, 2)))
    ]
    apps = [
        draw(containers(f"app{i}", hugepages, guaranteed)) for i in range(draw(st.integers(1, 3)))
    ]
    return Pod(f"pod-{index}", "ns", f"p{index}", tuple(inits), tuple(apps))


@dataclass
class Scenario:
    machine: Machine
    reserved: dict[int, dict[str, int]]
    policy: str
    scope: str
    ops: list[tuple[str, object]] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    machine, reserved = draw(machines())
    hugepages = list(machine.hugepage_resources)
    scenario = Scenario(
        machine, reserved, draw(st.sampled_from(POLICIES)), draw(st.sampled_from(SCOPES))
    )
    made: list[Pod] = []
    for step in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["admit", "admit", "allocate", "add", "remove", "sync"]))
        if kind in ("admit", "allocate") or not made:
            pod = draw(pods(step, hugepages))
            made.append(pod)
            scenario.ops.append((kind if kind in ("admit", "allocate") else "admit", pod))
        elif kind == "add":
            pod = draw(st.sampled_from(made))
            ctr = draw(st.sampled_from([c.name for c in pod.all_containers()]))
            scenario.ops.append(("add", (pod, ctr)))
        elif kind == "remove":
            pod = draw(st.sampled_from(made))
            ctr = draw(st.sampled_from([c.name for c in pod.all_containers()]))
            scenario.ops.append(("remove", f"{pod.uid}/{ctr}"))
        else:
            keep = draw(st.lists(st.sampled_from(made), unique_by=lambda p: p.uid))
            scenario.ops.append(("sync", keep))
    return scenario


def decision(outcome: AdmitOutcome) -> tuple[object, ...]:
    """What an admission decided (the hints it saw are objects of their own per call)."""
    r = outcome.result
    return (r.admitted, r.reason, r.message, r.affinities, r.merged, outcome.blocks)


def assert_consistent(manager: Manager, policy: StaticPolicy, store: InMemoryStore) -> None:
    state = manager.reader()
    problems = violations(state.get_machine_state(), state.get_memory_assignments())
    assert problems == [], problems
    # A restart validates what was written (validateState of the stored state).
    assert store.saved is not None
    restored = MemoryState(store.saved.machine_state, store.saved.assignments)
    assert restored.get_machine_state() == state.get_machine_state(), "memory and the store differ"
    assert restored.get_memory_assignments() == state.get_memory_assignments()
    StaticPolicy(policy.machine, policy.system_reserved).start(restored.fork())


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_sequences_keep_invariants(scenario: Scenario) -> None:
    policy = StaticPolicy(scenario.machine, scenario.reserved)
    store = InMemoryStore()
    topology, _ = new_policy(scenario.policy, scenario.machine, {})
    manager = Manager(policy, store, topology, scenario.scope)
    manager.start()
    assert_consistent(manager, policy, store)
    default = policy.default_machine_state()
    for kind, arg in scenario.ops:
        before = manager.reader()
        machine_before = before.get_machine_state()
        if kind == "admit":
            assert isinstance(arg, Pod)
            writes = store.writes
            explained = manager.explain(arg)
            assert manager.reader() is before, "explain must change nothing"
            assert before.get_machine_state() == machine_before, "explain mutated a node state"
            assert store.writes == writes, "explain must write nothing"
            outcome = manager.admit(arg)
            event(f"admit: {outcome.result.reason or 'admitted'}")
            assert decision(explained.outcome) == decision(outcome), "explain must predict admit"
            if not outcome.result.admitted:
                assert manager.reader() is before, "a rejected pod must leave nothing behind"
        elif kind == "allocate":
            assert isinstance(arg, Pod)
            for ctr in arg.all_containers():
                try:
                    manager.allocate(arg, ctr.name)
                except AllocationError as err:
                    # A refusal of the policy's own rules; any other error (a state
                    # mismatch, a bug) fails the test.
                    assert str(err).startswith("[memorymanager] "), err
                    event(f"allocate refused: {str(err)[:60]}")
                    break
        elif kind == "add":
            pod, name = arg  # type: ignore[misc]
            manager.add_container(pod, name, f"{pod.uid}/{name}")
        elif kind == "remove":
            manager.remove_container(str(arg))
        else:
            manager.sync_active_pods(arg)  # type: ignore[arg-type]
        assert before.get_machine_state() == machine_before, "a committed state changed"
        assert_consistent(manager, policy, store)
        if any(len(n.cells or ()) > 1 for n in manager.reader().get_machine_state().values() if n):
            event("a multi-NUMA group exists")
    manager.sync_active_pods([])
    final = manager.reader()
    assert final.get_memory_assignments() == {}
    assert final.get_machine_state() == default, "releasing everything returns to the default state"
