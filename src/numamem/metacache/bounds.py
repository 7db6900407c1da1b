"""Restored entries the API would refuse today (issue 38), for the restore's warning.

A daemon before ``cpuset.MAX_CPUS`` and ``cpuset.MAX_NUMA_NODES`` accepted CPU and
NUMA ids up to 2^20 (any NUMA key >= 0) and wrote them to ``sys_advisor_state`` and its
journal. Such an entry restores as it was, as ranges (in time proportional to its
text, however many ids it names): dropping it would make memory differ from what the
files hold, and refusing it would stop the daemon from starting over data it once
acknowledged. Reads return it unchanged; a delete or GC removes it; a write that
sets an assignment or ``binding_numas`` anew meets the API's bounds. The restore logs
one warning naming such entries (:func:`warn_beyond_api_bounds`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from numamem.cpuset import MAX_CPUS, MAX_NUMA_NODES, CPUSet
from numamem.errors import quote
from numamem.logging import get_logger
from numamem.metacache.state import State
from numamem.metacache.types import TopologyAwareAssignment

_log = get_logger("metacache")

MAX_REPORTED = 10
"""At most this many entries are named (the count says how many there are)."""


def beyond_api_bounds(state: State) -> tuple[list[str], int]:
    """Up to :data:`MAX_REPORTED` descriptions of entries with a CPU id >= ``MAX_CPUS`` or
    a NUMA id >= ``MAX_NUMA_NODES``, and how many entries there are in all. Costs the
    ranges of the state's cpusets, never their ids."""
    named: list[str] = []
    total = 0
    for what in _offending(state):
        total += 1
        if len(named) < MAX_REPORTED:
            named.append(what)
    return named, total


def warn_beyond_api_bounds(state: State, state_dir: str | Path) -> None:
    """Log one warning naming the entries of :func:`beyond_api_bounds`, if there are any."""
    named, count = beyond_api_bounds(state)
    if count:
        _log.warning(
            f"metacache: restored entries name CPU ids >= {MAX_CPUS} or NUMA ids >= "
            f"{MAX_NUMA_NODES}, which a write may not (an older numamem wrote them); kept as "
            "they are: delete or rewrite them",
            count=count,
            state_dir=str(state_dir),
            entries=named,
        )


def _offending(state: State) -> Iterator[str]:
    for uid, containers in state.pods.items():
        for name, info in containers.items():
            where = f"container {quote(uid)}/{quote(name)}"
            yield from _assignments(
                where, "topology_aware_assignments", info.topology_aware_assignments
            )
            yield from _assignments(
                where,
                "original_topology_aware_assignments",
                info.original_topology_aware_assignments,
            )
    for pool_name, pool in state.pools.items():
        where = f"pool {quote(pool_name)}"
        yield from _assignments(
            where, "topology_aware_assignments", pool.topology_aware_assignments
        )
        yield from _assignments(
            where, "original_topology_aware_assignments", pool.original_topology_aware_assignments
        )
    for region_name, region in state.regions.items():
        if _beyond(region.binding_numas, MAX_NUMA_NODES):
            yield f"region {quote(region_name)} binding_numas {quote(str(region.binding_numas))}"


def _assignments(where: str, field: str, value: TopologyAwareAssignment) -> Iterator[str]:
    for numa, cpus in value.items():
        if not 0 <= numa < MAX_NUMA_NODES or _beyond(cpus, MAX_CPUS):
            yield f"{where} {field}[{numa}] {quote(str(cpus))}"


def _beyond(ids: CPUSet, limit: int) -> bool:
    last = ids.last()
    return last is not None and last >= limit
