"""Fixtures of the NRI plugin tests (test_nri_plugin*.py, test_nri_concurrency.py); the
suite's own are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.nri_support import nri_threads


@pytest.fixture
def no_leaked_nri_threads() -> Iterator[None]:
    """Fails the test when it leaves an NRI endpoint's or a plugin's thread running. Use it
    as ``pytestmark = pytest.mark.usefixtures("no_leaked_nri_threads")``."""
    before = nri_threads()
    yield
    assert nri_threads() == before


@pytest.fixture
def nri_sock(short_root: Path) -> Path:
    """Where the scripted runtime listens: a short path, for the 107-byte socket limit."""
    return short_root / "nri.sock"
