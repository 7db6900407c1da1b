"""Why each NUMA mask is or is not a hint: the verdicts ``Explain`` shows.

The first masks in kubelet's order (fewest nodes first, then lexicographic)
get a verdict with the reason of the first test they fail (the tests are
defined once, :meth:`~numamem.memorymanager.search.rules.HintRules.failure`; this
module words its findings); the rest are counted, not visited: a machine of n
nodes has 2^n - 1 masks.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.memorymanager.search.rules import Failure, HintRules
from numamem.quantity import format_bytes
from numamem.topologymanager import bitmask

MAX_EXPLAINED_MASKS = 256
"""Explain lists the first masks (smallest first) and counts the rest: a 16-node machine has
65,535 masks, far more than anyone reads or a gRPC message holds."""

MAX_REPORTED_COUNT = (1 << 64) - 1
"""Counts are uint64 on the wire; larger ones (over 64 nodes) are reported as this."""


def mask_verdicts(
    space: HintRules, limit: int = MAX_EXPLAINED_MASKS
) -> tuple[list[tuple[int, str]], int]:
    """(mask, why it is not a hint or "") for the first ``limit`` masks, and how many more exist."""
    items: list[tuple[int, str]] = []
    for mask, bits in bitmask.iterate_masks_with_bits(space.nodes):
        if len(items) >= limit:
            break
        items.append((mask, why_not(space, bits)))
    total = (1 << len(space.nodes)) - 1
    return items, min(total - len(items), MAX_REPORTED_COUNT)


def why_not(space: HintRules, bits: Sequence[int]) -> str:
    """The reason ``bits`` is not a hint (the first of kubelet's tests it fails), or ""."""
    failure = space.failure(bitmask.new_mask(bits), bits)
    return "" if failure is None else words(failure)


def words(failure: Failure) -> str:
    """What :meth:`HintRules.failure` found, as Explain says it."""
    if failure.test == 0:
        return f"node {failure.node} is not one of the nodes hints are made of"
    if failure.test == 1:
        if failure.missing:
            return f"node {failure.node} has no {failure.resource}"
        return (
            f"{failure.resource}: {format_bytes(failure.have)} allocatable < "
            f"{format_bytes(failure.need)} requested"
        )
    if failure.test in (2, 3):
        if failure.test == 3 and len(failure.cells) == 1:
            return f"node {failure.node} already holds single-NUMA allocations"
        return f"node {failure.node} belongs to the multi-NUMA group {list(failure.cells)}"
    extra = failure.reusable
    more = f" + {format_bytes(extra)} reusable from init containers" if extra else ""
    return (
        f"{failure.resource}: {format_bytes(failure.have)} free{more} < "
        f"{format_bytes(failure.need)} requested"
    )
