"""Issue 38, second review: a long list of short elements costs a Python object per element.

A cpulist is bounded in characters (``MAX_CPULIST_BYTES``) and elements
(``MAX_CPULIST_TOKENS``) and scanned without splitting it; a metacache entry's lists and
maps are bounded in elements (``MAX_ENTRY_ITEMS``) and a request's lists of entries
(``MAX_REQUEST_ENTRIES``), each counted before anything is copied. Checked on the memory
counted (tracemalloc's peak of Python allocations), never on time.
"""

from __future__ import annotations

import grpc
import pytest

from numamem.api.metacache_wire import MAX_ENTRY_ITEMS, MAX_REQUEST_ENTRIES
from numamem.cpuset import MAX_CPULIST_BYTES, MAX_CPULIST_TOKENS, MAX_CPUS, CPUSet
from numamem.errors import InvalidArgumentError
from numamem.testing.server import serve_in_process
from numamem.v1 import common_pb2
from numamem.v1 import metacache_pb2 as mc
from tests.unit.test_request_cost import _code, peak

ONES = ",".join(["1000"] * ((4 * 2**20 - 4096) // 5))
"""The review's request: 4 MiB naming one id (1.2 s and +145 MiB to parse)."""
ODD = ",".join(str(i) for i in range(1, MAX_CPUS, 2))
"""The most ranges a cpulist of CPU ids can hold (4,096), in order."""


def test_a_cpulist_longer_than_its_bound_is_refused_unread() -> None:
    refusals: list[str] = []

    def parse() -> None:
        try:
            CPUSet.parse(ONES)
        except InvalidArgumentError as err:
            refusals.append(str(err))

    assert peak(parse) < 16 * 1024  # main: +145 MiB, and the set {1000}
    assert refusals == [
        f"cpulist of {len(ONES)} characters, more than {MAX_CPULIST_BYTES} (MAX_CPULIST_BYTES, "
        "every CPU id of the largest machine written out)"
    ]
    within = ",".join(["1000"] * (MAX_CPULIST_BYTES // 5))
    assert str(CPUSet.parse(within)) == "1000"
    assert peak(lambda: CPUSet.parse(within)) < 16 * 1024  # main: 1.9 MB


def test_a_cpulist_of_more_elements_than_its_bound_is_refused() -> None:
    many = ",".join(["1"] * (MAX_CPULIST_TOKENS + 1))  # 32,769 characters: within the length
    with pytest.raises(InvalidArgumentError) as info:
        CPUSet.parse(many)
    assert (
        f"{MAX_CPULIST_TOKENS + 1} elements, more than {MAX_CPULIST_TOKENS} (MAX_CPULIST_TOKENS"
        in (str(info.value))
    )
    assert str(CPUSet.parse(",".join(["1"] * MAX_CPULIST_TOKENS))) == "1"


@pytest.mark.parametrize("text", [ODD, ",".join(reversed(ODD.split(",")))])
def test_the_most_ranges_a_cpulist_holds_cost_their_ranges(text: str) -> None:
    """In order, merged as they come: 16 bytes a range (main: a string and a tuple per
    token, 668 KB); out of order, one sort of tuples at the end."""
    got: list[CPUSet] = []
    spent = peak(lambda: got.append(CPUSet.parse(text)))
    assert got[0] == CPUSet(range(1, MAX_CPUS, 2)) and len(got[0].spans) == MAX_CPUS // 2
    assert spent < (200 * 1024 if text == ODD else 1024 * 1024)


def test_long_lists_and_maps_of_an_entry_are_refused_before_they_are_copied() -> None:
    """4 MiB of region names peaked at +92 MiB, 4 MiB of empty regions at +719 MiB, 4 MiB of
    NUMA keys at +87 MiB: each is refused by its count, naming the field and the bound."""
    many = [str(i) for i in range(MAX_ENTRY_ITEMS + 1)]
    too_many = MAX_REQUEST_ENTRIES + 1
    requests = [
        (
            "AddContainer",
            mc.AddContainerInfoRequest(
                pod_uid="p", container_name="c", info=mc.ContainerInfo(region_names=many)
            ),
            "info.region_names: the entry's lists and maps hold more than "
            f"{MAX_ENTRY_ITEMS} elements (MAX_ENTRY_ITEMS)",
        ),
        (
            "SetPoolInfo",
            mc.SetPoolInfoRequest(
                pool_name="p",
                info=mc.PoolInfo(topology_aware_assignments=dict.fromkeys(range(1025), "0")),
            ),
            "info.topology_aware_assignments: 1025 NUMA ids, more than 1024 (MAX_NUMA_NODES)",
        ),
        (
            "SetRegionInfo",
            mc.SetRegionInfoRequest(
                region_name="r",
                info=mc.RegionInfo(
                    pods={"a": mc.ContainerNames(container_names=many[:MAX_ENTRY_ITEMS])}
                ),
            ),
            "info.pods['a'].container_names: the entry's lists and maps hold more than",
        ),
        (
            "SetRegionEntries",
            mc.SetRegionEntriesRequest(entries={str(i): mc.RegionInfo() for i in range(too_many)}),
            f"entries: {too_many} elements, more than {MAX_REQUEST_ENTRIES} (MAX_REQUEST_ENTRIES)",
        ),
        (
            "DeleteContainers",
            mc.DeleteContainersRequest(
                keep=[common_pb2.ContainerRef(pod_uid=str(i)) for i in range(too_many)]
            ),
            f"keep: {too_many} elements, more than {MAX_REQUEST_ENTRIES} (MAX_REQUEST_ENTRIES)",
        ),
        (
            "GCPoolEntries",
            mc.GCPoolEntriesRequest(living_pool_names=[str(i) for i in range(too_many)]),
            f"living_pool_names: {too_many} elements, more than {MAX_REQUEST_ENTRIES}",
        ),
    ]
    with serve_in_process() as server:
        c = server.client
        for method, request, fragment in requests:
            rpc = getattr(c.writer, method)
            answers: list[tuple[grpc.StatusCode, str]] = []
            spent = peak(
                lambda rpc=rpc, r=request, a=answers: a.append(_code(lambda: c.call(rpc, r)))
            )
            code, details = answers[0]
            assert code == grpc.StatusCode.INVALID_ARGUMENT and fragment in details, details
            assert spent < 2**20, (method, spent)  # main: tens of MiB for the larger ones
        within = mc.ContainerInfo(
            pod_uid="p", container_name="c", region_names=many[:MAX_ENTRY_ITEMS]
        )
        c.add_container_info(within)
        assert len(c.get_container_info("p", "c").region_names) == MAX_ENTRY_ITEMS
