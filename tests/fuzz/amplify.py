"""Short inputs that name a large amount of work (issue 38), for the cost oracle.

:data:`AMPLIFIERS` join the hostile strings of :mod:`tests.fuzz.generate` (any string
field may get one); the seeds (:mod:`tests.fuzz.seeds`) put cpulists of
:func:`amplifying_cpulists` in 5% of the metacache's assignments and a quantity or
resource name of :data:`QUANTITY_AMPLIFIERS`/:data:`NAME_AMPLIFIERS` in 5% of the pods
they admit or allocate. :mod:`tests.fuzz.cost` checks what each request costs.
"""

from __future__ import annotations

import random

from numamem.v1 import memorymanager_pb2 as mm

CPULIST_AMPLIFIERS: tuple[str, ...] = (
    "0-1048576",  # issue 38: 2^20 + 1 ids in 9 bytes
    "0-1048575",
    "1-1000000,0-999999",
    "0-4294967295",
    "0-" + "9" * 31,
    "0-8191,0-8191,0-8191,0-8191",
    "0-8192",
    "0-1023",
    ",".join(["1000"] * 13107),  # 65,534 characters of one id: just within MAX_CPULIST_BYTES
    ",".join(["1000"] * 20000),  # 99,999: past it
    ",".join(str(i) for i in range(1, 8192, 2)),  # the most ranges a cpulist can hold
)
"""Cpulists that name many ids in a few bytes (and the largest a machine has), and long
lists of short tokens (issue 38's second review: one per token cost ~35 bytes of memory per
byte of text before the text was bounded)."""
LONG_CPULIST = ",".join(["1000"] * ((4 * 2**20 - 8192) // 5))
"""A cpulist of short tokens that fills a request (4 MiB): one id."""
QUANTITY_AMPLIFIERS: tuple[str, ...] = (
    "1e1000000",
    "1e10000",
    "1e1001",
    "1e1000",
    "9" * 40 + "e1000",
    "1e-1000",
    "9" * 50 + "Ei",
    "8Ei",
)
"""Quantities whose value or exponent is huge beside their text."""
NAME_AMPLIFIERS: tuple[str, ...] = ("hugepages-1Ei", "hugepages-" + "9" * 40 + "Ki")
"""Resource names that name a huge page size."""
AMPLIFIERS = CPULIST_AMPLIFIERS + QUANTITY_AMPLIFIERS + NAME_AMPLIFIERS
"""Short texts that name a large amount of work (the cost oracle, tests/fuzz/cost.py)."""


def amplifying_cpulists(rng: random.Random) -> dict[int, str]:
    """1-20 NUMA ids, each with one of :data:`CPULIST_AMPLIFIERS`, or (10%) one id with
    :data:`LONG_CPULIST`."""
    if rng.random() < 0.1:
        return {0: LONG_CPULIST}
    return {numa: rng.choice(CPULIST_AMPLIFIERS) for numa in range(rng.randint(1, 20))}


def amplified_cpus(rng: random.Random, usual: dict[int, str]) -> dict[int, str]:
    """``usual``, or (5%) cpulists that name many ids in a few bytes (issue 38)."""
    return amplifying_cpulists(rng) if rng.random() < 0.05 else usual


def amplified_quantities(rng: random.Random, p: mm.Pod) -> mm.Pod:
    """``p``, or (5%) with a quantity that is huge beside its text, or a resource named after
    a huge page size, in its first container."""
    if rng.random() < 0.05:
        name, value = (
            rng.choice(("cpu", "memory", "hugepages-2Mi")),
            rng.choice(QUANTITY_AMPLIFIERS),
        )
        if rng.random() < 0.3:
            name, value = rng.choice(NAME_AMPLIFIERS), "2Mi"
        for values in (p.containers[0].requests, p.containers[0].limits):
            values[name] = value
    return p
