"""The ``node`` fixture of the NRI tests on the scripted runtime (test_nri_*.py); the
suite's own fixtures are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from numamem.testing.daemon import DaemonProcess
from tests.e2e.nri_node import Node, started_node


@pytest.fixture
def node(short_root: Path, daemon_factory: list[DaemonProcess]) -> Iterator[Node]:
    """The standard fake 2-node machine (16 GiB, 512 2Mi and 4 1Gi pages a node), Static,
    with ``numamem nri``'s plugin registered with containerd 2.x's scripted runtime."""
    with started_node(short_root, daemon_factory) as n:
        yield n
