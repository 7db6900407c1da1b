"""pytest fixtures for clients of numamem: ``pytest_plugins = ["numamem.testing.fixtures"]``.

``numamem_server`` is an :class:`~numamem.testing.server.InProcessServer` on a
2-node fake machine with the Static policy; use ``server.client`` (a typed
:class:`~numamem.client.NumamemClient`) or ``server.socket`` for your own
channel.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from numamem.testing.server import InProcessServer, serve_in_process


@pytest.fixture
def numamem_server() -> Iterator[InProcessServer]:
    with serve_in_process() as server:
        yield server
