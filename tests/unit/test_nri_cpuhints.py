"""The kubelet CPU manager's hint from a container's CPUs (numamem.nri.cpuhints)."""

from __future__ import annotations

import pytest

from numamem.nri.cpuhints import cpu_nodes, cpu_provider

# two nodes of two CPUs, and four nodes of one
TWO = {0: 0, 1: 0, 2: 1, 3: 1}
FOUR = {0: 0, 1: 1, 2: 2, 3: 3}


@pytest.mark.parametrize(
    ("cpus", "machine", "nodes"),
    [
        ("2-3", TWO, {1}),
        ("0,2", TWO, {0, 1}),
        ("0-3", TWO, {0, 1}),
        ("", TWO, None),
        ("7", TWO, None),  # not the machine's
        ("x", TWO, None),
        ("1-2", FOUR, {1, 2}),
    ],
)
def test_the_nodes_of_the_cpus(cpus: str, machine: dict[int, int], nodes: set[int] | None) -> None:
    assert cpu_nodes(cpus, machine) == (frozenset(nodes) if nodes is not None else None)


def test_exclusive_cpus_on_some_nodes_are_a_preferred_hint_and_larger_sets_are_not() -> None:
    [provider] = cpu_provider("app", "1-2", FOUR)
    assert provider.provider == "cpu"
    hints = provider.containers["app"].resources["cpu"].hints
    assert [(list(h.numa_nodes), h.preferred) for h in hints] == [
        ([1, 2], True),
        ([0, 1, 2], False),
        ([1, 2, 3], False),
        ([0, 1, 2, 3], False),
    ]


@pytest.mark.parametrize("cpus", ["0-3", "0,2", "", "9"])
def test_cpus_on_every_node_or_none_give_no_preference(cpus: str) -> None:
    assert cpu_provider("app", cpus, TWO) == []
