"""``--enforce-cpuset-mems``: when the placement sampler writes a container's ``cpuset.mems``.

With ``enforce``, a container whose enforced ``cpuset.mems`` differs from its
assignment (the placement sampler, :mod:`.placement`, found it so this round) has
the assignment written, exactly, to its ``cpuset.mems`` (v1: after setting
``cpuset.memory_migrate`` to 1, so that the pages already allocated move too; v2
always migrates); the enforced nodes are read back and the write reported
(:class:`~.cpusetwrite.CpusetWrite`, a log line, a
counter; a failed write is retried each round, counted each time and logged
once until its error changes; a container whose cgroup is removed during the
write, ENOENT or ENODEV with its directory gone, has left: ``NO_CGROUP``, no
failed write). It never writes a node outside the assignment, and never an
empty list. On v2 it first checks that the parent's ``cpuset.mems.effective``
has every assigned node (else the kernel would enforce the parent's nodes):
when it does not, nothing is written (:data:`PARENT_DISALLOWS`, logged once,
checked each round). A write after which the kernel enforces a node outside
the assignment is undone, the previous ``cpuset.mems`` written back (a
restore, the only other value ever written), and enforcement stops for that
container until its target changes (:data:`STOPPED`). Each write, the restore
too, is made only if the memory manager's committed assignment is still the
round's target (:mod:`.cpusetwrite`): else it is superseded, counted and logged,
and the next round enforces the new assignment. After
:data:`CONTESTED_AFTER` writes in a row that the next round finds undone
(another agent keeps its own ``cpuset.mems``), the container is
:data:`CONTESTED` (a warning once) and is written again only after
:data:`FIRST_BACKOFF_ROUNDS` rounds, then twice as many each time up to
:data:`MAX_BACKOFF_ROUNDS`, until a round finds the assignment in place.
Rounds are the clock: no wall-clock time.

:class:`Enforcer` remembers, per container and while its target stays the same, what
enforcement needs across rounds (:class:`Enforcing`: held, stopped, undone writes, the
backoff); one write and its checks are :class:`~.cpusetwrite.CpusetWriter`'s. Not
thread-safe: the sampler's round calls it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import CgroupFormatError, quote
from numamem.logging import get_logger
from numamem.metacache.metrics import cgroup
from numamem.metacache.metrics.cpusetwrite import (
    CommittedNodes,
    CpusetWriter,
    Outcome,
    PlacementStats,
    PlacementTarget,
    os_error_text,
)
from numamem.metacache.metrics.numastat import parse_mems

_log = get_logger("placement")

# Why --enforce-cpuset-mems does not write a container's cpuset.mems now ("" = nothing holds it).
CONTESTED = "CONTESTED"
PARENT_DISALLOWS = "PARENT_DISALLOWS"
STOPPED = "STOPPED"
CONTESTED_AFTER = 3
"""Consecutive writes that the next round finds undone before a container is contested."""
FIRST_BACKOFF_ROUNDS = 2
MAX_BACKOFF_ROUNDS = 64
"""A contested container is written again after 2 rounds, then 4, 8, ... at most 64."""


@dataclass
class Enforcing:
    """What enforcement remembers of one container (while its target stays the same)."""

    target: PlacementTarget
    held: str = ""
    """Why the last round did not write (the parent does not allow the nodes); logged once."""
    stopped: str = ""
    """Why enforcement stopped for good (a write widened the enforced nodes)."""
    last_ok_round: int = -2
    """The round of the last write that took."""
    undone: int = 0
    """Writes in a row that the next round found undone (reset when a round finds it held)."""
    contested: bool = False
    backoff: int = 0
    """Rounds from one write of a contested container to the next."""
    next_try: int = 0
    """The round that writes a contested container again."""

    def report(self, round_: int) -> tuple[str, str]:
        if self.stopped:
            return STOPPED, self.stopped
        if self.contested:
            wait = self.next_try - round_
            return CONTESTED, (
                f"cpuset.mems was written {self.undone} times in a row and changed back before "
                "the next round each time (another agent, or the runtime, keeps its own "
                "cpuset.mems): numamem backs off and writes it again in "
                f"{wait} {'round' if wait == 1 else 'rounds'} (the wait doubles each time, up to "
                f"{MAX_BACKOFF_ROUNDS} rounds). Make the other agent apply the memory "
                "manager's nodes (GetMemoryNUMANodes), or leave cpuset.mems to one of them"
            )
        if self.held:
            return PARENT_DISALLOWS, self.held
        return "", ""


class Enforcer:
    """The enforcement of every container of the sampler's rounds (see the module)."""

    def __init__(self, root: Path, stats: PlacementStats, committed: CommittedNodes | None) -> None:
        self._writer = CpusetWriter(root, stats, committed)
        self._states: dict[tuple[str, str], Enforcing] = {}

    def forget(self, keep: Collection[tuple[str, str]]) -> None:
        """Drop what is remembered of every container not in ``keep`` (no longer a target)."""
        for table in (self._writer.failures, self._states):
            for key in [k for k in table if k not in keep]:
                del table[key]

    def enforce(
        self,
        target: PlacementTarget,
        dirs: cgroup.CgroupDirs,
        enforced: frozenset[int],
        now: int,
        round_: int,
        *,
        matches: bool,
    ) -> tuple[Outcome, tuple[str, str]]:
        """Round ``round_``'s step for ``target`` (a write when ``enforced`` differs from the
        assignment: ``matches`` False), and why enforcement is held after it (the status,
        "" when nothing holds it, and the reason in words)."""
        state = self._states.get(target.key)
        if state is None or state.target != target:  # a new container or assignment
            state = self._states[target.key] = Enforcing(target)
        if matches:
            self._in_place(target, state)
            outcome = Outcome()
        else:
            outcome = self._step(target, dirs, enforced, now, state, round_)
        return outcome, state.report(round_)

    def _step(
        self,
        target: PlacementTarget,
        dirs: cgroup.CgroupDirs,
        enforced: frozenset[int],
        now: int,
        state: Enforcing,
        round_: int,
    ) -> Outcome:
        """One enforcement step for a container whose enforced nodes differ."""
        if state.stopped:
            return Outcome()
        if state.last_ok_round == round_ - 1:
            state.undone += 1  # the last round's write did not last
        if not state.contested and state.undone >= CONTESTED_AFTER:
            state.contested, state.backoff = True, FIRST_BACKOFF_ROUNDS
            state.next_try = round_ + state.backoff
            _log.warning(
                "cpuset.mems is contested: each write was undone by the next round; backing off",
                pod_uid=quote(target.pod_uid, style="bare"),
                container=quote(target.container_name, style="bare"),
                undone=state.undone,
                retry_in_rounds=state.backoff,
            )
            return Outcome()
        if state.contested:
            if round_ < state.next_try:
                return Outcome()
            state.backoff = min(2 * state.backoff, MAX_BACKOFF_ROUNDS)
            state.next_try = round_ + state.backoff
        if dirs.mode == cgroup.V2:
            why = self._parent_disallows(target, dirs)
            if why:
                if state.held != why:
                    _log.warning(
                        "not enforcing cpuset.mems: the parent cgroup does not allow the "
                        "assigned nodes",
                        pod_uid=quote(target.pod_uid, style="bare"),
                        container=quote(target.container_name, style="bare"),
                        reason=why,
                    )
                state.held = why
                return Outcome()
        state.held = ""
        outcome = self._writer.write(target, dirs, enforced, now)
        write = outcome.write
        if write is not None and write.written_back:
            state.stopped = write.error
        elif write is not None and write.ok:
            state.last_ok_round = round_
        return outcome

    def _in_place(self, target: PlacementTarget, state: Enforcing) -> None:
        """A round that finds the enforced nodes equal to the assignment: a contest is over."""
        state.held = ""
        state.undone = 0
        if state.contested:
            state.contested, state.backoff = False, 0
            _log.info(
                "cpuset.mems holds again: no longer contested",
                pod_uid=quote(target.pod_uid, style="bare"),
                container=quote(target.container_name, style="bare"),
            )

    def _parent_disallows(self, target: PlacementTarget, dirs: cgroup.CgroupDirs) -> str:
        """v2: why the parent's ``cpuset.mems.effective`` does not allow every assigned node
        ("" when it does). Writing then would make the kernel enforce the parent's nodes
        (when it grants none of them), wider than the assignment."""
        parent = dirs.cpuset.parent / "cpuset.mems.effective"
        try:
            allowed = parse_mems(cgroup.read_small(parent), str(parent))
        except FileNotFoundError:
            return (
                f"{parent} does not exist: cannot tell which nodes the parent allows; not written"
            )
        except (OSError, CgroupFormatError) as err:
            reason = str(err) if isinstance(err, CgroupFormatError) else os_error_text(err)
            return f"cannot read the parent's nodes ({reason}); not written"
        missing = target.assigned - allowed
        if not missing:
            return ""
        return (
            f"{parent} is {quote(format_cpulist(allowed))}, without the assigned "
            f"{'node' if len(missing) == 1 else 'nodes'} {quote(format_cpulist(missing))}: the "
            "kernel would enforce other nodes than the assignment; not written. Allow them in "
            "the pod's (and its QoS class's) cpuset.mems, or fix the assignment"
        )
