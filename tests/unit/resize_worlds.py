"""The fake machines of the resize property tests (test_resize_properties.py,
test_resize_sequences.py, test_resize_pod_level_properties.py): each test draws its own
pods and operations on them."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from numamem.topology import HugePagePool, Machine, NUMANode

GI = 1024**3
HP_1G = 1048576
"""The 1Gi hugepage size in KiB, as sysfs names it."""
DISTANCES = st.integers(11, 40)
"""SLIT distances between two nodes (10: a node to itself)."""


@st.composite
def machines(
    draw: st.DrawFn,
    nodes: st.SearchStrategy[int],
    memory_gib: st.SearchStrategy[int],
    pages: st.SearchStrategy[int],
    distances: st.SearchStrategy[int] = DISTANCES,
    pages_in_memory: bool = False,
) -> Machine:
    """A machine of ``nodes`` NUMA nodes; node i has CPU i, ``memory_gib`` GiB of memory
    (plus its pages' GiB when ``pages_in_memory``), ``pages`` free 1Gi hugepages, and a
    drawn symmetric distance to every other node (10 to itself)."""
    count = draw(nodes)
    table = [[10 if a == b else 0 for b in range(count)] for a in range(count)]
    for a, b in itertools.combinations(range(count), 2):
        table[a][b] = table[b][a] = draw(distances)
    out = []
    for i in range(count):
        free = draw(pages)
        memory = draw(memory_gib) + (free if pages_in_memory else 0)
        pools = (HugePagePool(HP_1G, free, free),) if free else ()
        out.append(NUMANode(i, memory * GI, pools, cpus=(i,), distances=tuple(table[i])))
    return Machine(tuple(out))
