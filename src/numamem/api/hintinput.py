"""Hints at the gRPC edge: proto messages -> the topology manager's types, or INVALID_ARGUMENT /
RESOURCE_EXHAUSTED.

The ``affinity`` Allocate and AllocatePod take (the merged hint the topology manager chose),
and the ``other_providers`` Admit and Explain take (the hints of the kubelet's other hint
providers, per container and for the pod). Every NUMA id must be a node of the machine, every
container named must be in the pod, and a resource marked ``no_preference`` lists no hints.
What one container (or the pod) gets from all providers together is bounded before anything is
converted (:data:`MAX_HINT_LISTS`, :data:`MAX_HINTS_PER_STEP`), so that reading the hints stays
a small part of the search budget. Messages name the field as a path, as
:mod:`numamem.api.validation` does. Pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.api.validation import MAX_RESOURCES, check_string, container_in_pod
from numamem.errors import InvalidArgumentError, LimitExceededError, quote
from numamem.pod import Pod
from numamem.topology import Machine
from numamem.topologymanager import bitmask
from numamem.topologymanager.admission import GivenHints
from numamem.topologymanager.policy import ProviderHints, TopologyHint
from numamem.v1 import memorymanager_pb2

MAX_PROVIDERS = 16
MAX_HINTS_PER_RESOURCE = 65536
MAX_HINT_LISTS = 64
"""Hint lists (one per provider and resource) Admit and Explain accept for one container (or,
pod scope, for the pod), summed over the other providers."""
MAX_HINTS_PER_STEP = 65536
"""Hints accepted for one container (or the pod), summed over every list of every provider:
reading them stays a small part of the search budget (numamem.work.SEARCH_BUDGET)."""


def max_hints_per_list(machine: Machine) -> int:
    """A list holds at most one hint per (mask of the machine's nodes or any node, preferred),
    2^(n+1) distinct hints on n nodes; more are repeats. Capped at MAX_HINTS_PER_RESOURCE."""
    return min(MAX_HINTS_PER_RESOURCE, 2 << len(machine.node_ids))


def affinity_from_proto(
    msg: memorymanager_pb2.TopologyHint, machine: Machine, field: str = "affinity"
) -> TopologyHint:
    """A TopologyHint; an empty ``numa_nodes`` means no affinity (any node)."""
    if len(msg.numa_nodes) > len(machine.node_ids):
        raise InvalidArgumentError(
            f"{field}.numa_nodes: {len(msg.numa_nodes)} NUMA ids, more than the "
            f"{len(machine.node_ids)} nodes of this machine"
        )
    nodes = list(msg.numa_nodes)
    if len(set(nodes)) != len(nodes):
        raise InvalidArgumentError(f"{field}.numa_nodes: duplicate NUMA ids in {nodes}")
    for node in nodes:
        if not machine.has_node(node):
            raise InvalidArgumentError(
                f"{field}.numa_nodes: NUMA node {node} does not exist on this machine "
                f"(nodes: {', '.join(map(str, machine.node_ids))})"
            )
    if not nodes:
        return TopologyHint(None, msg.preferred)
    return TopologyHint(bitmask.new_mask(nodes), msg.preferred)


def other_providers_from_proto(
    msgs: Sequence[memorymanager_pb2.ProviderHints],
    pod: Pod,
    machine: Machine,
    field: str = "other_providers",
) -> list[GivenHints]:
    """Other providers' hints as :class:`GivenHints`: every container named must be in ``pod``,
    every NUMA id on the machine, and a resource marked ``no_preference`` must list no hints."""
    if len(msgs) > MAX_PROVIDERS:
        raise LimitExceededError(f"{field}: more than {MAX_PROVIDERS} providers ({len(msgs)})")
    _check_steps(msgs, pod, field)
    out = []
    for i, msg in enumerate(msgs):
        where = f"{field}[{i}]"
        name = check_string(msg.provider, f"{where}.provider")
        containers: dict[str, ProviderHints] = {}
        for ctr in sorted(msg.containers):
            container_in_pod(pod, ctr, f"{where}.containers")
            containers[ctr] = _resource_hints(
                msg.containers[ctr], machine, f"{where}.containers[{quote(ctr)}]"
            )
        pod_hints = (
            _resource_hints(msg.pod, machine, f"{where}.pod") if msg.HasField("pod") else None
        )
        out.append(GivenHints(name, containers, pod_hints))
    return out


def _check_steps(msgs: Sequence[memorymanager_pb2.ProviderHints], pod: Pod, field: str) -> None:
    """The bounds on what all providers give one container (or the pod) together, counted on
    the messages before anything is converted."""
    steps = [
        (
            f"{field}[*].containers[{quote(c.name)}]",
            [m.containers[c.name] for m in msgs if c.name in m.containers],
        )
        for c in pod.all_containers()
    ]
    steps.append((f"{field}[*].pod", [m.pod for m in msgs if m.HasField("pod")]))
    for where, answers in steps:
        lists = sum(len(a.resources) for a in answers)
        if lists > MAX_HINT_LISTS:
            raise LimitExceededError(
                f"{where}: {lists} hint lists over all providers, more than {MAX_HINT_LISTS} "
                "(one per provider and resource)"
            )
        hints = sum(len(h.hints) for a in answers for h in a.resources.values())
        if hints > MAX_HINTS_PER_STEP:
            raise LimitExceededError(
                f"{where}: {hints} hints over all providers, more than {MAX_HINTS_PER_STEP}"
            )


def _resource_hints(
    msg: memorymanager_pb2.ResourceHints, machine: Machine, field: str
) -> ProviderHints:
    if len(msg.resources) > MAX_RESOURCES:
        raise LimitExceededError(
            f"{field}.resources: more than {MAX_RESOURCES} resources ({len(msg.resources)})"
        )
    out: dict[str, list[TopologyHint] | None] = {}
    for resource in sorted(msg.resources):
        where = f"{field}.resources[{quote(resource)}]"
        check_string(resource, f"{field}.resources key")
        hints = msg.resources[resource]
        most = max_hints_per_list(machine)
        if len(hints.hints) > most:
            raise LimitExceededError(
                f"{where}.hints: more than {most} hints ({len(hints.hints)}; a list on "
                f"{len(machine.node_ids)} NUMA nodes has at most {most} distinct ones)"
            )
        if hints.no_preference:
            if hints.hints:
                raise InvalidArgumentError(
                    f"{where}: no_preference is set but {len(hints.hints)} hints are given; "
                    "send either (no_preference is the kubelet's nil list)"
                )
            out[resource] = None
            continue
        out[resource] = [
            affinity_from_proto(h, machine, f"{where}.hints[{j}]")
            for j, h in enumerate(hints.hints)
        ]
    return out
