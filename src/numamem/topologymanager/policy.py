"""Topology-manager policies: options, NUMA info, and the hint merge.

Follows the kubelet's ``policy.go``/``numa_info.go``/``policy_options.go``:
providers' hints are filtered (no hints = a preferred any-NUMA hint; an empty
list = a non-preferred any-NUMA hint), every permutation is merged by AND of
the affinities (preferred iff all hints are preferred and all non-nil
affinities are equal), and the best candidate is chosen by ``compare``:
preferred first, then the narrowest (or closest, with
``prefer-closest-numa-nodes``) mask, steering non-preferred results toward the
largest of the per-resource minimal widths.

Resource lists are visited in resource-name order (Go visits map keys in
random order; numamem is deterministic).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from numamem.errors import ConfigError
from numamem.topology import Machine
from numamem.topologymanager import bitmask

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
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8


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

ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None
"""One provider's answer: None or {} = no preference; a None list = no preference for
that resource; an empty list = no possible affinity for that resource."""


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_policy_options(options: Mapping[str, str]) -> tuple[PolicyOptions, list[str]]:
    """``NewPolicyOptions``; returns the options and warnings. Errors carry kubelet's texts."""
    prefer = False
    max_nodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    warnings = []
    for name, value in options.items():
        if name == PREFER_CLOSEST_NUMA_NODES:
            if value in _TRUE:
                prefer = True
            elif value in _FALSE:
                prefer = False
            else:
                raise ConfigError(
                    f'bad value for option "{name}": strconv.ParseBool: parsing "{value}": invalid syntax'
                )
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
            if parsed > DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                warnings.append(
                    f"the value of {name} ({parsed}) is more than the default recommended value "
                    f"({DEFAULT_MAX_ALLOWABLE_NUMA_NODES})"
                )
            max_nodes = parsed
        else:
            raise ConfigError(f'unknown Topology Manager Policy option: "{name}"')
    return PolicyOptions(prefer, max_nodes), warnings


class NUMAInfo:
    """The machine's NUMA node ids and distances, as the merge needs them."""

    def __init__(self, machine: Machine, options: PolicyOptions) -> None:
        self.nodes = list(machine.node_ids)
        self.default_mask = bitmask.new_mask(self.nodes)
        self._machine = machine
        if options.prefer_closest_numa and not machine.has_distances:
            raise ConfigError(
                "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
            )

    def narrowest(self, m1: int, m2: int) -> int:
        return m1 if bitmask.is_narrower_than(m1, m2) else m2

    def closest(self, m1: int, m2: int) -> int:
        if m1.bit_count() != m2.bit_count():
            return self.narrowest(m1, m2)
        d1, d2 = self.average_distance(m1), self.average_distance(m2)
        if d1 == d2:
            return m1 if m1 < m2 else m2
        return m1 if d1 < d2 else m2

    def average_distance(self, mask: int) -> float:
        """Mean distance over all ordered pairs of the mask's nodes, self-pairs included."""
        bits = bitmask.get_bits(mask)
        if not bits:
            return 0.0
        total = 0
        for a in bits:
            for b in bits:
                total += self._machine.distance(a, b) or 0
        return total / (len(bits) * len(bits))


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """``filterProvidersHints``: one hint list per (provider, resource)."""
    lists: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            lists.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            resource_hints = hints[resource]
            if resource_hints is None:
                lists.append([TopologyHint(None, True)])
            elif len(resource_hints) == 0:
                lists.append([TopologyHint(None, False)])
            else:
                lists.append(list(resource_hints))
    return lists


def _max_of_min_affinity_counts(lists: Sequence[Sequence[TopologyHint]]) -> int:
    best = 0
    for hints in lists:
        narrowest: int | None = None
        for hint in hints:
            if hint.affinity is None:
                continue
            if narrowest is None or bitmask.is_narrower_than(hint.affinity, narrowest):
                narrowest = hint.affinity
        if narrowest is not None:
            best = max(best, narrowest.bit_count())
    return best


class HintMerger:
    """``HintMerger``: picks the best merged hint over all permutations."""

    def __init__(
        self,
        info: NUMAInfo,
        lists: Sequence[Sequence[TopologyHint]],
        policy_name: str,
        options: PolicyOptions,
    ) -> None:
        self.info = info
        self.lists = lists
        self.best_non_preferred = _max_of_min_affinity_counts(lists)
        self.prefer_closest = policy_name != SINGLE_NUMA_NODE and options.prefer_closest_numa

    def _compare_masks(self, current: _Merged, candidate: _Merged) -> _Merged:
        if candidate[0] == current[0]:
            return current
        if self.prefer_closest:
            best = self.info.closest(current[0], candidate[0])
        else:
            best = self.info.narrowest(current[0], candidate[0])
        return current if best == current[0] else candidate

    def _compare(self, current: _Merged | None, candidate: _Merged) -> _Merged | None:
        if candidate[0] == 0:
            return current
        if current is None:
            return candidate
        if not current[1] and candidate[1]:
            return candidate
        if current[1] and not candidate[1]:
            return current
        if current[1] and candidate[1]:
            return self._compare_masks(current, candidate)
        best = self.best_non_preferred
        c, d = current[0].bit_count(), candidate[0].bit_count()
        if c > best:
            return self._compare_masks(current, candidate)
        if c == best:
            return current if d != best else self._compare_masks(current, candidate)
        if d > best:
            return current
        if d == best:
            return candidate
        if d > c:
            return candidate
        if d < c:
            return current
        return self._compare_masks(current, candidate)

    def merge(self) -> TopologyHint:
        default = self.info.default_mask
        best: _Merged | None = None
        for permutation in itertools.product(*self.lists):
            best = self._compare(best, _merge_permutation(default, permutation))
        if best is None:
            return TopologyHint(default, False)
        return TopologyHint(best[0], best[1])


_Merged = tuple[int, bool]
"""A merged permutation: (affinity mask, preferred)."""


def _merge_permutation(default: int, permutation: Sequence[TopologyHint]) -> _Merged:
    preferred = True
    merged = default
    first: int | None = None
    for hint in permutation:
        if hint.affinity is not None:
            if first is None:
                first = hint.affinity
            elif hint.affinity != first:
                preferred = False
            merged &= hint.affinity
        if not hint.preferred:
            preferred = False
    return merged, preferred


class TopologyPolicy:
    """One of the four kubelet policies, bound to a machine."""

    def __init__(self, name: str, info: NUMAInfo, options: PolicyOptions) -> None:
        self.name = name
        self.info = info
        self.options = options

    def merge(self, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        """The merged hint and whether the pod (or container) is admitted."""
        if self.name == NONE:
            return NO_AFFINITY, True
        lists = filter_providers_hints(providers_hints)
        if self.name == SINGLE_NUMA_NODE:
            lists = [
                [
                    h
                    for h in hints
                    if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)
                ]
                for hints in lists
            ]
        best = HintMerger(self.info, lists, self.name, self.options).merge()
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
        raise ConfigError(
            f"unsupported on machines with more than {opts.max_allowable_numa_nodes} NUMA Nodes"
        )
    if name not in POLICIES:
        raise ConfigError(f'unknown policy: "{name}"')
    return TopologyPolicy(name, info, opts), warnings
