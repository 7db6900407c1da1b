"""The hint merge (kubelet ``HintMerger.Merge``) without the cartesian product, exact on every input.

kubelet merges by visiting every permutation: one hint from each resource list
of each provider, ANDed together, and keeps the best by ``compare``. With 4
providers of 255 hints on 8 nodes that is 4·10^9 permutations; with the memory
manager's 2^n - 1 masks it never ends on large machines. This module computes
the same result from a property of ``compare``: it is a minimum under a fixed
order, so the result depends only on *which* merged hints exist, not on the
order they are visited in.

Why. A merged hint is (AND of the affinities, preferred); masks with no node
are ignored. ``compare`` keeps a preferred hint over a non-preferred one;
between two preferred hints it takes the narrower (fewer nodes, then the
smaller integer mask; with ``prefer-closest-numa-nodes``, fewer nodes, then
the smaller average distance, then the smaller mask) and keeps the current
one on equal masks. Between two non-preferred hints it steers toward ``B``,
the largest of the lists' narrowest hint sizes: working through its cases, a
hint of exactly B nodes beats every other size, a smaller size beats every
larger one, and among sizes below B the larger wins, above B the smaller; one
size ties break as for preferred hints. Every case is a comparison under the
one order (preferred, then rank of the size, then
:class:`~numamem.topologymanager.hintfamily.Order`), so the
visiting order never matters and the result is the minimum of the existing
merged hints under that order.

Which merged hints exist, and how the minimum is found:

* preferred ones need every list to offer the same mask as a preferred hint
  (or a preferred "any NUMA" hint): candidates come from the smallest list of
  preferred masks, each checked against every list by membership; when only
  the memory manager's rule-given list constrains, its best preferred member
  is searched directly (:meth:`~numamem.topologymanager.hintfamily.HintFamily.best_preferred`: by value, the first
  in integer order; by distance, a branch and bound over node sets by
  (size, distance sum), which is the kubelet's order);
* when none exists, the non-preferred minimum is searched among the nonzero
  ANDs of one hint per list. The distinct ANDs of the explicit lists (other
  providers' hints, and the memory manager's list when it has at most
  :data:`MATERIALIZE_MEMBERS` members) are found by
  :func:`~numamem.topologymanager.meets.distinct_meets` (reduced, then taken
  pairwise or counted). A rule-given list too large to list (the memory
  manager's on a large machine, once per memory type it serves) is met with
  each of those ANDs by its structure (:meth:`~numamem.topologymanager.hintfamily.HintFamily.best_meet`, exact for
  any number of copies).

Every step is charged to the caller's :class:`~numamem.work.Work`: a merge
either gives kubelet's answer or is refused with
:class:`~numamem.errors.SearchBudgetError` (or DeadlineExceededError) naming
what it was merging. Nothing is approximated.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.errors import SearchBudgetError
from numamem.topologymanager import bitmask
from numamem.topologymanager.hintfamily import NARROWEST, HintFamily, HintList, Order, size_rank
from numamem.topologymanager.meets import distinct_meets
from numamem.work import FIX, Work

MATERIALIZE_MEMBERS = 4096
"""A rule-given list with at most this many members is merged as an explicit list."""

Merged = tuple[int, bool]


def merge(
    lists: Sequence[HintList], default: int, order: Order = NARROWEST, work: Work | None = None
) -> Merged:
    """kubelet's merged hint over ``lists`` (already filtered: nil and empty lists replaced).

    ``default`` is the mask of every NUMA node the topology manager uses; every family
    must span only nodes of it.
    """
    work = Work() if work is None else work
    for lst in lists:
        if isinstance(lst, HintFamily) and lst.span() & ~default:
            raise ValueError("a hint family spans nodes outside the default mask")
    preferred = _best_preferred(lists, default, order, work)
    if preferred is not None:
        return preferred, True
    best_count = _best_non_preferred_count(lists, work)
    found = _best_non_preferred(lists, default, best_count, order, work)
    return (default, False) if found is None else (found, False)


# --- preferred ----------------------------------------------------------------------


def _best_preferred(
    lists: Sequence[HintList], default: int, order: Order, work: Work
) -> int | None:
    explicit: list[tuple[set[int], bool]] = []
    families: list[HintFamily] = []
    for lst in lists:
        if isinstance(lst, HintFamily):
            if not any(lst is f for f in families):
                families.append(lst)
            continue
        work.spend(len(lst))
        masks = {h.affinity for h in lst if h.preferred and h.affinity is not None}
        any_node = any(h.preferred and h.affinity is None for h in lst)
        explicit.append((masks, any_node))

    def accepted(mask: int) -> bool:
        return all(mask in masks or any_node for masks, any_node in explicit) and all(
            f.contains_preferred(mask) for f in families
        )

    order_key = order.charged_key(work)

    def full_key(mask: int) -> tuple[int, ...]:
        return (mask.bit_count(), *order_key(mask))

    constraining = [masks for masks, any_node in explicit if not any_node]
    if constraining:
        seed = min(constraining, key=len)
        work.spend(len(seed) * (len(explicit) + len(families) + 1))
        merged = {m & default for m in seed if m & default and accepted(m)}
        return min(merged, key=full_key) if merged else None
    if families:
        # Every explicit list offers a preferred "any NUMA" hint: the first family's best
        # preferred member that the other families also offer (members lie within default).
        others = families[1:]
        accept = (lambda m: all(f.contains_preferred(m) for f in others)) if others else None
        return families[0].best_preferred(order, accept)
    # Every list offers a preferred "any NUMA" hint: the default mask, and any one list's mask.
    union = {m & default for masks, _ in explicit for m in masks if m & default}
    union.add(default)
    return min(union, key=full_key)


# --- non-preferred ---------------------------------------------------------------------


def _best_non_preferred_count(lists: Sequence[HintList], work: Work) -> int:
    """``bestNonPreferredAffinityCount``: the largest of the lists' narrowest hint sizes."""
    best = 0
    for lst in lists:
        if isinstance(lst, HintFamily):
            count = lst.narrowest_count()
        else:
            work.spend(len(lst))
            narrowest: int | None = None
            for h in lst:
                if h.affinity is not None and (
                    narrowest is None or bitmask.is_narrower_than(h.affinity, narrowest)
                ):
                    narrowest = h.affinity
            count = None if narrowest is None else narrowest.bit_count()
        if count is not None:
            best = max(best, count)
    return best


