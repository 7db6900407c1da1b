"""Issue 38: a short input must not name a large amount of work.

A cpulist is kept as ranges and bounded by Linux's largest machine (``MAX_CPUS``,
``MAX_NUMA_NODES``); restore reads what older daemons wrote as ranges; quantities
keep their exponents to ``MAX_EXPONENT``. "Costs its text, not its ids" is checked on
the memory counted (tracemalloc's peak of Python allocations), never on wall time.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from numamem.cpuset import MAX_CPUS, MAX_NUMA_NODES, STORED_ID_LIMIT, CPUSet, format_cpulist
from numamem.errors import CheckpointError, ConfigError, InvalidArgumentError, QuantityError
from numamem.memorymanager.policy.options import parse_options
from numamem.memorymanager.state.drift import DRIFT_OPTION
from numamem.metacache import journal
from numamem.metacache.bounds import MAX_REPORTED, beyond_api_bounds
from numamem.metacache.cache import State
from numamem.metacache.persistence import STATE_FILE, encode
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo
from numamem.quantity import MAX_EXPONENT, _remove_factors, format_bytes, parse_quantity
from numamem.testing.server import serve_in_process
from numamem.v1 import metacache_pb2 as mc

HUGE = "0-1048576"
"""The issue's cpulist: 2^20 + 1 ids in 9 bytes (every older numamem accepted it)."""
SMALL_PEAK = 256 * 1024
"""What parsing, storing or restoring a few short cpulists may allocate at its peak (the
issue's 20 keys allocated 1.3 GiB)."""


