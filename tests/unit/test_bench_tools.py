"""The bench's documented commands run: the profiler of each operation, the README generator."""

from __future__ import annotations

import pytest

from bench import profile


@pytest.mark.parametrize("operation", profile.OPERATIONS)
def test_the_documented_profile_command_profiles_each_operation(
    operation: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bench.profile OP`` (README "Performance") runs the call it names and
    prints its profile; a call that raised (a wrong request, a refused state) fails here."""
    assert profile.main([operation, "--calls", "5", "--warmup", "3", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert f"{operation}: 5 calls" in out
    assert "Ordered by: internal time" in out and "Ordered by: cumulative time" in out
