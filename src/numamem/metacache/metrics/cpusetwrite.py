"""``--enforce-cpuset-mems``: one write of a container's ``cpuset.mems``, checked against the
assignment committed at the moment of the write.

The placement sampler (:mod:`.placement`) takes its targets at the start of a collector
round and measures each container; a write comes later in the round. Meanwhile the memory
manager may commit another assignment for the container (a resize from node 0 to nodes
0-1, acknowledged, that the runtime then applies; a pod released and admitted again on
other nodes). Writing the round's nodes then would undo the runtime's newer write (and,
with ``memory_migrate`` on v1, move the pages back). So :class:`CpusetWriter` asks
:data:`CommittedNodes` (a port: the api layer reads the memory manager's current committed
version; this package never imports the memory manager) just before each write, the
assignment and the write back alike, and writes nothing when the answer differs from the
round's target: the write is *superseded* (:attr:`PlacementStats.writes_superseded`, an
info log line); the next round measures the container against the new assignment and
writes that.

What remains is the time between that read and the ``write()`` itself (microseconds, not
a round): an assignment committed and applied by the runtime in that window is overwritten
once, and the next round, which finds the enforced nodes differ from the new assignment,
writes the new one.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import PATH_QUOTE_BYTES, CgroupFormatError, CgroupPathError, quote
from numamem.logging import get_logger
from numamem.metacache.metrics import cgroup, cpusetfiles

_log = get_logger("placement")

_GONE_ERRNOS = (errno.ENOENT, errno.ENODEV, errno.ESRCH)

CommittedNodes = Callable[[str, str], frozenset[int]]
"""(pod uid, container name) -> the NUMA nodes the memory manager's committed version
assigns the container now (empty: it is no longer pinned). Called on the collector's
thread; must not block on the manager's writers (a read of the committed version)."""


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
    written_back: bool = False
    """The kernel enforced nodes outside the assignment after the write (``after``), so the
    value ``cpuset.mems`` had before was written back; enforcement stopped for the container."""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class PlacementStats:
    """Counters since start; written by the sampler's thread only."""

    rounds: int = 0
    errors: int = 0
    gone: int = 0
    writes_ok: int = 0
    writes_failed: int = 0
    writes_superseded: int = 0
    """Writes not made: the committed assignment had changed since the round's targets."""


@dataclass(frozen=True)
class Outcome:
    """What one enforcement step did: the write (None: nothing written) and the nodes the
    kernel enforces after it; ``gone`` when the container left meanwhile; ``superseded``
    when the assignment changed since the round began (nothing written)."""

    write: CpusetWrite | None = None
    enforced: frozenset[int] | None = None
    gone: bool = False
    superseded: bool = False