def peak(work: Callable[[], object]) -> int:
    """The peak of Python allocations while ``work`` runs (every thread's), in bytes."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()


# --- CPUSet: ranges, the same set semantics ---------------------------------------------------


def _naive_canonical(ids: set[int]) -> str:
    ordered, parts, i = sorted(ids), [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


_spans = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 12)).map(lambda s: (s[0], s[0] + s[1])),
    max_size=12,
)


@given(_spans, _spans, st.lists(st.integers(-2, 230), max_size=20))
def test_a_cpuset_of_ranges_is_the_set_of_its_ids(
    left: list[tuple[int, int]], right: list[tuple[int, int]], probes: list[int]
) -> None:
    """Parse (tokens in any order, overlapping, adjacent), len, in, iter, str, ==, hash and
    union agree with a set of ids."""
    text = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in left)
    ids = {i for lo, hi in left for i in range(lo, hi + 1)}
    others = {i for lo, hi in right for i in range(lo, hi + 1)}
    got = CPUSet.parse(text)
    assert list(got) == sorted(ids)
    assert len(got) == len(ids) and bool(got) == bool(ids)
    assert str(got) == _naive_canonical(ids) == format_cpulist(ids)
    assert all((p in got) == (p in ids) for p in probes)
    assert got == CPUSet(ids) and hash(got) == hash(CPUSet(ids))
    assert got == CPUSet.parse(str(got))  # canonical text reads back the same
    union = got.union(CPUSet(others))
    assert list(union) == sorted(ids | others) and len(union) == len(ids | others)
    assert (got == CPUSet(others)) == (ids == others)
    assert got.last() == (max(ids) if ids else None)


def test_a_range_costs_its_text_not_its_ids() -> None:
    """Every older numamem put each id of a range in a set: 2^20 ids for 9 bytes (~40 MiB)."""

    def use() -> None:
        cpus = CPUSet.parse(HUGE, STORED_ID_LIMIT)
        assert len(cpus) == (1 << 20) + 1 and str(cpus) == HUGE
        assert 1 << 20 in cpus and (1 << 20) + 1 not in cpus
        assert cpus.union(CPUSet.parse("5-2000000", 1 << 21)) == CPUSet.parse("0-2000000", 1 << 21)
        assert hash(cpus) == hash(CPUSet.parse("0-1048576", STORED_ID_LIMIT))

    assert peak(use) < 16 * 1024


@pytest.mark.parametrize(
    ("text", "limit", "what", "refusal"),
    [
        ("0-8192", MAX_CPUS, "CPU", "CPU id 8192 is not below 8192 (MAX_CPUS"),
        ("0,8191-9000", MAX_CPUS, "CPU", "CPU id 9000 is not below 8192"),
        (HUGE, MAX_CPUS, "CPU", "CPU id 1048576 is not below 8192 (MAX_CPUS, Linux's largest"),
        ("1024", MAX_NUMA_NODES, "NUMA node", "NUMA node id 1024 is not below 1024 (MAX_NUMA"),
        ("0-1048577", STORED_ID_LIMIT, "CPU", "is not below 1048577 (STORED_ID_LIMIT"),
        ("9" * 40, MAX_CPUS, "CPU", "is not below 8192"),
    ],
)
def test_ids_beyond_any_linux_machine_are_refused_naming_the_bound(
    text: str, limit: int, what: str, refusal: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        CPUSet.parse(text, limit, what)
    assert refusal in str(info.value)


def test_the_largest_linux_machine_still_fits() -> None:
    assert len(CPUSet.parse("0-8191")) == MAX_CPUS
    assert len(CPUSet.parse("0-1023", MAX_NUMA_NODES, "NUMA node")) == MAX_NUMA_NODES


# --- the API: refused before anything is expanded or stored -----------------------------------


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details() or ""


def test_the_issues_request_is_refused_naming_the_field_and_the_bound() -> None:
    """20 keys of ``0-1048576`` (309 bytes) took 9.5 s of CPU and 1.3 GiB; now an
    INVALID_ARGUMENT that allocates next to nothing, for every field that holds a cpulist."""
    with serve_in_process() as server:
        c = server.client
        pool = mc.PoolInfo(pool_name="p", topology_aware_assignments=dict.fromkeys(range(20), HUGE))
        answers: list[tuple[grpc.StatusCode, str]] = []
        spent = peak(lambda: answers.append(_code(lambda: c.set_pool_info(pool))))
        assert spent < SMALL_PEAK
        code, details = answers[0]
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "info.topology_aware_assignments[" in details
        assert "CPU id 1048576 is not below 8192 (MAX_CPUS" in details
        refusals = [
            (
                lambda: c.add_container_info(
                    mc.ContainerInfo(
                        pod_uid="p",
                        container_name="c",
                        original_topology_aware_assignments={0: HUGE},
                    )
                ),
                "info.original_topology_aware_assignments[0]: invalid cpulist '0-1048576'",
            ),
            (
                lambda: c.set_region_info(mc.RegionInfo(region_name="r", binding_numas="0-1024")),
                "info.binding_numas: invalid cpulist '0-1024': NUMA node id 1024 is not below "
                "1024 (MAX_NUMA_NODES",
            ),
            (
                lambda: c.set_pool_info(
                    mc.PoolInfo(pool_name="p", topology_aware_assignments={1024: "0"})
                ),
                "info.topology_aware_assignments[1024]: NUMA id must be in [0, 1024)",
            ),
        ]
        for call, fragment in refusals:
            code, details = _code(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and fragment in details, details
        assert list(c.list_pools()) == [] and list(c.list_regions()) == []


def test_the_largest_valid_cpulists_are_stored_as_ranges() -> None:
    with serve_in_process() as server:
        c = server.client
        keys = dict.fromkeys(range(MAX_NUMA_NODES), "0-8191")
        spent = peak(
            lambda: c.set_pool_info(mc.PoolInfo(pool_name="p", topology_aware_assignments=keys))
        )
        assert spent < 8 * 1024 * 1024  # 1024 keys; 8 Mi ids as a set would be ~500 MiB
        assert c.get_pool_size("p") == MAX_NUMA_NODES * MAX_CPUS
        c.set_region_info(mc.RegionInfo(region_name="r", binding_numas="0-1023"))
        assert c.get_region_info("r").binding_numas == "0-1023"


# --- restore: what an older daemon wrote ------------------------------------------------------


def _old_state() -> State:
    """What a daemon before the bounds accepted and wrote: ids up to 2^20, any NUMA key."""
    huge = CPUSet.parse(HUGE, STORED_ID_LIMIT)
    assignments = dict.fromkeys(range(20), huge)
    return State(
        {
            "u": {
                "c": ContainerInfo("u", container_name="c", topology_aware_assignments={5000: huge})
            }
        },
        {"p": PoolInfo("p", assignments, {0: CPUSet.parse("0-3")})},
        {"r": RegionInfo("r", binding_numas=huge)},
    )


def test_a_restore_reads_an_older_daemons_entries_as_ranges(tmp_path: Path) -> None:
    """Older daemons restored the issue's pool in 4.5-5 s and 1.3 GiB (a crash loop under a
    memory limit). The entries come back as they were, allocating what their text needs."""
    old = _old_state()
    snapshot = encode(old, generation=0)
    restored: list[journal.Restored | None] = []
    spent = peak(lambda: restored.append(journal.restore(snapshot, None, tmp_path / "j")))
    assert spent < SMALL_PEAK
    got = restored[0]
    assert got is not None and got.state == old
    named, count = beyond_api_bounds(got.state)
    assert count == 22  # 20 pool keys, the container's key 5000, the region
    assert len(named) == MAX_REPORTED
    assert "container 'u'/'c' topology_aware_assignments[5000] '0-1048576'" in named


def test_a_daemon_starts_on_such_entries_and_says_which_they_are(tmp_path: Path) -> None:
    """The entries stay (memory equals the files), reads return them, a write of one meets
    the bounds, a delete removes it, and the start logs one warning naming them."""
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / STATE_FILE).write_bytes(encode(_old_state(), generation=0))
    with capture_logs() as logs, serve_in_process(root=tmp_path) as server:
        c = server.client
        assert c.get_pool_info("p").topology_aware_assignments[3] == HUGE
        assert c.get_pool_size("p") == 20 * ((1 << 20) + 1)  # the current assignments
        code, details = _code(lambda: c.set_pool_info(c.get_pool_info("p")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "8192 (MAX_CPUS" in details
        c.delete_pool("p")
        assert [p.pool_name for p in c.list_pools()] == []
    [warning] = [e for e in logs if "a write may not" in e["event"]]
    assert warning["log_level"] == "warning" and warning["count"] == 22
    assert "container 'u'/'c' topology_aware_assignments[5000] '0-1048576'" in warning["entries"]


def test_ids_no_numamem_ever_accepted_still_refuse_a_restore(tmp_path: Path) -> None:
    beyond = CPUSet.parse("0-1048577", STORED_ID_LIMIT + 1)
    snapshot = encode(State(regions={"r": RegionInfo("r", binding_numas=beyond)}), generation=0)
    with pytest.raises(CheckpointError, match=r"1048577 \(STORED_ID_LIMIT"):
        journal.restore(snapshot, None, tmp_path / "j")


# --- quantities -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1e1000000", "1e1001", "1e-1001", "5E+99999"])
def test_a_quantitys_exponent_is_bounded(text: str) -> None:
    """``1e10000`` took 0.18 s to print (1e10000 + 1 raised ValueError: 10009 digits)."""
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert f"at most ±{MAX_EXPONENT}" in str(info.value)


def test_the_largest_quantities_print_and_add() -> None:
    big = parse_quantity("9" * 995 + "e1000")
    total = big
    for _ in range(1000):
        total = total.add(big).add(parse_quantity("1n"))
    assert len(str(total)) < 4300 and str(parse_quantity("1e1000")) == "10e999"


@given(st.integers(0, 10**40), st.integers(0, 3000), st.sampled_from([10, 1024]))
def test_removing_factors_is_exact(rest: int, times: int, base: int) -> None:
    value = rest * base**times
    got, count = _remove_factors(value, base)
    assert got * base**count == value
    assert value == 0 or got % base != 0


def test_a_drift_tolerance_past_int64_is_refused_and_huge_sizes_print() -> None:
    """memory-drift-tolerance=1000...0001 (402 digits) crashed the start: format_bytes
    divided it as a float (OverflowError, a traceback)."""
    with pytest.raises(ConfigError, match=r"is 2\^63 bytes or more"):
        parse_options({DRIFT_OPTION: "1" + "0" * 400 + "1"})
    assert parse_options({DRIFT_OPTION: str((1 << 63) - 1)}).drift_bytes == (1 << 63) - 1
    assert format_bytes(10**400 + (1 << 39)).endswith(".50Ti")
    assert format_bytes(3 * 2**40 + 2**39) == "3.50Ti"
