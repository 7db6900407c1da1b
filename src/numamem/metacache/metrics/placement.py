"""Each collector round: where every pinned container's memory is, and its ``cpuset.mems``.

The sampler is given :class:`PlacementTarget` s (pinned containers: their
assigned nodes and runtime ids, newest first) and, once per collector round,
finds each one's cgroup as the metrics collector does
(:func:`numamem.metacache.metrics.cgroup.resolve`), reads ``memory.numa_stat``,
the hugetlb controller's ``hugetlb.<size>.numa_stat`` (where the kernel has
them) and the enforced node list, and publishes a :class:`PlacementRound` (one
immutable object, replaced as a whole: readers never see half a round).

Per container, a :class:`Placement` with a status:

* ``MEASURED``: the numa_stat was read (the enforced nodes may still be
  unknown: no cpuset controller for the container);
* ``NO_CGROUP``: no cgroup under the root for any of its newest
  :data:`MAX_RESOLVED_IDS` ids (not started yet, on another node, a wrong
  ``--cgroup-root``; the message lists a few, quoted), or the cgroup disappeared
  while it was read: the container stopped. Neither is an error;
* ``NO_NUMA_STAT``: the cgroup has no ``memory.numa_stat`` (no memory
  controller for it, or a kernel without NUMA);
* ``UNREADABLE``: a file is malformed (not ASCII, not the kernel's format) or
  cannot be read; the message names it. Counted as a collector error and
  logged; the round goes on. So does any unexpected error for one container:
  it is UNREADABLE, the others are still measured and the round published.

A container whose enforced ``cpuset.mems`` differs from its assignment is
logged once (a warning; again only after it matched in between). With
``enforce``, the sampler's :class:`~.enforcement.Enforcer` then writes the
assignment (:mod:`.enforcement`: what is written, when it is not, the backoff),
and the placement carries the write and why enforcement is held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import PATH_QUOTE_BYTES, QUOTE_BYTES, CgroupFormatError, quote
from numamem.logging import get_logger
from numamem.metacache.metrics import cgroup, cpusetfiles
from numamem.metacache.metrics.cpusetwrite import (
    CommittedNodes,
    CpusetWrite,
    PlacementStats,
    PlacementTarget,
    os_error_text,
    went_away,
)
from numamem.metacache.metrics.enforcement import Enforcer
from numamem.metacache.metrics.residency import Residency, residency

__all__ = [
    "MEASURED",
    "NO_CGROUP",
    "NO_NUMA_STAT",
    "UNREADABLE",
    "CpusetWrite",
    "Placement",
    "PlacementRound",
    "PlacementSampler",
    "PlacementStats",
    "PlacementTarget",
]

_log = get_logger("placement")

MEASURED = "MEASURED"
NO_CGROUP = "NO_CGROUP"
NO_NUMA_STAT = "NO_NUMA_STAT"
UNREADABLE = "UNREADABLE"
MAX_RESOLVED_IDS = 4
"""Only a container's newest ids are looked up (each costs about 15 stat() calls a round
while none has a cgroup): an older id's cgroup is a container that already restarted."""
MAX_LISTED_IDS = 3
"""The most ids a NO_CGROUP message lists (each quoted), then "and N more"."""


@dataclass(frozen=True)
class Placement:
    """One container in one round."""

    target: PlacementTarget
    status: str
    message: str = ""
    container_id: str = ""
    """The id whose cgroup was found ("" when none was)."""
    cgroup: str = ""
    """The container's memory cgroup directory ("" when none was found)."""
    residency: Residency | None = None
    write: CpusetWrite | None = None
    """The last write for the container (this round or an earlier one), while it is a target."""
    enforcement: str = ""
    """With ``enforce``: why the sampler does not write the container's ``cpuset.mems`` now
    (:data:`~.enforcement.PARENT_DISALLOWS`, :data:`~.enforcement.STOPPED`,
    :data:`~.enforcement.CONTESTED`); "" when nothing holds it back."""
    enforcement_message: str = ""
    """The reason in words: the files, the nodes, what to do."""


