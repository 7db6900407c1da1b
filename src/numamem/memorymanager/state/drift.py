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
and which option would accept the change. Pure: the caller supplies the states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from numamem.errors import quote
from numamem.memtypes import MEMORY, Block, ContainerRef, MachineState, NUMANodeState
from numamem.quantity import format_bytes, format_bytes_exact

OFF = "off"
AUTO = "auto"
FIT = "fit"
DRIFT_OPTION = "memory-drift-tolerance"
KUBELET_MISMATCH = "[memorymanager] the expected machine state is different from the real one"

Assignments = Mapping[str, Mapping[str, Sequence[Block]]]
PodNames = Mapping[str, tuple[str, str]]
"""Pod uid -> (namespace, name), where the manager recorded them."""


def pod_label(uid: str, names: PodNames) -> str:
    """``namespace/name (uid)`` when the pod's names are known, else the uid."""
    namespace, name = (quote(n, style="bare") for n in names.get(uid, ("", "")))
    shown = quote(uid, style="bare")
    return f"{namespace}/{name} ({shown})" if namespace or name else shown


def container_label(uid: str, container: str, names: PodNames) -> str:
    """``namespace/name/container (pod uid)`` when the pod's names are known, else
    ``uid/container``."""
    namespace, name = (quote(n, style="bare") for n in names.get(uid, ("", "")))
    shown, ctr = quote(uid, style="bare"), quote(container, style="bare")
    if namespace or name:
        return f"{namespace}/{name}/{ctr} (pod {shown})"
    return f"{shown}/{ctr}"


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


@dataclass(frozen=True)
class Difference:
    """One field that differs between the stored state and the one recomputed now."""

    node: int
    resource: str
    """A memory type, or "" for node-level fields (the node itself, assignments, cells)."""
    field: str
    stored: str
    now: str

    def line(self) -> str:
        where = f"node {self.node}" + (f" {self.resource}" if self.resource else "")
        return f"{where} {self.field}: stored {self.stored}, now {self.now}"


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


def replay_strict(
    expected: MachineState, assignments: Assignments, names: PodNames | None = None
) -> list[str]:
    """Reserve every stored block on ``expected``; what cannot be placed is returned, in order.

    The kubelet's GA replay drops a remainder it cannot place; here it is a misfit
    (the drift PR's ``the memory assignment does not fit the machine state``). ``names``
    name the pods (``namespace/name (uid)``) where they are known.
    """
    misfits: list[str] = []
    for pod_uid in sorted(assignments):
        for container_name in sorted(assignments[pod_uid]):
            who = f"(pod: {pod_label(pod_uid, names or {})}, container: {quote(container_name, style='bare')})"
            for block in assignments[pod_uid][container_name]:
                nodes = list(block.numa_affinity or ())
                missing = [n for n in nodes if expected.get(n) is None]
                if missing:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment uses the NUMA that does not "
                        f"exist: node {missing[0]} is gone, and the block of {format_bytes(block.size)} "
                        f"{block.type} on nodes {nodes} is pinned there"
                    )
                    continue
                remaining = block.size
                lacking = []
                for n in nodes:
                    node = expected[n]
                    assert node is not None
                    node.number_of_assignments += 1
                    node.cells = list(nodes)
                    table = (node.memory_map or {}).get(block.type)
                    if table is None:
                        lacking.append(n)
                        continue
                    take = min(max(table.free, 0), remaining)
                    table.reserved += take
                    table.free -= take
                    remaining -= take
                if lacking:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment uses memory resource that does "
                        f"not exist: node {lacking[0]} has no {block.type} now"
                    )
                elif remaining:
                    misfits.append(
                        f"[memorymanager] {who} the memory assignment does not fit the machine state: "
                        f"{format_bytes(block.size)} {block.type} on nodes {nodes}, "
                        f"{format_bytes(remaining)} more than they have free now"
                    )
    return misfits


def diff_states(
    stored: Mapping[int, NUMANodeState | None], expected: Mapping[int, NUMANodeState | None]
) -> list[Difference]:
    """Every difference ``areMachineStatesEqual`` would see (free/reserved as group sums)."""
    out: list[Difference] = []
    for n in sorted(set(stored) | set(expected)):
        a, e = stored.get(n), expected.get(n)
        if a is None or e is None:
            out.append(
                Difference(
                    n, "", "node", "present" if a else "absent", "present" if e else "absent"
                )
            )
            continue
        if a.number_of_assignments != e.number_of_assignments:
            out.append(
                Difference(
                    n,
                    "",
                    "NumberOfAssignments",
                    str(a.number_of_assignments),
                    str(e.number_of_assignments),
                )
            )
        if sorted(a.cells or []) != sorted(e.cells or []):
            out.append(
                Difference(n, "", "Cells", str(sorted(a.cells or [])), str(sorted(e.cells or [])))
            )
        a_map, e_map = a.memory_map or {}, e.memory_map or {}
        for name in sorted(set(a_map) | set(e_map)):
            at, et = a_map.get(name), e_map.get(name)
            if at is None or et is None:
                out.append(
                    Difference(
                        n,
                        name,
                        "type",
                        "present" if at else "absent",
                        "present" if et else "absent",
                    )
                )
                continue
            for label, x, y in (
                ("TotalMemSize", at.total, et.total),
                ("SystemReserved", at.system_reserved, et.system_reserved),
                ("Allocatable", at.allocatable, et.allocatable),
            ):
                if x != y:
                    out.append(Difference(n, name, label, _bytes(x), _bytes(y) + _delta(y - x)))
            for label, attr in (("Free (group sum)", "free"), ("Reserved (group sum)", "reserved")):
                x, y = _group_sum(stored, a, name, attr), _group_sum(expected, a, name, attr)
                if x != y:
                    out.append(Difference(n, name, label, _bytes(x), _bytes(y) + _delta(y - x)))
    return out


def containers_by_node(assignments: Assignments) -> dict[int, list[ContainerRef]]:
    """node -> (pod, container) of every container with a block on that node, sorted."""
    out: dict[int, set[ContainerRef]] = {}
    for pod, containers in assignments.items():
        for ctr, blocks in containers.items():
            for block in blocks:
                for n in block.numa_affinity or ():
                    out.setdefault(n, set()).add((pod, ctr))
    return {n: sorted(refs) for n, refs in out.items()}


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


def _group_sum(
    state: Mapping[int, NUMANodeState | None], node: NUMANodeState, name: str, attr: str
) -> int:
    total = 0
    for cell in node.cells or []:
        member = state.get(cell)
        table = None if member is None else (member.memory_map or {}).get(name)
        if table is not None:
            total += int(getattr(table, attr))
    return total


def _stored_total(stored: Mapping[int, NUMANodeState | None], n: int, name: str) -> int:
    node = stored.get(n)
    table = None if node is None else (node.memory_map or {}).get(name)
    return 0 if table is None else table.total


def _bytes(value: int) -> str:
    return format_bytes_exact(value)


def _delta(value: int) -> str:
    sign = "+" if value >= 0 else "-"
    return f", {sign}{format_bytes(abs(value))}"


def _round_up_mib(value: int) -> int:
    mib = 1024 * 1024
    return max(-(-value // mib), 1) * mib


def container_owner(pod_uid: str, container_name: str) -> str:
    """The kubelet's ``(pod: %s, container: %s)`` of its state validation errors."""
    return (
        f"(pod: {quote(pod_uid, style='bare')}, container: {quote(container_name, style='bare')})"
    )