@dataclass
class CpusetWriter:
    """Writes for one sampler (its thread only). ``committed`` None: no check (tests of the
    sampler alone, where the targets are the truth)."""

    root: Path
    stats: PlacementStats
    committed: CommittedNodes | None = None
    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    """The last failed write's error per container, logged once until it changes."""

    def superseded(self, target: PlacementTarget, what: str) -> bool:
        """True (counted and logged) when the committed assignment is no longer ``target``'s."""
        if self.committed is None:
            return False
        now = self.committed(target.pod_uid, target.container_name)
        if now == target.assigned:
            return False
        self.stats.writes_superseded += 1
        _log.info(
            f"not writing cpuset.mems ({what}): the memory manager's assignment changed during "
            "the collector round; the next round enforces the new one",
            pod_uid=quote(target.pod_uid, style="bare"),
            container=quote(target.container_name, style="bare"),
            round_assigned=format_cpulist(target.assigned),
            committed=format_cpulist(now) if now else "none (released)",
        )
        return True

    def write(
        self, target: PlacementTarget, dirs: cgroup.CgroupDirs, before: frozenset[int], now: int
    ) -> Outcome:
        """Write the assignment and read it back. ``gone`` when the container left meanwhile
        (its cgroup removed: ENOENT, ENODEV), which is no failed write; ``superseded`` when
        the committed assignment is no longer ``target.assigned`` (nothing written).

        When the kernel enforces nodes outside the assignment after the write, the value
        ``cpuset.mems`` had before is written back (the only write of anything but the
        assignment: a restore) and the error says so; the caller then stops."""
        path = str(dirs.cpuset / "cpuset.mems")
        migrate = False
        after: frozenset[int] | None = None
        error = ""
        previous: str | None = None
        try:
            previous = cgroup.read_small(dirs.cpuset / "cpuset.mems")
            if self.superseded(target, "the assignment"):
                return Outcome(superseded=True)
            migrate = cpusetfiles.enable_memory_migrate(self.root, dirs)
            path = str(cpusetfiles.write_mems(self.root, dirs, target.assigned))
        except (CgroupPathError, CgroupFormatError) as err:
            error = str(err)
        except OSError as err:
            if went_away(err, dirs.cpuset):
                return Outcome(gone=True)
            error = os_error_text(err)
        try:
            after = cpusetfiles.read_enforced_mems(dirs)
        except (OSError, CgroupFormatError) as err:
            if went_away(err, dirs.cpuset):
                return Outcome(gone=True)
            error = error or f"read back: {err}"
        if after is None and not dirs.cpuset.is_dir():
            return Outcome(gone=True)
        now_enforced = after
        written_back = not error and after is not None and not after <= target.assigned
        if written_back:
            error, now_enforced = self._write_back(target, dirs, after or frozenset(), previous)
        elif not error and after != target.assigned:
            error = (
                f"the kernel enforces {quote(format_cpulist(after or ()))} after the write (the parent "
                "cgroup's cpuset.mems may not allow every assigned node)"
            )
        write = CpusetWrite(path, before, target.assigned, after, migrate, now, error, written_back)
        self._report(target, write)
        return Outcome(write, now_enforced)

    def _report(self, target: PlacementTarget, write: CpusetWrite) -> None:
        if write.ok:
            self.stats.writes_ok += 1
        else:
            self.stats.writes_failed += 1
        fields = {
            "pod_uid": quote(target.pod_uid, style="bare"),
            "container": quote(target.container_name, style="bare"),
            "file": quote(write.path, style="bare", limit=PATH_QUOTE_BYTES),
            "before": format_cpulist(write.before),
            "written": format_cpulist(target.assigned),
            "memory_migrate_enabled": write.migrate_enabled,
        }
        if write.ok:
            self.failures.pop(target.key, None)
            _log.info("wrote cpuset.mems (--enforce-cpuset-mems)", **fields)
        elif write.written_back:
            _log.warning(
                "cpuset.mems written back; no longer enforced", error=write.error, **fields
            )
        elif self.failures.get(target.key) != write.error:
            self.failures[target.key] = write.error
            _log.warning(
                "cannot enforce cpuset.mems; retried each round", error=write.error, **fields
            )

    def _write_back(
        self,
        target: PlacementTarget,
        dirs: cgroup.CgroupDirs,
        widened: frozenset[int],
        previous: str | None,
    ) -> tuple[str, frozenset[int] | None]:
        """The write made the kernel enforce ``widened``, not within the assignment: write
        the previous value back (unless the assignment changed meanwhile: then the next
        round writes the new one). Returns the error to report and the nodes enforced now."""
        shown = quote(format_cpulist(widened))
        why = (
            f"the kernel enforces {shown} after writing {quote(format_cpulist(target.assigned))}, "
            "not within the assignment (the parent cgroup's cpuset.mems.effective grants none "
            "of the assigned nodes?)"
        )
        restored: frozenset[int] | None = widened
        try:
            if previous is None:
                raise ValueError("the value before the write is unknown")
            if self.superseded(target, "the write back"):
                raise ValueError("the assignment changed meanwhile; the next round writes it")
            cpusetfiles.restore_mems(self.root, dirs, previous)
            restored = cpusetfiles.read_enforced_mems(dirs)
            done = f"wrote back {quote(previous.strip())}"
        except (OSError, ValueError, CgroupFormatError, CgroupPathError) as err:
            done = f"could not write back {quote((previous or '').strip())}: {err}"
        return (
            f"{why}; {done}. numamem no longer writes this container's cpuset.mems (until it "
            "restarts or is re-pinned): allow the assigned nodes in the pod's cpuset.mems",
            restored,
        )


def went_away(err: Exception, directory: Path) -> bool:
    """A read or write in ``directory`` (the container's memory or cpuset cgroup) that failed
    because the cgroup went away (the container stopped)."""
    if isinstance(err, OSError) and err.errno in _GONE_ERRNOS and not directory.is_dir():
        return True
    return isinstance(err, OSError) and err.errno == errno.ENODEV


def os_error_text(err: OSError) -> str:
    return f"{err.filename or 'cgroup file'}: {err.strerror or err}"
