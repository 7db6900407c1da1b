"""Test tables whose first column names the case (the upstream tests' ``name`` field)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


def named_rows(table: Sequence[Sequence[Any]]) -> list[Any]:
    """``table``'s rows as ``pytest.param``s of the other columns, each with its first
    column as its test id."""
    return [pytest.param(*row[1:], id=row[0]) for row in table]
