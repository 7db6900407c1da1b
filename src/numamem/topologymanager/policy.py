"""Topology-manager policies: options, NUMA info, and the hint merge.

Follows the kubelet's ``policy.go``/``numa_info.go``/``policy_options.go``:
providers' hints are filtered (no hints = a preferred any-NUMA hint; an empty
list = a non-preferred any-NUMA hint), and the best merged hint is the one
kubelet's ``HintMerger`` would pick from every permutation (see
:mod:`numamem.topologymanager.merge` for how it is found without visiting
them): preferred first, then the narrowest (or closest, with
``prefer-closest-numa-nodes``) mask, steering non-preferred results toward the
largest of the per-resource minimal widths.

``restrict-to-cpu-numa-nodes=true`` (the option proposed upstream in
kubernetes/kubernetes#138172) makes the topology manager and every provider
see only the NUMA nodes that have CPUs: the default mask, the node count that
``max-allowable-numa-nodes`` limits, and the memory manager's hints and
allocations. Memory-only nodes (GPU memory, CXL expanders) then take no part in
admission.

Resource lists are visited in resource-name order (Go visits map keys in
random order; the merge's result does not depend on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from numamem.errors import ConfigError
from numamem.topology import Machine
from numamem.topologymanager import bitmask
from numamem.topologymanager.hintfamily import NARROWEST, HintFamily, HintList, Order
from numamem.topologymanager.merge import merge
from numamem.work import Work

NONE = "none"
BEST_EFFORT = "best-effort"
RESTRICTED = "restricted"
SINGLE_NUMA_NODE = "single-numa-node"
POLICIES = (NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPES = (SCOPE_CONTAINER, SCOPE_POD)

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
RESTRICT_TO_CPU_NUMA_NODES = "restrict-to-cpu-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
MAX_MAX_ALLOWABLE_NUMA_NODES = 64


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """``TopologyHint``: ``affinity`` is a bitmask, or None for "any NUMA node"."""

    affinity: int | None
    preferred: bool

    @property
    def nodes(self) -> list[int]:
        return [] if self.affinity is None else bitmask.get_bits(self.affinity)


NO_AFFINITY = TopologyHint(None, False)
"""What ``Store.GetAffinity`` returns when nothing was stored."""

ProviderHints = Mapping[str, Sequence[TopologyHint] | HintFamily | None] | None
"""One provider's answer: None or {} = no preference; a None list = no preference for
that resource; an empty list = no possible affinity for that resource. A list may be a
:class:`~numamem.topologymanager.hintfamily.HintFamily` (hints given by rule)."""


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    restrict_to_cpu_numa_nodes: bool = False


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_policy_options(options: Mapping[str, str]) -> tuple[PolicyOptions, list[str]]:
    """``NewPolicyOptions``; returns the options and warnings. Errors carry kubelet's texts."""
    prefer = False
    restrict = False
    max_nodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    warnings = []
    for name, value in options.items():
        if name in (PREFER_CLOSEST_NUMA_NODES, RESTRICT_TO_CPU_NUMA_NODES):
            if value in _TRUE:
                flag = True
            elif value in _FALSE:
                flag = False
            else:
                raise ConfigError(
                    f'bad value for option "{name}": strconv.ParseBool: parsing "{value}": invalid syntax'
                )
            if name == PREFER_CLOSEST_NUMA_NODES:
                prefer = flag
            else:
                restrict = flag
        elif name == MAX_ALLOWABLE_NUMA_NODES:
            text = value.strip() if value.strip() == value else value
            try:
                parsed = int(text) if text.lstrip("+-").isdigit() else None
            except ValueError:
                parsed = None
            if parsed is None:
                raise ConfigError(
                    f'unable to convert policy option to integer "{name}": '
                    f'strconv.Atoi: parsing "{value}": invalid syntax'
                )
            if parsed < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise ConfigError(
                    f'the minimum value of "{name}" should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}'
                )
            if parsed > MAX_MAX_ALLOWABLE_NUMA_NODES:
                raise ConfigError(
                    f'the maximum value of "{name}" is {MAX_MAX_ALLOWABLE_NUMA_NODES}, got {parsed} '
                    "(kubelet's masks have 64 bits; numamem admits in bounded time up to 64 nodes)"
                )
            if parsed > DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                warnings.append(
                    f"the value of {name} ({parsed}) is more than the default recommended value "
                    f"({DEFAULT_MAX_ALLOWABLE_NUMA_NODES})"
                )
            max_nodes = parsed
        else:
            raise ConfigError(f'unknown Topology Manager Policy option: "{name}"')
    return PolicyOptions(prefer, max_nodes, restrict), warnings


