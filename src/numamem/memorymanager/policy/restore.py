"""Validating a restored state when the Static policy starts (kubelet ``validateState``).

An empty state becomes the default machine state (and must then hold no blocks). Otherwise
every stored block is replayed onto the machine as it is now and the result compared with
the stored machine state: under ``memory-drift-tolerance=off`` as the kubelet compares them
(``areMachineStatesEqual``: group sums of free and reserved), else as
:mod:`numamem.memorymanager.state.drift` decides; an accepted change re-baselines the state.
A pod allocated as a whole (KEP-5526) is replayed by its pod-level blocks, not its
containers'.

Deliberate deviations from upstream:

* ``fit`` (numamem's default) and a bound accept a machine that changed since the state was
  written, as long as every stored block keeps its nodes; the kubelet refuses to start until
  someone deletes the file (:mod:`numamem.memorymanager.state.drift`);
* a pod-level entry without container entries (an allocation a kubelet left half written,
  kubernetes#141993) refuses the start, naming the pods, as kubernetes#141994 proposes. The
  kubelet accepts it, and its pod then looks allocated while nothing is reserved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from numamem.config.model import FeatureGates
from numamem.errors import StateMismatchError
from numamem.logging import get_logger
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.state.arithmetic import machine_states_equal, replay_assignments
from numamem.memorymanager.state.differences import pod_label
from numamem.memorymanager.state.drift import OFF, Verdict, check_restore
from numamem.memorymanager.state.model import State
from numamem.memtypes import Block, MachineState

_log = get_logger("memorymanager")


@dataclass(frozen=True)
class Restored:
    """What :func:`validate_state` found. ``drift``: (node, type) -> TotalMemSize now minus
    stored; ``verdict``: the drift check's, when it ran. Each None when there was nothing to
    compare (an empty state; the verdict also when the state matched exactly)."""

    drift: dict[tuple[int, str], int] | None = None
    verdict: Verdict | None = None


def validate_state(
    state: State,
    default: Callable[[], MachineState],
    options: StaticOptions,
    gates: FeatureGates,
    pod_names: Mapping[str, tuple[str, str]] | None = None,
) -> Restored:
    """Validate ``state`` (restored from the store) against ``default()``, the default machine
    state now (a new one per call: the checks consume it), and set its machine state to the
    default (an empty state) or the re-baselined one (an accepted change).

    Raises StateMismatchError whose first line is the kubelet's text, followed by what
    differs, the containers concerned and the fix; ``pod_names`` (uid -> namespace, name,
    where recorded) name the pods.
    """
    machine_state = state.get_machine_state()
    containers = state.get_memory_assignments()
    pod_entries = state.get_pod_memory_assignments() if gates.pod_level_resource_managers else {}
    _refuse_orphan_pod_entries(containers, pod_entries, pod_names or {}, options.state_file)
    # Pods allocated as a whole are accounted by their pod-level blocks.
    assignments = podlevel.accounted_assignments(containers, pod_entries)
    if not machine_state:
        if assignments:
            raise StateMismatchError(
                "[memorymanager] machine state can not be empty when it has memory assignments"
            )
        state.set_machine_state(default())
        return Restored()
    if options.tolerance.mode == OFF:
        expected = default()
        try:
            replay_assignments(expected, assignments)
        except StateMismatchError as err:
            raise StateMismatchError(
                f"{err}\n  in {options.state_file}; fix: drain the node, remove "
                f"{options.state_file} and restart numamem"
            ) from err
        if machine_states_equal(machine_state, expected):
            return Restored(_no_drift(expected))
    verdict = check_restore(
        machine_state,
        assignments,
        default(),
        options.tolerance,
        options.auto_bound,
        pod_names,
    )
    if not verdict.accepted:
        raise StateMismatchError(verdict.report(options.state_file))
    if verdict.rebaseline is not None:
        _log.warning(
            "the machine changed since the state was written; every stored block still fits "
            "and keeps its nodes: re-baselined",
            tolerance=options.tolerance.text,
            changes=[d.line() for d in verdict.differences],
        )
        state.set_machine_state(verdict.rebaseline)
    return Restored(verdict.drift, verdict)


def _refuse_orphan_pod_entries(
    containers: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
    pod_names: Mapping[str, tuple[str, str]],
    state_file: str,
) -> None:
    """A pod-level entry without container entries is an allocation a kubelet left half
    written (kubernetes#141993): refused, naming the pods, as kubernetes#141994 proposes.
    (The kubelet accepts it, and its pod then looks allocated while nothing is reserved.)"""
    orphans = podlevel.entries_without_containers(containers, pod_entries)
    if not orphans:
        return
    pods = ", ".join(pod_label(pod, pod_names) for pod in orphans)
    raise StateMismatchError(
        f"[memorymanager] (pod: {pods}, container: ) the pod-level memory assignment has no "
        "container assignments: an allocation interrupted before its containers were written "
        f"(kubernetes#141993)\n  in {state_file}; fix: drain the node, remove {state_file} "
        "and restart numamem"
    )


def _no_drift(state: MachineState) -> dict[tuple[int, str], int]:
    return {(n, name): 0 for n, node in state.items() if node for name in (node.memory_map or {})}
