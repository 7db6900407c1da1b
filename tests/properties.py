"""How many examples a hypothesis property test runs: few in ``make test``, many in ``make soak``.

A property test names its ``make test`` count with :func:`examples`::

    @settings(max_examples=examples(60), deadline=None)

``NUMAMEM_PROPERTY_EXAMPLES=N`` (``make soak``: ``SOAK_PROPERTY_EXAMPLES``, 1000) makes every
property test run N examples instead, those without a count of their own included (the
hypothesis profile of tests/conftest.py). The differential tests against the kubelet's
algorithms have their own variable, ``NUMAMEM_DIFFERENTIAL_EXAMPLES`` (``make soak``:
``SOAK_EXAMPLES``, 3000).
"""

from __future__ import annotations

import os

PROPERTY_EXAMPLES = int(os.environ.get("NUMAMEM_PROPERTY_EXAMPLES") or 0) or None
"""The examples every property test runs when set (``make soak``); None: each its own count."""

DEFAULT_EXAMPLES = 100
"""What a property test without a count of its own runs in ``make test`` (hypothesis's default)."""


def examples(make_test: int) -> int:
    """``make_test``, or ``NUMAMEM_PROPERTY_EXAMPLES`` when that is set."""
    return PROPERTY_EXAMPLES or make_test
