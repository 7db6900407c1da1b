"""Restoring a stored state on a machine that changed: exact, bounded drift, or "still fits".

The kubelet's ``validateState`` rebuilds the machine state from the machine as
it is now plus every stored block, and refuses to start unless that equals the
stored state (section 4.9 of the memory-manager spec): a reboot that moved
MemTotal by a few MiB (KASLR), a changed hugepage count or reservation, and
the node is stuck until someone deletes the file. This module decides what to
do instead, per ``memory-drift-tolerance``:

* ``off``: the kubelet's exact comparison;
* a bound (``auto`` resolves to one, KEP-6232's ``isTolerableMachineStateDrift``):
  the same nodes, assignments, groups, memory types and reservations, non-memory
  types unchanged, ``memory`` total and allocatable within the bound, and every
  block still fits;
* ``fit`` (numamem's default, beyond upstream): any change of node memory,
  hugepage counts or reservations, nodes or types that nothing is assigned to,
  as long as replaying every stored block onto the machine as it is now fits,
  with the same groups and the same blocks.

Accepting re-baselines: the recomputed state becomes the stored one (one atomic
write by the manager). Nothing is ever dropped or moved: a block that no longer
fits refuses the start, and the refusal lists every difference (node, resource,
field, stored value, value now), the containers whose blocks are on that node,
and which option would accept the change. What differs and what no longer fits are found by
:mod:`numamem.memorymanager.state.differences`; this module decides what a tolerance
accepts. Pure: the caller supplies the states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from numamem.memorymanager.state.differences import (
    Assignments,
    Difference,
    PodNames,
    container_label,
    containers_by_node,
    diff_states,
    replay_strict,
)
from numamem.memtypes import MEMORY, ContainerRef, MachineState, NUMANodeState
from numamem.quantity import format_bytes, format_bytes_exact

OFF = "off"
AUTO = "auto"
FIT = "fit"
DRIFT_OPTION = "memory-drift-tolerance"
KUBELET_MISMATCH = "[memorymanager] the expected machine state is different from the real one"


@dataclass(frozen=True)
class Tolerance:
    """The resolved option: ``mode`` is off, bound or fit; ``bound`` in bytes for bound."""

    mode: str
    bound: int = 0
    text: str = ""
    """How the operator wrote it (``auto``, ``128Mi``), for messages."""

    @property
    def accepts_drift(self) -> bool:
        return self.mode != OFF


EXACT = Tolerance(OFF, 0, OFF)
DEFAULT = Tolerance(FIT, 0, FIT)


@dataclass
class Verdict:
    """What the restore check found; ``accepted`` False means refuse the start."""

    accepted: bool
    rebaseline: MachineState | None
    """The state to store instead (None: keep the stored one)."""
    differences: list[Difference] = field(default_factory=list)
    misfits: list[str] = field(default_factory=list)
    """Stored blocks that cannot be placed on the machine as it is now."""
    affected: dict[int, list[ContainerRef]] = field(default_factory=dict)
    accepting: list[str] = field(default_factory=list)
    """Option values that would accept this change (empty: none would)."""
    drift: dict[tuple[int, str], int] = field(default_factory=dict)
    """(node, type) -> TotalMemSize now minus stored (the drift gauge)."""
    tolerance: Tolerance = DEFAULT
    """The tolerance the verdict was reached under."""
    needed: int | None = None
    """The smallest bound KEP-6232's rule would accept (None: no bound would)."""
    names: PodNames = field(default_factory=dict)
    """How the report names pods (namespace and name where recorded)."""

    def tolerance_line(self) -> str:
        """Which tolerance is in force, its bound (computed, for ``auto``), and why it refuses."""
        t = self.tolerance
        head = f"{DRIFT_OPTION}={t.text} is in force"
        if t.mode == FIT:
            return f"{head}: it accepts any change as long as every stored block still fits"
        if t.mode == OFF:
            if t.text == AUTO:
                return (
                    f"{head} but has no bound on this machine (the kernel image span cannot be "
                    "read), so it works as off: the state must match exactly"
                )
            return f"{head}: the state must match exactly (the kubelet's rule)"
        how = (
            "auto's bound on this machine: the kernel image span + 64Mi = "
            f"{format_bytes_exact(t.bound)}"
            if t.text == AUTO
            else f"a bound of {format_bytes_exact(t.bound)}"
        )
        if self.needed is None:
            why = "a bound accepts only memory totals that moved, on the same nodes and groups"
        else:
            why = f"the memory moved by up to {format_bytes_exact(self.needed)}"
        return f"{head} ({how}): {why}"

    def report(self, path: str) -> str:
        """The refusal (or acceptance) text: kubelet's sentence first, then one line each."""
        lines = [
            KUBELET_MISMATCH,
            f"  {path} does not match this machine and configuration:",
            f"  {self.tolerance_line()}",
        ]
        for diff in self.differences:
            refs = self.affected.get(diff.node, [])
            holders = (
                ", ".join(container_label(p, c, self.names) for p, c in refs[:5])
                if refs
                else "none"
            )
            more = f" and {len(refs) - 5} more" if len(refs) > 5 else ""
            lines.append(f"  {diff.line()}; containers with blocks there: {holders}{more}")
        lines += [f"  {m}" for m in self.misfits]
        if self.accepting:
            lines.append(
                f"  fix: --memory-manager-policy-options {DRIFT_OPTION}="
                + " or ".join(self.accepting)
                + " accepts this (every stored block keeps its nodes); or drain the node, remove "
                f"{path} and restart numamem"
            )
        else:
            lines.append(
                "  fix: no drift tolerance accepts this (a stored block would not fit or its node "
                f"or memory type is gone): drain the node, remove {path} and restart numamem"
            )
        return "\n".join(lines)


