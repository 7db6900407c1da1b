"""Each collector round: where every pinned container's memory is, and its ``cpuset.mems``.

The sampler is given :class:`PlacementTarget` s (pinned containers: their
assigned nodes and runtime ids, newest first) and, once per collector round,
finds each one's cgroup as the metrics collector does
(:func:`numamem.metacache.metrics.cgroup.resolve`), reads ``memory.numa_stat``
and the enforced node list, and publishes a :class:`PlacementRound` (one
immutable object, replaced as a whole: readers never see half a round).

Per container, a :class:`Placement` with a status:

* ``MEASURED``: the numa_stat was read (the enforced nodes may still be
  unknown: no cpuset controller for the container);
* ``NO_CGROUP``: no cgroup under the root for any of its ids (not started
  yet, on another node, a wrong ``--cgroup-root``), or the cgroup disappeared
  while it was read: the container stopped. Neither is an error;
* ``NO_NUMA_STAT``: the cgroup has no ``memory.numa_stat`` (no memory
  controller for it, or a kernel without NUMA);
* ``UNREADABLE``: a file is malformed or cannot be read; the message names
  it. Counted as a collector error and logged; the round goes on.

A container whose enforced ``cpuset.mems`` differs from its assignment is
logged once (a warning; again only after it matched in between). With
``enforce``, the sampler then writes the assignment, exactly, to the
container's ``cpuset.mems`` (v1: after setting ``cpuset.memory_migrate`` to 1,
so that the pages already allocated move too; v2 always migrates), reads the
enforced nodes back and reports the write (:class:`CpusetWrite`, a log line, a
counter; a failed write is retried each round, counted each time and logged
once until its error changes). It never writes a node outside the assignment,
and never an empty list.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import PATH_QUOTE_BYTES, CgroupFormatError, quote
from numamem.logging import get_logger
from numamem.metacache.metrics import cgroup
from numamem.metacache.metrics.residency import Residency, residency

_log = get_logger("placement")

MEASURED = "MEASURED"
NO_CGROUP = "NO_CGROUP"
NO_NUMA_STAT = "NO_NUMA_STAT"
UNREADABLE = "UNREADABLE"
_GONE_ERRNOS = (errno.ENOENT, errno.ENODEV, errno.ESRCH)


@dataclass(frozen=True)
class PlacementTarget:
    """A pinned container: its assigned NUMA nodes and runtime ids, the newest first."""

    pod_uid: str
    container_name: str
    container_ids: tuple[str, ...]
    assigned: frozenset[int]

    @property
    def key(self) -> tuple[str, str]:
        return self.pod_uid, self.container_name


@dataclass(frozen=True)
class CpusetWrite:
    """One write of ``cpuset.mems`` (``--enforce-cpuset-mems``)."""

    path: str
    before: frozenset[int]
    written: frozenset[int]
    after: frozenset[int] | None
    """Read back after the write (None: unreadable then)."""
    migrate_enabled: bool
    """Whether this write first set v1 ``cpuset.memory_migrate`` to 1."""
    time_ns: int
    """The time of the round that wrote."""
    error: str = ""
    """Why the write failed, or why the kernel enforces other nodes after it; "" when it took."""

    @property
    def ok(self) -> bool:
        return not self.error


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


@dataclass(frozen=True)
class PlacementRound:
    time_ns: int
    mode: str
    placements: Mapping[tuple[str, str], Placement]


@dataclass
class PlacementStats:
    """Counters since start; written by the sampler's thread only."""

    rounds: int = 0
    errors: int = 0
    gone: int = 0
    writes_ok: int = 0
    writes_failed: int = 0


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
    ) -> None:
        self.root = Path(root)
        self.enforce = enforce
        self.page_size = page_size or cgroup.page_size()
        self.mode = mode or cgroup.detect_mode(self.root)
        self.stats = PlacementStats()
        self.last: PlacementRound | None = None
        self._known: dict[tuple[str, str], _Known] = {}
        self._warned: set[tuple[str, str]] = set()
        self._writes: dict[tuple[str, str], CpusetWrite] = {}
        self._failures: dict[tuple[str, str], str] = {}
        """The last failed write's error per container, logged once until it changes."""

    def sample(self, targets: Sequence[PlacementTarget], now: int) -> int:
        """One round over ``targets``; publishes :attr:`last`; returns the unreadable count."""
        placements: dict[tuple[str, str], Placement] = {}
        for target in targets:
            if target.key not in placements:
                placements[target.key] = self._place(target, now)
        for table in (self._known, self._writes, self._failures):
            for key in [k for k in table if k not in placements]:
                del table[key]
        self._warned &= placements.keys()
        errors = sum(p.status == UNREADABLE for p in placements.values())
        self.stats.rounds += 1
        self.stats.errors += errors
        self.last = PlacementRound(now, self.mode, placements)
        return errors

    def _dirs(self, target: PlacementTarget) -> _Known | None:
        """The cgroup of the newest id that has one; found again when the ids change."""
        known = self._known.get(target.key)
        if known is not None and known.container_ids == target.container_ids:
            return known
        for cid in target.container_ids:
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
                f"no cgroup under {self.root} for container ids {', '.join(target.container_ids)}",
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
            enforced = cgroup.read_enforced_mems(dirs)
        except (OSError, CgroupFormatError) as err:
            if _went_away(err, dirs):
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
            message = str(err) if isinstance(err, CgroupFormatError) else _os_error(err)
            _log.warning(
                "cannot read the container's NUMA placement",
                pod_uid=quote(target.pod_uid, style="bare"),
                container=quote(target.container_name, style="bare"),
                error=message,
            )
            return Placement(target, UNREADABLE, message, cid, where)
        result = residency(target.assigned, stat, enforced)
        message = "" if enforced is not None else f"no {cgroup.enforced_mems_file(dirs)}"
        if result.cpuset_matches is False:
            self._warn_once(target, result, dirs)
            if self.enforce and enforced is not None:
                written = self._write(target, dirs, enforced, now)
                self._writes[target.key] = written
                result = residency(target.assigned, stat, written.after)
        elif result.cpuset_matches:
            self._warned.discard(target.key)
        write = self._writes.get(target.key)
        return Placement(target, MEASURED, message, cid, where, result, write)

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
            file=quote(str(cgroup.enforced_mems_file(dirs)), style="bare", limit=PATH_QUOTE_BYTES),
            enforce=self.enforce,
        )

    def _write(
        self, target: PlacementTarget, dirs: cgroup.CgroupDirs, before: frozenset[int], now: int
    ) -> CpusetWrite:
        path = str(dirs.cpuset / "cpuset.mems")
        migrate = False
        after: frozenset[int] | None = None
        error = ""
        try:
            migrate = cgroup.enable_memory_migrate(dirs)
            path = str(cgroup.write_mems(dirs, target.assigned))
        except OSError as err:
            error = _os_error(err)
        try:
            after = cgroup.read_enforced_mems(dirs)
        except (OSError, CgroupFormatError) as err:
            error = error or f"read back: {err}"
        if not error and after != target.assigned:
            error = (
                f"the kernel enforces {quote(format_cpulist(after or ()))} after the write (the parent "
                "cgroup's cpuset.mems may not allow every assigned node)"
            )
        write = CpusetWrite(path, before, target.assigned, after, migrate, now, error)
        if write.ok:
            self.stats.writes_ok += 1
        else:
            self.stats.writes_failed += 1
        fields = {
            "pod_uid": quote(target.pod_uid, style="bare"),
            "container": quote(target.container_name, style="bare"),
            "file": quote(path, style="bare", limit=PATH_QUOTE_BYTES),
            "before": format_cpulist(before),
            "written": format_cpulist(target.assigned),
            "memory_migrate_enabled": migrate,
        }
        if write.ok:
            self._failures.pop(target.key, None)
            _log.info("wrote cpuset.mems (--enforce-cpuset-mems)", **fields)
        elif self._failures.get(target.key) != error:
            self._failures[target.key] = error
            _log.warning("cannot enforce cpuset.mems; retried each round", error=error, **fields)
        return write


def _went_away(err: Exception, dirs: cgroup.CgroupDirs) -> bool:
    """A read that failed because the cgroup went away (the container stopped)."""
    if isinstance(err, OSError) and err.errno in _GONE_ERRNOS and not dirs.memory.is_dir():
        return True
    return isinstance(err, OSError) and err.errno == errno.ENODEV


def _os_error(err: OSError) -> str:
    return f"{err.filename or 'cgroup file'}: {err.strerror or err}"