def _best_non_preferred(
    lists: Sequence[HintList],
    default: int,
    best_count: int,
    order: Order,
    work: Work,
) -> int | None:
    order_key = order.charged_key(work)

    def rank(mask: int) -> tuple[int, ...]:
        return (*size_rank(mask.bit_count(), best_count), *order_key(mask))

    explicit: list[set[int]] = []
    families: list[HintFamily] = []
    copies_of: list[int] = []
    for lst in lists:
        if isinstance(lst, HintFamily):
            index = next((i for i, f in enumerate(families) if f is lst), None)
            if index is None:
                families.append(lst)
                copies_of.append(1)
            else:
                copies_of[index] += 1
            continue
        work.spend(len(lst))
        explicit.append({default if h.affinity is None else h.affinity & default for h in lst})
    by_rule: list[tuple[HintFamily, int]] = []
    for family, copies in zip(families, copies_of, strict=True):
        members = family.materialize(MATERIALIZE_MEMBERS)
        if members is None:
            by_rule.append((family, copies))
        else:
            explicit.extend(set(members) for _ in range(copies))
    if len(by_rule) > 1:
        # Several different rule-given lists too large to list (no provider gives them: the
        # memory manager answers with one). Listing all but one is what is left.
        for family, copies in by_rule[1:]:
            members = family.materialize(max(work.remaining(), 1))
            if members is None:
                raise SearchBudgetError(
                    f"{work.what}: {len(by_rule)} different rule-given hint lists too large to "
                    f"list within the {work.limit:,} steps of the search budget (SEARCH_BUDGET); "
                    "the merge meets only one of them by its structure. "
                    f"{FIX}"
                )
            explicit.extend(set(members) for _ in range(copies))
        by_rule = by_rule[:1]
    meets = distinct_meets(explicit, default, work)
    if not meets:
        return None
    if not by_rule:
        return min(meets, key=rank)
    family, copies = by_rule[0]

    def widest(e: int) -> tuple[int, int]:
        """The best size rank any AND within ``e`` can have."""
        return size_rank(min(best_count, e.bit_count()) if best_count >= 1 else 1, best_count)

    # The ANDs in order of the best size they can reach; each search starts from the best so
    # far (the answer is the minimum over all of them, whatever the order).
    found: int | None = None
    found_rank: tuple[int, ...] | None = None
    work.spend(len(meets))
    for e in sorted(meets, key=lambda e: (widest(e), e)):
        if found_rank is not None and widest(e) > found_rank[:2]:
            break
        work.spend(1)
        best = family.best_meet(e, copies, best_count, order, found_rank)
        if best is not None:
            found, found_rank = best, rank(best)
    return found
