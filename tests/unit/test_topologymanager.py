"""Topology-manager merge, options and admission scopes (kubelet policy_test.go semantics)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from numamem.errors import ConfigError, NumamemError
from numamem.pod import Container, Pod
from numamem.topology import Machine, NUMANode
from numamem.topologymanager import bitmask
from numamem.topologymanager.admission import admit
from numamem.topologymanager.policy import (
    NO_AFFINITY,
    ProviderHints,
    TopologyHint,
    new_policy,
    parse_policy_options,
)


def H(nodes: list[int] | None, preferred: bool) -> TopologyHint:
    return TopologyHint(None if nodes is None else bitmask.new_mask(nodes), preferred)


def machine(count: int, distances: list[list[int]] | None = None) -> Machine:
    return Machine(
        tuple(
            NUMANode(
                i,
                1 << 34,
                (),
                (),
                tuple(distances[i])
                if distances
                else tuple(10 if i == j else 20 for j in range(count)),
            )
            for i in range(count)
        )
    )


MERGE_CASES: list[tuple[str, str, list[ProviderHints], TopologyHint, bool]] = [
    (
        "two providers, same preferred mask",
        "best-effort",
        [{"r1": [H([0], True)]}, {"r2": [H([0], True)]}],
        H([0], True),
        True,
    ),
    (
        "one provider without hints, one preferred hint",
        "best-effort",
        [{}, {"r2": [H([0], True)]}],
        H([0], True),
        True,
    ),
    (
        "provider returns an empty map: preferred any-NUMA",
        "best-effort",
        [{}],
        H([0, 1], True),
        True,
    ),
    ("provider returns None", "best-effort", [None], H([0, 1], True), True),
    (
        "resource with a None list: no preference",
        "best-effort",
        [{"r": None}],
        H([0, 1], True),
        True,
    ),
    (
        "resource with an empty list: no possible affinity",
        "best-effort",
        [{"r": []}],
        H([0, 1], False),
        True,
    ),
    (
        "no common mask falls back to the default, non-preferred",
        "best-effort",
        [{"r1": [H([0], True)]}, {"r2": [H([1], True)]}],
        H([0, 1], False),
        True,
    ),
    (
        "matching narrower preferred hint from both",
        "best-effort",
        [
            {"r1": [H([0], True), H([1], True), H([0, 1], False)]},
            {"r2": [H([0], True), H([1], True), H([0, 1], False)]},
        ],
        H([0], True),
        True,
    ),
    (
        "different widths are not preferred (1 wider mask, both preferred 2/2)",
        "best-effort",
        [{"r1": [H([1], True)]}, {"r2": [H([0, 1], True)]}],
        H([1], False),
        True,
    ),
    (
        "bestNonPreferredAffinityCount (1)",
        "best-effort",
        [{"r1": [H([0, 1, 2, 3], False), H([0, 1], False)]}, {"r2": [H([0, 1], False)]}],
        H([0, 1], False),
        True,
    ),
    (
        "non-preferred steer up to the widest minimum",
        "best-effort",
        [
            {"r1": [H([0], False), H([0, 1], False)]},
            {"r2": [H([0, 1], False), H([0, 1, 2], False)]},
        ],
        H([0, 1], False),
        True,
    ),
    (
        "restricted admits a preferred hint",
        "restricted",
        [{"r1": [H([1], True), H([0, 1], False)]}],
        H([1], True),
        True,
    ),
    (
        "restricted rejects a non-preferred hint",
        "restricted",
        [{"r1": [H([0, 1], False)]}],
        H([0, 1], False),
        False,
    ),
    (
        "single-numa-node keeps only single-node preferred hints",
        "single-numa-node",
        [{"r1": [H([0], True), H([0, 1], False)]}],
        H([0], True),
        True,
    ),
    (
        "single-numa-node rejects when only multi-node hints exist",
        "single-numa-node",
        [{"r1": [H([0, 1], True)]}],
        H(None, False),
        False,
    ),
    (
        "single-numa-node admits providers without preference as any-NUMA",
        "single-numa-node",
        [{}, None],
        H(None, True),
        True,
    ),
    ("none policy never merges", "none", [{"r1": [H([1], True)]}], NO_AFFINITY, True),
]


@pytest.mark.parametrize(
    ("name", "policy", "hints", "expected", "admit_ok"),
    MERGE_CASES,
    ids=[c[0] for c in MERGE_CASES],
)
def test_merge(
    name: str, policy: str, hints: list[ProviderHints], expected: TopologyHint, admit_ok: bool
) -> None:
    nodes = 4 if "bestNonPreferred" in name or "steer" in name else 2
    merged, ok = new_policy(policy, machine(nodes))[0].merge(hints)
    assert (merged, ok) == (expected, admit_ok)


DISTANCES = [[10, 11, 12, 12], [11, 10, 12, 12], [12, 12, 10, 11], [12, 12, 11, 10]]


def test_prefer_closest_numa_nodes_uses_average_distance() -> None:
    hints: list[ProviderHints] = [{"r": [H([0, 2], True), H([2, 3], True)]}]
    narrow, _ = new_policy("best-effort", machine(4, DISTANCES))[0].merge(hints)
    assert narrow == H([0, 2], True)  # fewer bits tie -> lower integer mask
    close, _ = new_policy(
        "best-effort", machine(4, DISTANCES), {"prefer-closest-numa-nodes": "true"}
    )[0].merge(hints)
    assert close == H([2, 3], True)  # average distance 10.5 beats 11
    # single-numa-node ignores the option.
    single, _ = new_policy(
        "single-numa-node", machine(4, DISTANCES), {"prefer-closest-numa-nodes": "true"}
    )[0].merge([{"r": [H([3], True), H([1], True)]}])
    assert single == H([1], True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": "1"}, 'unknown Topology Manager Policy option: "bogus"'),
        (
            {"prefer-closest-numa-nodes": "yes"},
            'bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "yes": invalid syntax',
        ),
        (
            {"max-allowable-numa-nodes": "x"},
            'unable to convert policy option to integer "max-allowable-numa-nodes": strconv.Atoi: parsing "x": invalid syntax',
        ),
        (
            {"max-allowable-numa-nodes": "4"},
            'the minimum value of "max-allowable-numa-nodes" should not be less than 8',
        ),
    ],
)
def test_policy_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy_options(options)
    assert str(info.value) == message


def test_max_allowable_numa_nodes() -> None:
    opts, warnings = parse_policy_options({"max-allowable-numa-nodes": "16"})
    assert opts.max_allowable_numa_nodes == 16
    assert warnings
    with pytest.raises(ConfigError, match="unsupported on machines with more than 8 NUMA Nodes"):
        new_policy("restricted", machine(9))
    new_policy("none", machine(9))  # the none policy has no limit
    new_policy("restricted", machine(9), {"max-allowable-numa-nodes": "16"})


def test_prefer_closest_needs_distances() -> None:
    bare = Machine((NUMANode(0, 1 << 30), NUMANode(1, 1 << 30)))
    with pytest.raises(
        ConfigError, match="cannot discover NUMA topology: error getting NUMA distances"
    ):
        new_policy("best-effort", bare, {"prefer-closest-numa-nodes": "true"})


@dataclass
class FakeProvider:
    """Answers scripted hints per container (or for the pod) and records allocations."""

    hints: dict[str, ProviderHints] = field(default_factory=dict)
    fail_on: str | None = None
    allocated: list[tuple[str, TopologyHint]] = field(default_factory=list)

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints:
        return self.hints.get(container.name)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        return self.hints.get("")

    def allocate(self, pod: Pod, container: Container, affinity: TopologyHint) -> None:
        if container.name == self.fail_on:
            raise NumamemError("[memorymanager] failed to find the default preferred hint")
        self.allocated.append((container.name, affinity))


POD = Pod("p", init_containers=(Container("init"),), containers=(Container("a"), Container("b")))


def test_container_scope_merges_per_container_and_allocates_in_order() -> None:
    provider = FakeProvider({"init": {"memory": [H([1], True)]}, "a": {"memory": [H([0], True)]}})
    result = admit(POD, new_policy("restricted", machine(2))[0], "container", [provider])
    assert result.admitted
    assert result.affinities == {"init": H([1], True), "a": H([0], True), "b": H([0, 1], True)}
    assert [name for name, _ in provider.allocated] == ["init", "a", "b"]


def test_container_scope_rejects_at_the_first_unaligned_container() -> None:
    provider = FakeProvider({"a": {"memory": [H([0, 1], False)]}})
    result = admit(POD, new_policy("restricted", machine(2))[0], "container", [provider])
    assert (result.admitted, result.reason, result.message) == (
        False,
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    )
    assert [name for name, _ in provider.allocated] == ["init"]


def test_pod_scope_stores_one_hint_for_every_container() -> None:
    provider = FakeProvider({"": {"memory": [H([1], True), H([0, 1], False)]}})
    result = admit(POD, new_policy("single-numa-node", machine(2))[0], "pod", [provider])
    assert result.admitted
    assert set(result.affinities.values()) == {H([1], True)}
    assert len(provider.allocated) == 3


def test_allocate_error_is_unexpected_admission_error() -> None:
    provider = FakeProvider(fail_on="b")
    result = admit(POD, new_policy("best-effort", machine(2))[0], "container", [provider])
    assert not result.admitted
    assert result.reason == "UnexpectedAdmissionError"
    assert result.message == (
        "Allocate failed due to [memorymanager] failed to find the default preferred hint, which is unexpected"
    )


def test_none_policy_allocates_without_hints() -> None:
    provider = FakeProvider({"a": {"memory": []}})
    result = admit(POD, new_policy("none", machine(2))[0], "container", [provider])
    assert result.admitted
    assert all(a == NO_AFFINITY for _, a in provider.allocated)


def test_bitmask_iteration_order_and_bounds() -> None:
    pairs = list(bitmask.iterate_masks_with_bits([0, 1, 2]))
    assert [list(bits) for _, bits in pairs] == [
        [0],
        [1],
        [2],
        [0, 1],
        [0, 2],
        [1, 2],
        [0, 1, 2],
    ]
    assert all(bitmask.get_bits(mask) == list(bits) for mask, bits in pairs)
    assert [m for m, _ in bitmask.iterate_masks_with_bits([1, 5])] == [2, 32, 34]
    # Node ids are the kernel's and may be sparse and above 63 (POWER9 GPU nodes 250-255);
    # what kubelet's 64-bit masks limit is the node count (max-allowable-numa-nodes).
    assert bitmask.get_bits(bitmask.new_mask([0, 8, 250, 1023])) == [0, 8, 250, 1023]
    assert bitmask.is_narrower_than(bitmask.new_mask([0, 250]), bitmask.new_mask([8, 250]))
    with pytest.raises(NumamemError, match="must not be negative"):
        bitmask.new_mask([-1])
    assert bitmask.is_narrower_than(bitmask.new_mask([1]), bitmask.new_mask([0, 1]))
    assert bitmask.is_narrower_than(bitmask.new_mask([0, 1]), bitmask.new_mask([0, 2]))