def check_restore(
    stored: Mapping[int, NUMANodeState | None],
    assignments: Assignments,
    default: MachineState,
    tolerance: Tolerance,
    auto_bound: int | None = None,
    names: PodNames | None = None,
) -> Verdict:
    """Compare ``stored`` with ``default`` (the machine now) plus every block of ``assignments``.

    ``default`` is consumed (blocks are replayed onto it). ``auto_bound`` is the
    bound ``auto`` has on this machine (None: auto cannot derive one), used only to
    say whether ``auto`` would accept. ``names`` name the pods in the report.
    """
    names = names or {}
    misfits = replay_strict(default, assignments, names)
    expected = default
    differences = diff_states(stored, expected)
    affected = containers_by_node(assignments)
    drift = {
        (n, name): table.total - _stored_total(stored, n, name)
        for n, node in expected.items()
        if node is not None
        for name, table in (node.memory_map or {}).items()
    }
    if not differences and not misfits:
        return Verdict(True, None, affected=affected, drift=drift, names=names)
    needed = _bound_needed(stored, expected, differences) if not misfits else None
    fits = not misfits and _same_blocks(differences)
    accepting = []
    if needed is not None:
        if auto_bound is not None and needed <= auto_bound:
            accepting.append(AUTO)
        accepting.append(format_bytes(_round_up_mib(needed)))
    if fits:
        accepting.append(FIT)
    if tolerance.mode == FIT:
        accepted = fits
    elif tolerance.mode == OFF:
        accepted = False
    else:
        accepted = needed is not None and needed <= tolerance.bound
    return Verdict(
        accepted,
        expected if accepted else None,
        differences,
        misfits,
        affected,
        accepting,
        drift,
        tolerance,
        needed,
        names,
    )


def _same_blocks(differences: Iterable[Difference]) -> bool:
    """Whether the stored assignment counts and groups are those the blocks give. Free and
    reserved sums are recomputed from the blocks on re-baseline, as KEP-6232 does."""
    structural = {"NumberOfAssignments", "Cells"}
    return not any(d.field in structural for d in differences)


def _bound_needed(
    stored: Mapping[int, NUMANodeState | None],
    expected: Mapping[int, NUMANodeState | None],
    differences: Sequence[Difference],
) -> int | None:
    """The smallest ``memory-drift-tolerance`` quantity KEP-6232's rule would accept, or None
    when no bound would (anything but memory total/allocatable/free differs)."""
    bound = 0
    for d in differences:
        if d.field in ("Free (group sum)", "Reserved (group sum)"):
            continue  # not compared by the bound rule; the replay guards the fit
        if d.resource != MEMORY or d.field not in ("TotalMemSize", "Allocatable"):
            return None
        a, e = stored.get(d.node), expected.get(d.node)
        assert a is not None
        assert e is not None
        at, et = (a.memory_map or {})[MEMORY], (e.memory_map or {})[MEMORY]
        value = at.total if d.field == "TotalMemSize" else at.allocatable
        now = et.total if d.field == "TotalMemSize" else et.allocatable
        bound = max(bound, abs(now - value))
    return bound


def _stored_total(stored: Mapping[int, NUMANodeState | None], n: int, name: str) -> int:
    node = stored.get(n)
    table = None if node is None else (node.memory_map or {}).get(name)
    return 0 if table is None else table.total


def _round_up_mib(value: int) -> int:
    mib = 1024 * 1024
    return max(-(-value // mib), 1) * mib
