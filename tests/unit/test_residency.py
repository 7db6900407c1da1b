"""memory.numa_stat (both formats), cpuset node lists and the residency computation: pure, tables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.errors import CgroupFormatError
from numamem.metacache.metrics.numastat import V1_FORMAT, V2_FORMAT, parse_mems, parse_numa_stat
from numamem.metacache.metrics.residency import memory_types, residency

PAGE = 4096
PATH = "/cg/memory/kubepods/podp1/abc/memory.numa_stat"

# The v1 format as this machine's kernel writes it (6.18; two nodes here), and the v2 format
# (mm/memcontrol.c memory_numa_stat_show: name, then N<node>=<bytes>; no total column).
V1_TEXT = """total=18104 N0=18000 N1=104
file=1 N0=1 N1=0
anon=18103 N0=17999 N1=104
unevictable=0 N0=0 N1=0
hierarchical_total=18204 N0=18000 N1=204
hierarchical_file=1 N0=1 N1=0
hierarchical_anon=18203 N0=17999 N1=204
hierarchical_unevictable=0 N0=0 N1=0
"""
V2_TEXT = """anon N0=70000000 N1=3728000
file N0=405504 N1=4096
kernel_stack N0=16384 N1=16384
pagetables N0=176128 N1=0
sec_pagetables N0=0 N1=0
shmem N0=4096 N1=0
file_mapped N0=0 N1=0
anon_thp N0=0 N1=0
slab_reclaimable N0=21024 N1=0
slab_unreclaimable N0=50000 N1=11576
workingset_refault_anon N0=12 N1=0
workingset_nodereclaim N0=3 N1=0
"""


def test_v1_is_pages_times_the_page_size_per_line() -> None:
    stat = parse_numa_stat(V1_TEXT, PATH, PAGE)
    assert stat.format == V1_FORMAT
    assert stat.line("total") == {0: 18000 * PAGE, 1: 104 * PAGE}
    assert stat.line("hierarchical_anon") == {0: 17999 * PAGE, 1: 204 * PAGE}
    assert stat.line("no_such_line") == {}


def test_v2_is_bytes_and_keeps_every_line() -> None:
    stat = parse_numa_stat(V2_TEXT, PATH, PAGE)
    assert stat.format == V2_FORMAT
    assert stat.line("anon") == {0: 70000000, 1: 3728000}
    assert stat.line("workingset_refault_anon") == {0: 12, 1: 0}
    assert len(stat.lines) == 12


def test_v1_types_prefer_the_hierarchical_lines() -> None:
    types = memory_types(parse_numa_stat(V1_TEXT, PATH, PAGE))
    assert types == {
        "total": {0: 18000 * PAGE, 1: 204 * PAGE},
        "file": {0: PAGE, 1: 0},
        "anon": {0: 17999 * PAGE, 1: 204 * PAGE},
        "unevictable": {0: 0, 1: 0},
    }
    plain = "\n".join(line for line in V1_TEXT.splitlines() if not line.startswith("hier"))
    assert memory_types(parse_numa_stat(plain, PATH, PAGE))["total"] == {
        0: 18000 * PAGE,
        1: 104 * PAGE,
    }


def test_v2_types_drop_event_counters_and_total_is_anon_plus_file() -> None:
    types = memory_types(parse_numa_stat(V2_TEXT, PATH, PAGE))
    assert not any(name.startswith("workingset_") for name in types)
    assert types["total"] == {0: 70000000 + 405504, 1: 3728000 + 4096}
    assert types["kernel_stack"] == {0: 16384, 1: 16384}
    assert types["shmem"][0] == 4096


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("total=1 N0=x\n", r"line 1 'total=1 N0=x': 'N0=x' is not N<node>=<value>"),
        ("anon N0=1\nfile=2 N0=2\n", r"line 2 'file=2 N0=2': a v1 line in a v2-format file"),
        ("total=1 N0=1\nanon N0=1\n", r"line 2 'anon N0=1': a v2 line in a v1-format file"),
        ("total=abc N0=1\n", r"total 'abc' is not a whole number"),
        ("anon N0=1 N0=2\n", r"node 0 is listed twice"),
        ("anon N0=1\n\nanon N1=2\n", r"line 3 'anon N1=2': 'anon' is listed twice"),
        ("anon N0=-1\n", r"'N0=-1' is not N<node>=<value>"),
        ("anon N0=18446744073709551616\n", r"is not N<node>=<value>"),
        ("total=1 N0=4503599627370496\n", r"is 2\^64 bytes or more"),
        ("anon N99999999=1\n", r"node 99999999 is out of range"),
        ("Anon N0=1\n", r"'Anon' is not a statistic name"),
        ("anon N0=1 garbage\n", r"'garbage' is not N<node>=<value>"),
        ("anon N0=١\n", r"is not N<node>=<value>"),
        ("".join(f"l{i} N0=1\n" for i in range(300)), r"more than 256 lines"),
    ],
)
def test_malformed_lines_name_the_file_and_line(text: str, why: str) -> None:
    with pytest.raises(CgroupFormatError, match=rf"^{PATH}: .*{why}"):
        parse_numa_stat(text, PATH, PAGE)


def test_blank_lines_and_an_empty_file() -> None:
    assert parse_numa_stat("\n\nanon N0=5\n\n", PATH, PAGE).lines == {"anon": {0: 5}}
    assert parse_numa_stat("", PATH, PAGE).lines == {}


@pytest.mark.parametrize(
    ("text", "nodes"),
    [("0\n", {0}), ("0-2,5\n", {0, 1, 2, 5}), ("\n", set()), ("", set()), ("1,0", {0, 1})],
)
def test_mems(text: str, nodes: set[int]) -> None:
    assert parse_mems(text, "/cg/cpuset.mems") == nodes


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "0,,1", "-1"])
def test_malformed_mems_name_the_file(text: str) -> None:
    with pytest.raises(CgroupFormatError, match=r"^/cg/cpuset.mems: invalid cpulist"):
        parse_mems(text, "/cg/cpuset.mems")


MI = 1 << 20


def v2(nodes: dict[int, tuple[int, int]]) -> str:
    anon = " ".join(f"N{n}={a}" for n, (a, _) in nodes.items())
    file = " ".join(f"N{n}={f}" for n, (_, f) in nodes.items())
    return f"anon {anon}\nfile {file}\n"


@pytest.mark.parametrize(
    ("assigned", "nodes", "enforced", "outside", "share", "matches"),
    [
        # all on the assigned node; cpuset as assigned
        ({0}, {0: (100 * MI, 28 * MI), 1: (0, 0)}, {0}, 0, 0.0, True),
        # a quarter on node 1 (pages touched before cpuset.mems was applied)
        ({0}, {0: (64 * MI, 32 * MI), 1: (32 * MI, 0)}, {0}, 32 * MI, 0.25, True),
        # a two-node group; node 2 holds page cache read by another container first
        ({0, 1}, {0: (10 * MI, 0), 1: (10 * MI, 0), 2: (0, 20 * MI)}, {0, 1}, 20 * MI, 0.5, True),
        # cpuset.mems widened behind the memory manager's back
        ({1}, {0: (MI, 0), 1: (3 * MI, 0)}, {0, 1}, MI, 0.25, False),
        # empty cpuset.mems (a v1 cpuset without tasks)
        ({0}, {0: (MI, 0)}, set(), 0, 0.0, False),
        # no cpuset controller: unknown
        ({0}, {0: (MI, 0), 1: (MI, 0)}, None, MI, 0.5, None),
        # no memory at all: share 0, not NaN
        ({0}, {0: (0, 0), 1: (0, 0)}, {0}, 0, 0.0, True),
    ],
)
def test_residency(
    assigned: set[int],
    nodes: dict[int, tuple[int, int]],
    enforced: set[int] | None,
    outside: int,
    share: float,
    matches: bool | None,
) -> None:
    res = residency(
        frozenset(assigned),
        parse_numa_stat(v2(nodes), PATH, PAGE),
        None if enforced is None else frozenset(enforced),
    )
    assert res.outside_bytes == outside
    assert res.outside_share == share
    assert res.cpuset_matches is matches
    assert res.total_bytes == sum(a + f for a, f in nodes.values())
    assert list(res.nodes) == sorted(nodes)
    assert {n: t["total"] for n, t in res.nodes.items()} == {
        n: a + f for n, (a, f) in nodes.items()
    }


def test_v1_residency_counts_the_hierarchical_total() -> None:
    res = residency(frozenset({0}), parse_numa_stat(V1_TEXT, PATH, PAGE), frozenset({0}))
    assert res.outside_bytes == 204 * PAGE
    assert res.total_bytes == 18204 * PAGE
    assert res.nodes[1] == {"anon": 204 * PAGE, "file": 0, "total": 204 * PAGE, "unevictable": 0}


SIZES = st.integers(0, 1 << 50)


@given(
    st.dictionaries(st.integers(0, 63), st.tuples(SIZES, SIZES), min_size=1, max_size=8),
    st.frozensets(st.integers(0, 63), min_size=1, max_size=4),
)
def test_outside_and_inside_add_up(
    nodes: dict[int, tuple[int, int]], assigned: frozenset[int]
) -> None:
    res = residency(assigned, parse_numa_stat(v2(nodes), PATH, PAGE), None)
    inside = sum(t["total"] for n, t in res.nodes.items() if n in assigned)
    assert inside + res.outside_bytes == res.total_bytes
    assert 0.0 <= res.outside_share <= 1.0
    assert (res.outside_bytes == 0) == all(
        a + f == 0 for n, (a, f) in nodes.items() if n not in assigned
    )


# --- finding 4 of the issue-29 review: huge pages are in the residency ---


def test_hugetlb_pages_are_types_of_their_own_and_in_the_total() -> None:
    stat = parse_numa_stat(V2_TEXT, PATH, PAGE)
    huge = {"2MB": {0: 0, 1: 1 << 30}, "1GB": {0: 2 << 30, 1: 0}}
    res = residency(frozenset({0}), stat, frozenset({0}), huge)
    assert res.nodes[0]["hugetlb_1GB"] == 2 << 30 and res.nodes[1]["hugetlb_2MB"] == 1 << 30
    assert res.nodes[0]["total"] == 70000000 + 405504 + (2 << 30)
    assert res.nodes[1]["total"] == 3728000 + 4096 + (1 << 30)
    assert res.outside_bytes == 3728000 + 4096 + (1 << 30)
    plain = residency(frozenset({0}), stat, frozenset({0}))
    assert res.total_bytes == plain.total_bytes + (3 << 30)


def test_v1_hugetlb_pages_add_to_the_lru_total() -> None:
    stat = parse_numa_stat(V1_TEXT, PATH, PAGE)
    types = memory_types(stat, {"2MB": {0: 4 << 20, 1: 0, 2: 2 << 20}})
    assert types["total"] == {0: 18000 * PAGE + (4 << 20), 1: 204 * PAGE, 2: 2 << 20}
    assert types["hugetlb_2MB"] == {0: 4 << 20, 1: 0, 2: 2 << 20}


def test_the_memcg_hugetlb_line_counts_only_without_the_controllers_figures() -> None:
    """v2 with memory_hugetlb_accounting: memory.numa_stat's ``hugetlb`` line holds the same
    pages as the hugetlb controller's files: one of them is added, never both."""
    stat = parse_numa_stat(V2_TEXT + "hugetlb N0=0 N1=2097152\n", PATH, PAGE)
    alone = memory_types(stat)
    assert alone["total"] == {0: 70000000 + 405504, 1: 3728000 + 4096 + 2097152}
    both = memory_types(stat, {"2MB": {0: 0, 1: 2097152}})
    assert both["total"] == alone["total"]
    assert both["hugetlb"] == both["hugetlb_2MB"] == {0: 0, 1: 2097152}