@dataclass(frozen=True)
class PlacementRound:
    time_ns: int
    mode: str
    placements: Mapping[tuple[str, str], Placement]


@dataclass
class _Known:
    container_ids: tuple[str, ...]
    container_id: str
    dirs: cgroup.CgroupDirs


class PlacementSampler:
    """See the module docstring. :meth:`sample` must not run concurrently with itself
    (the collector's thread runs it); :attr:`last` is safe to read from any thread."""

    def __init__(
        self,
        root: str | Path,
        *,
        enforce: bool = False,
        page_size: int | None = None,
        mode: str | None = None,
        committed: CommittedNodes | None = None,
    ) -> None:
        """``committed``: the assignment committed now, asked before each write (see
        :mod:`.cpusetwrite`); None (tests of the sampler alone) writes the round's targets."""
        self.root = Path(root)
        self.enforce = enforce
        self.page_size = page_size or cgroup.page_size()
        self.mode = mode or cgroup.detect_mode(self.root)
        self.stats = PlacementStats()
        self.last: PlacementRound | None = None
        self._known: dict[tuple[str, str], _Known] = {}
        self._warned: set[tuple[str, str]] = set()
        self._writes: dict[tuple[str, str], CpusetWrite] = {}
        self._enforcer = Enforcer(self.root, self.stats, committed)
        self._round = 0
        """The index of the round running (rounds are the backoff's clock: no wall clock)."""

    def sample(self, targets: Sequence[PlacementTarget], now: int) -> int:
        """One round over ``targets``; publishes :attr:`last`; returns the unreadable count."""
        placements: dict[tuple[str, str], Placement] = {}
        self._round = self.stats.rounds
        for target in targets:
            if target.key not in placements:
                placements[target.key] = self._guarded(target, now)
        for table in (self._known, self._writes):
            for key in [k for k in table if k not in placements]:
                del table[key]
        self._enforcer.forget(placements.keys())
        self._warned &= placements.keys()
        errors = sum(p.status == UNREADABLE for p in placements.values())
        self.stats.rounds += 1
        self.stats.errors += errors
        self.last = PlacementRound(now, self.mode, placements)
        return errors

    def _guarded(self, target: PlacementTarget, now: int) -> Placement:
        """:meth:`_place`, where an unexpected error (a bug, or a file in a shape nobody
        foresaw) makes this one container UNREADABLE and the round goes on."""
        try:
            return self._place(target, now)
        except Exception as err:  # noqa: BLE001 - one container must never stop the round
            self._known.pop(target.key, None)
            message = (
                f"unexpected error reading the container's cgroup: {type(err).__name__}: "
                f"{quote(str(err), style='bare', limit=QUOTE_BYTES * 4)} (a numamem bug: please "
                "report it with the log line)"
            )
            _log.exception(
                "cannot read the container's NUMA placement",
                pod_uid=quote(target.pod_uid, style="bare"),
                container=quote(target.container_name, style="bare"),
            )
            return Placement(target, UNREADABLE, message)

    def _dirs(self, target: PlacementTarget) -> _Known | None:
        """The cgroup of the newest id that has one; found again when the ids change."""
        known = self._known.get(target.key)
        if known is not None and known.container_ids == target.container_ids:
            return known
        for cid in target.container_ids[:MAX_RESOLVED_IDS]:
            dirs = cgroup.resolve(self.root, self.mode, target.pod_uid, cid)
            if dirs is not None:
                self._known[target.key] = _Known(target.container_ids, cid, dirs)
                return self._known[target.key]
        self._known.pop(target.key, None)
        return None

    def _place(self, target: PlacementTarget, now: int) -> Placement:
        known = self._dirs(target)
        if known is None:
            return Placement(
                target,
                NO_CGROUP,
                f"no cgroup under {self.root} for container "
                f"{_ids_text(target.container_ids, MAX_RESOLVED_IDS)}",
            )
        dirs, cid, where = known.dirs, known.container_id, str(known.dirs.memory)
        if not dirs.memory.is_dir():
            controller = self.root / "memory"
            if self.mode != cgroup.V2 and not controller.is_dir():
                return Placement(
                    target, NO_NUMA_STAT, f"no memory controller at {controller}", cid, where
                )
            return self._gone(target)
        stat_path = dirs.memory / "memory.numa_stat"
        try:
            stat = cgroup.read_numa_stat(stat_path, self.page_size)
            enforced = cpusetfiles.read_enforced_mems(dirs)
        except (OSError, CgroupFormatError) as err:
            if went_away(err, dirs.memory):
                return self._gone(target)
            if isinstance(err, FileNotFoundError) and not stat_path.exists():
                return Placement(
                    target,
                    NO_NUMA_STAT,
                    f"{stat_path} does not exist (no memory controller for the cgroup, or a "
                    "kernel without NUMA)",
                    cid,
                    where,
                )
            return _unreadable(target, err, cid, where)
        try:
            huge = cgroup.read_hugetlb_numa_stats(dirs.hugetlb)
        except (OSError, CgroupFormatError) as err:
            if went_away(err, dirs.hugetlb) or went_away(err, dirs.memory):
                return self._gone(target)
            return _unreadable(target, err, cid, where)
        result = residency(target.assigned, stat, enforced, huge)
        message = "" if enforced is not None else f"no {cpusetfiles.enforced_mems_file(dirs)}"
        if result.cpuset_matches is False:
            self._warn_once(target, result, dirs)
        elif result.cpuset_matches:
            self._warned.discard(target.key)
        enforcement = ("", "")
        if self.enforce and enforced is not None:
            step, enforcement = self._enforcer.enforce(
                target, dirs, enforced, now, self._round, matches=result.cpuset_matches is not False
            )
            if step.gone:
                return self._gone(target)
            if step.write is not None:
                self._writes[target.key] = step.write
                result = replace(result, enforced=step.enforced)
        write = self._writes.get(target.key)
        return Placement(target, MEASURED, message, cid, where, result, write, *enforcement)

    def _gone(self, target: PlacementTarget) -> Placement:
        self._known.pop(target.key, None)
        self.stats.gone += 1
        _log.debug(
            "cgroup disappeared; container stopped",
            pod_uid=quote(target.pod_uid, style="bare"),
            container=quote(target.container_name, style="bare"),
        )
        return Placement(
            target, NO_CGROUP, "the cgroup disappeared while it was read: the container stopped"
        )

    def _warn_once(
        self, target: PlacementTarget, result: Residency, dirs: cgroup.CgroupDirs
    ) -> None:
        if target.key in self._warned:
            return
        self._warned.add(target.key)
        _log.warning(
            "cpuset.mems differs from the memory manager's assignment",
            pod_uid=quote(target.pod_uid, style="bare"),
            container=quote(target.container_name, style="bare"),
            assigned=format_cpulist(target.assigned),
            enforced=format_cpulist(result.enforced or ()),
            file=quote(
                str(cpusetfiles.enforced_mems_file(dirs)), style="bare", limit=PATH_QUOTE_BYTES
            ),
            enforce=self.enforce,
        )


def _ids_text(ids: Sequence[str], tried: int) -> str:
    """``'a', 'b', 'c' and 2 more``: at most :data:`MAX_LISTED_IDS` ids, each quoted."""
    shown = ", ".join(quote(cid) for cid in ids[:MAX_LISTED_IDS])
    rest = min(len(ids), tried) - MAX_LISTED_IDS
    text = f"{'id' if len(ids) == 1 else 'ids'} {shown}" + (f" and {rest} more" if rest > 0 else "")
    if len(ids) > tried:
        text += f" (only the newest {tried} of its {len(ids)} ids are looked up)"
    return text


def _unreadable(
    target: PlacementTarget, err: OSError | CgroupFormatError, cid: str, where: str
) -> Placement:
    """UNREADABLE for ``target``, logged once per sample with the reason."""
    message = str(err) if isinstance(err, CgroupFormatError) else os_error_text(err)
    _log.warning(
        "cannot read the container's NUMA placement",
        pod_uid=quote(target.pod_uid, style="bare"),
        container=quote(target.container_name, style="bare"),
        error=message,
    )
    return Placement(target, UNREADABLE, message, cid, where)
