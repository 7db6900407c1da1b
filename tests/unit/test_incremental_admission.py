"""Admitting a pod again with more of its containers (what ``numamem nri`` does as the runtime
creates them): the containers already allocated keep their blocks, are neither allocated nor
charged again, and a later container reuses a finished init container's memory."""

from __future__ import annotations

import pytest

from numamem.memorymanager.state.invariants import violations
from numamem.pod import Pod
from tests.unit.test_memorymanager import GI, ctr, manager, two_nodes


def reserved(m: object) -> int:
    node_state = m.reader().get_machine_state()  # type: ignore[attr-defined]
    return sum(s.memory_map["memory"].reserved for s in node_state.values())


def blocks(m: object, uid: str) -> dict[str, list[tuple[tuple[int, ...], str, int]]]:
    assignments = m.reader().get_memory_assignments()  # type: ignore[attr-defined]
    return {
        name: [(tuple(b.numa_affinity or ()), b.type, b.size) for b in bs]
        for name, bs in assignments.get(uid, {}).items()
    }


@pytest.mark.parametrize("policy", ["none", "restricted", "single-numa-node"])
def test_a_grown_pod_keeps_its_allocated_containers_and_charges_them_once(policy: str) -> None:
    m, store = manager(two_nodes(), policy=policy)
    first = Pod("p", containers=(ctr("a", 2 * GI),))
    assert m.admit(first).result.admitted
    before = blocks(m, "p")
    writes = store.writes
    assert m.admit(first).result.admitted  # the same pod again: nothing changes, nothing written
    assert store.writes == writes
    grown = Pod("p", containers=(ctr("a", 2 * GI), ctr("b", 3 * GI)))
    assert m.admit(grown).result.admitted
    after = blocks(m, "p")
    assert after["a"] == before["a"]
    assert reserved(m) == 5 * GI
    ms = m.reader().get_machine_state()
    assert sum(s.number_of_assignments for s in ms.values()) == 2  # one block each
    state = m.reader()
    assert violations(state.get_machine_state(), state.get_memory_assignments()) == []


def test_a_container_admitted_after_a_finished_init_container_reuses_its_memory() -> None:
    m, _ = manager(two_nodes(), policy="none")
    init_only = Pod("p", containers=(ctr("init", 3 * GI),))  # as created: kind unknown yet
    assert m.admit(init_only).result.admitted
    then = Pod("p", init_containers=(ctr("init", 3 * GI),), containers=(ctr("app", 2 * GI),))
    assert m.admit(then).result.admitted
    assert blocks(m, "p")["app"] == [((0,), "memory", 2 * GI)]
    assert blocks(m, "p")["init"] == [((0,), "memory", GI)]  # 2 GiB of it went to app
    assert reserved(m) == 3 * GI
    m.add_container(then, "app", "id-app")  # the kubelet's AddContainer frees the init one
    assert set(blocks(m, "p")) == {"app"}
    assert reserved(m) == 2 * GI
    # Admitted again without the freed init container (as the plugin does): nothing returns.
    again = Pod("p", containers=(ctr("app", 2 * GI), ctr("next", GI)))
    assert m.admit(again).result.admitted
    assert set(blocks(m, "p")) == {"app", "next"}
    assert reserved(m) == 3 * GI