class NUMAInfo:
    """The NUMA node ids the topology manager works with, and their distances.

    ``nodes`` are every node of the machine, or only those with CPUs under
    ``restrict-to-cpu-numa-nodes``.
    """

    def __init__(self, machine: Machine, options: PolicyOptions) -> None:
        if options.restrict_to_cpu_numa_nodes:
            self.nodes = [n.id for n in machine.nodes if n.cpus]
            if not self.nodes:
                raise ConfigError(
                    f"{RESTRICT_TO_CPU_NUMA_NODES}=true: no NUMA node of this machine has CPUs "
                    "(cpulist); drop the option"
                )
        else:
            self.nodes = list(machine.node_ids)
        self.default_mask = bitmask.new_mask(self.nodes)
        self._machine = machine
        if options.prefer_closest_numa and not machine.has_distances:
            raise ConfigError(
                "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
            )

    def distance(self, a: int, b: int) -> int:
        """The sysfs distance from node ``a`` to node ``b`` (0 when the kernel reports none)."""
        return self._machine.distance(a, b) or 0

    @cached_property
    def closest(self) -> Order:
        """kubelet's ``Closest`` among masks of one size (``prefer-closest-numa-nodes``): the
        smaller average distance over ordered pairs of nodes, self-pairs included, then the
        smaller mask (for one size, comparing sums of distances compares the averages)."""
        return Order({a: {b: self.distance(a, b) for b in self.nodes} for a in self.nodes})


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[HintList]:
    """``filterProvidersHints``: one hint list per (provider, resource)."""
    lists: list[HintList] = []
    for hints in providers_hints:
        if not hints:
            lists.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            resource_hints = hints[resource]
            if resource_hints is None:
                lists.append([TopologyHint(None, True)])
            elif isinstance(resource_hints, HintFamily):
                lists.append(
                    [TopologyHint(None, False)] if resource_hints.is_empty() else resource_hints
                )
            elif len(resource_hints) == 0:
                lists.append([TopologyHint(None, False)])
            else:
                lists.append(list(resource_hints))
    return lists


def single_numa_hints(hints: HintList) -> list[TopologyHint]:
    """The single-numa-node policy keeps preferred hints of one node (or any node)."""
    if isinstance(hints, HintFamily):
        out = []
        for mask in hints.preferred_by_value():
            if mask.bit_count() != 1:
                break  # every preferred hint has the same size
            out.append(TopologyHint(mask, True))
        return out
    return [
        TopologyHint(h.affinity, True)
        for h in hints
        if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)
    ]


class TopologyPolicy:
    """One of the four kubelet policies, bound to a machine."""

    def __init__(self, name: str, info: NUMAInfo, options: PolicyOptions) -> None:
        self.name = name
        self.info = info
        self.options = options

    def merge(
        self, providers_hints: Sequence[ProviderHints], work: Work | None = None
    ) -> tuple[TopologyHint, bool]:
        """The merged hint and whether the pod (or container) is admitted; the search is
        charged to ``work`` (SearchBudgetError or DeadlineExceededError past it)."""
        if self.name == NONE:
            return NO_AFFINITY, True
        lists = filter_providers_hints(providers_hints)
        if self.name == SINGLE_NUMA_NODE:
            lists = [single_numa_hints(hints) for hints in lists]
        closest = self.name != SINGLE_NUMA_NODE and self.options.prefer_closest_numa
        mask, preferred = merge(
            lists, self.info.default_mask, self.info.closest if closest else NARROWEST, work
        )
        best = TopologyHint(mask, preferred)
        if self.name == SINGLE_NUMA_NODE and best.affinity == self.info.default_mask:
            best = TopologyHint(None, best.preferred)
        if self.name == BEST_EFFORT:
            return best, True
        return best, best.preferred


def new_policy(
    name: str, machine: Machine, options: Mapping[str, str] | None = None
) -> tuple[TopologyPolicy, list[str]]:
    """``topologymanager.NewManager``'s policy part; returns the policy and option warnings."""
    opts, warnings = parse_policy_options(options or {})
    info = NUMAInfo(machine, opts)
    if name != NONE and len(info.nodes) > opts.max_allowable_numa_nodes:
        # kubelet's text, then what would help (the kubelet says nothing more).
        helps = f"{MAX_ALLOWABLE_NUMA_NODES}={len(info.nodes)}"
        if len(info.nodes) > MAX_MAX_ALLOWABLE_NUMA_NODES:
            helps = f"{RESTRICT_TO_CPU_NUMA_NODES}=true, or the topology manager policy none"
        elif not options or RESTRICT_TO_CPU_NUMA_NODES not in (options or {}):
            cpu_nodes = sum(1 for n in machine.nodes if n.cpus)
            if cpu_nodes <= opts.max_allowable_numa_nodes and cpu_nodes < len(info.nodes):
                helps += f" or {RESTRICT_TO_CPU_NUMA_NODES}=true"
        raise ConfigError(
            f"unsupported on machines with more than {opts.max_allowable_numa_nodes} NUMA Nodes "
            f"(this one has {len(info.nodes)}; set --topology-manager-policy-options {helps})"
        )
    if name not in POLICIES:
        raise ConfigError(f'unknown policy: "{name}"')
    return TopologyPolicy(name, info, opts), warnings
