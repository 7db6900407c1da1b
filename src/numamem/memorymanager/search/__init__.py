"""The search over NUMA node sets: one request's hints by rule, and every search over them.

Owns the hints of one request on one machine state as kubelet's ``calculateHints`` lists
them (its four tests, the single nodes, the existing groups, the up-sets of unused nodes,
kubelet's order), given by rule instead of by visiting every mask (``rules``), the searches
that never list them (``findBestHint`` and ``extendTopologyManagerHint``, the merge's picks:
``space``, whose ``HintSpace`` is the :class:`~numamem.topologymanager.hintfamily.HintFamily` the
merge takes), the up-sets (``upsets``), the best subset under the merge's orders
(``best_subset``), sums over subsets (``subsets``), the lock-free memo (``memo``), and why a
mask is not a hint, as Explain words it (``explain``). Pure combinatorics over per-node
numbers: every step is charged to a :class:`~numamem.work.Work`.

May import: nothing else of the memory manager (no pods, policies or state); from numamem
only ``memtypes``, ``quantity``, ``work`` and ``topologymanager`` (bitmasks, hints, the
merge's orders). Inside, a module imports only those below it: ``explain`` | ``space`` >
``rules`` > ``upsets`` > ``best_subset`` > ``subsets`` | ``memo`` (pyproject's
import-linter contracts).
"""
