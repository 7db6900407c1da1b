"""Residency: the memory manager's assignments joined with the cgroups' NUMA placement.

The memory manager and the metacache never import each other; this module
wires them. :class:`ResidencyView`

* gives the metrics collector's placement sampling its targets (every
  container with blocks and a runtime id, from one committed version of the
  manager) and runs it on the collector's thread, once per round
  (:meth:`ResidencyView.sample`, added to ``Collector.rounds``): nothing here
  runs on the admission path. With ``--enforce-cpuset-mems`` the sampler asks
  :meth:`ResidencyView.committed_nodes` (the then current committed version)
  just before each write and skips one whose target changed since the round began;
* answers ``MemoryManager.GetResidency``, the residency part of ``Explain``
  and the Prometheus gauges (:class:`ResidencyMetrics`) from the last round, joined with the manager's
  current committed version: a container pinned, re-pinned or given a new id
  since that round is ``RESIDENCY_PENDING``, one released since is left out,
  one without a runtime id is ``RESIDENCY_NO_CONTAINER_ID``.

Names (namespace/name) come from the memory manager's recorded pod names
(``--podresources-socket``), else from the metacache's ContainerInfo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from numamem.api.validation import check_string
from numamem.errors import InvalidArgumentError, NotFoundError, quote
from numamem.memorymanager.manager.versions import Committed
from numamem.memorymanager.manager.writes import Manager
from numamem.metacache.cache import MetaCache
from numamem.metacache.metrics import enforcement
from numamem.metacache.metrics import placement as pl
from numamem.metacache.metrics.residency import HUGETLB_PREFIX, Residency
from numamem.v1 import memorymanager_pb2 as mm

_STATUS = {
    pl.MEASURED: mm.RESIDENCY_MEASURED,
    pl.NO_CGROUP: mm.RESIDENCY_NO_CGROUP,
    pl.NO_NUMA_STAT: mm.RESIDENCY_NO_NUMA_STAT,
    pl.UNREADABLE: mm.RESIDENCY_UNREADABLE,
}


_ENFORCEMENT = {
    "": mm.CPUSET_ENFORCEMENT_UNSPECIFIED,
    enforcement.CONTESTED: mm.CPUSET_ENFORCEMENT_CONTESTED,
    enforcement.PARENT_DISALLOWS: mm.CPUSET_ENFORCEMENT_PARENT_DISALLOWS,
    enforcement.STOPPED: mm.CPUSET_ENFORCEMENT_STOPPED,
}
ENFORCEMENT_REASONS = {
    enforcement.CONTESTED: "contested",
    enforcement.PARENT_DISALLOWS: "parent_disallows",
    enforcement.STOPPED: "stopped",
}
"""The ``reason`` label of ``numamem_container_cpuset_mems_not_enforced``."""


@dataclass(frozen=True)
class ResidencyEntry:
    """One pinned container as reported: its current target, names, and what the last
    round measured for exactly that target (None: pending or no id)."""

    target: pl.PlacementTarget
    namespace: str
    pod_name: str
    placement: pl.Placement | None
    time_ns: int
    mode: str

    @property
    def status(self) -> int:
        if self.placement is not None:
            return _STATUS[self.placement.status]
        return mm.RESIDENCY_PENDING if self.target.container_ids else mm.RESIDENCY_NO_CONTAINER_ID


def pinned_targets(committed: Committed) -> list[pl.PlacementTarget]:
    """Every container with blocks in ``committed``, by (pod uid, name), with its runtime
    ids newest first (a restarted container has its new id added last)."""
    ids: dict[tuple[str, str], list[str]] = {}
    for cid, ref in committed.containers.items():
        ids.setdefault(ref, []).append(cid)  # oldest first: reversed below (no O(n^2) insert)
    targets = []
    for pod_uid, containers in committed.view.pods():
        for name, blocks in containers.items():
            nodes = frozenset(n for b in blocks for n in b.numa_affinity or ())
            if nodes:
                newest_first = tuple(reversed(ids.get((pod_uid, name), ())))
                targets.append(pl.PlacementTarget(pod_uid, name, newest_first, nodes))
    return sorted(targets, key=lambda t: t.key)


class ResidencyView:
    """See the module docstring. Thread-safe: the sampler publishes whole rounds."""

    def __init__(
        self,
        manager: Callable[[], Manager],
        cache: Callable[[], MetaCache],
        root: str | Path,
        *,
        enforce: bool = False,
        page_size: int | None = None,
    ) -> None:
        self._manager = manager
        self._cache = cache
        self.sampler = pl.PlacementSampler(
            root, enforce=enforce, page_size=page_size, committed=self.committed_nodes
        )

    def sample(self, now: int) -> int:
        """One placement round (the collector's thread); returns the unreadable count."""
        targets = [t for t in pinned_targets(self._manager().committed()) if t.container_ids]
        return self.sampler.sample(targets, now)

    def committed_nodes(self, pod_uid: str, container_name: str) -> frozenset[int]:
        """The nodes the manager's current committed version assigns the container (empty:
        not pinned): the port the sampler asks just before each ``cpuset.mems`` write, so
        that a round never writes an assignment a resize or a release replaced meanwhile.
        Reads the committed version: takes no lock."""
        blocks = self._manager().committed().view.get_memory_blocks(pod_uid, container_name)
        return frozenset(n for b in blocks or () for n in b.numa_affinity or ())

    def entries(self, pod_uid: str = "", container_name: str = "") -> list[ResidencyEntry]:
        """The pinned containers selected (see ``GetResidencyRequest``); raises NotFoundError."""
        if container_name and not pod_uid:
            raise InvalidArgumentError("pod_uid: must not be empty when container_name is given")
        committed = self._manager().committed()
        targets = [
            t
            for t in pinned_targets(committed)
            if (not pod_uid or t.pod_uid == pod_uid)
            and (not container_name or t.container_name == container_name)
        ]
        if not targets and container_name:
            raise NotFoundError(
                f"container {quote(container_name)} of pod {quote(pod_uid)} is not pinned by the memory "
                "manager (it has no memory blocks)"
            )
        if not targets and pod_uid:
            raise NotFoundError(
                f"pod {quote(pod_uid)} has no container pinned by the memory manager"
            )
        last = self.sampler.last
        round_time, mode = (last.time_ns, last.mode) if last is not None else (0, "")
        measured = last.placements if last is not None else {}
        names = self._names(committed.names)
        out = []
        for target in targets:
            found = measured.get(target.key)
            same = found is not None and found.target == target
            ns, name = names(target.pod_uid, target.container_name)
            out.append(ResidencyEntry(target, ns, name, found if same else None, round_time, mode))
        return out

    def _names(
        self, recorded: Mapping[str, tuple[str, str]]
    ) -> Callable[[str, str], tuple[str, str]]:
        pods = self._cache().state().pods

        def names(pod_uid: str, container_name: str) -> tuple[str, str]:
            if pod_uid in recorded:
                return recorded[pod_uid]
            infos = pods.get(pod_uid, {})
            for info in (infos.get(container_name), *infos.values()):
                if info is not None and (info.pod_namespace or info.pod_name):
                    return info.pod_namespace, info.pod_name
            return "", ""

        return names

    def get(self, pod_uid: str, container_name: str) -> Iterator[mm.ContainerResidency]:
        """``GetResidency``: validated selection, one message per container."""
        check_string(pod_uid, "pod_uid", required=False)
        check_string(container_name, "container_name", required=False)
        for entry in self.entries(pod_uid, container_name):
            yield residency_to_proto(entry)

    def for_pod(self, pod_uid: str) -> list[mm.ContainerResidency]:
        """``Explain``'s residency: the pod's pinned containers, totals only (may be none)."""
        try:
            entries = self.entries(pod_uid)
        except NotFoundError:
            return []
        return [residency_to_proto(e, types=False) for e in entries]


def residency_to_proto(entry: ResidencyEntry, *, types: bool = True) -> mm.ContainerResidency:
    target, found = entry.target, entry.placement
    msg = mm.ContainerResidency(
        pod_uid=target.pod_uid,
        container_name=target.container_name,
        pod_namespace=entry.namespace,
        pod_name=entry.pod_name,
        status=entry.status,  # type: ignore[arg-type]
        assigned_numa_nodes=sorted(target.assigned),
    )
    if found is None:
        msg.message = (
            "pinned since the last collector round: measured in the next one"
            if target.container_ids
            else "no runtime id is known (AddContainer): its cgroup cannot be found"
        )
        return msg
    msg.message = found.message
    msg.container_id = found.container_id
    msg.cgroup = found.cgroup
    msg.cgroup_mode = entry.mode
    res = found.residency
    if res is None:
        return msg
    msg.sampled_at.CopyFrom(_timestamp(entry.time_ns))
    for node, per_type in res.nodes.items():
        msg.nodes.add(
            node=node,
            assigned=node in target.assigned,
            bytes=per_type["total"],
            types=per_type if types else {},
        )
    msg.total_bytes = res.total_bytes
    msg.outside_bytes = res.outside_bytes
    msg.outside_share = res.outside_share
    msg.cpuset_mems_state = (
        mm.CPUSET_MEMS_UNKNOWN
        if res.cpuset_matches is None
        else mm.CPUSET_MEMS_MATCHES
        if res.cpuset_matches
        else mm.CPUSET_MEMS_DIFFERS
    )
    msg.cpuset_mems.extend(sorted(res.enforced or ()))
    if found.write is not None:
        w = found.write
        msg.cpuset_write.CopyFrom(
            mm.CpusetWrite(
                file=w.path,
                before=sorted(w.before),
                written=sorted(w.written),
                after=sorted(w.after or ()),
                memory_migrate_enabled=w.migrate_enabled,
                error=w.error,
                time=_timestamp(w.time_ns),
                written_back=w.written_back,
            )
        )
    msg.cpuset_enforcement = _ENFORCEMENT[found.enforcement]
    msg.cpuset_enforcement_message = found.enforcement_message
    return msg


def _timestamp(time_ns: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(time_ns)
    return stamp


def measured(entries: Sequence[ResidencyEntry]) -> Iterator[tuple[ResidencyEntry, Residency]]:
    """The entries the last round measured, with their residency (for the metrics)."""
    for entry in entries:
        if entry.placement is not None and entry.placement.residency is not None:
            yield entry, entry.placement.residency


RESIDENCY_TYPES = (
    "total",
    "anon",
    "file",
    "shmem",
    "unevictable",
    "kernel_stack",
    "pagetables",
    "slab_reclaimable",
    "slab_unreclaimable",
)
"""The memory types ``numamem_container_numa_memory_bytes`` exports (GetResidency has all),
besides every ``hugetlb_<size>`` (one per huge page size the machine has: bounded)."""


class ResidencyMetrics(Collector):
    """Per pinned container, from the last placement round (computed at scrape time)."""

    def __init__(self, residency: ResidencyView) -> None:
        self._residency = residency

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "pod", "uid", "container"]
        memory = GaugeMetricFamily(
            "numamem_container_numa_memory_bytes",
            "A pinned container's memory per NUMA node and type (memory.numa_stat)",
            labels=[*labels, "node", "type"],
        )
        outside = GaugeMetricFamily(
            "numamem_container_memory_outside_affinity_bytes",
            "A pinned container's memory (total) on NUMA nodes the memory manager did not assign",
            labels=labels,
        )
        mismatch = GaugeMetricFamily(
            "numamem_container_cpuset_mems_mismatch",
            "1 when the cpuset.mems the kernel enforces differs from the assigned nodes",
            labels=labels,
        )
        held = GaugeMetricFamily(
            "numamem_container_cpuset_mems_not_enforced",
            "1 while --enforce-cpuset-mems does not write the container's cpuset.mems, by reason",
            labels=[*labels, "reason"],
        )
        for entry, res in measured(self._residency.entries()):
            target = entry.target
            values = [
                entry.namespace,
                entry.pod_name or target.pod_uid,
                target.pod_uid,
                target.container_name,
            ]
            for node, per_type in res.nodes.items():
                for kind, size in per_type.items():
                    if kind in RESIDENCY_TYPES or kind.startswith(HUGETLB_PREFIX):
                        memory.add_metric([*values, str(node), kind], size)
            outside.add_metric(values, res.outside_bytes)
            if res.cpuset_matches is not None:
                mismatch.add_metric(values, 0 if res.cpuset_matches else 1)
            reason = ENFORCEMENT_REASONS.get(entry.placement.enforcement if entry.placement else "")
            if reason is not None:
                held.add_metric([*values, reason], 1)
        stats = self._residency.sampler.stats
        writes = CounterMetricFamily(
            "numamem_cpuset_mems_writes",
            "cpuset.mems writes by --enforce-cpuset-mems",
            labels=["result"],
        )
        writes.add_metric(["ok"], stats.writes_ok)
        writes.add_metric(["failed"], stats.writes_failed)
        writes.add_metric(["superseded"], stats.writes_superseded)
        yield memory
        yield outside
        yield mismatch
        yield held
        yield writes
