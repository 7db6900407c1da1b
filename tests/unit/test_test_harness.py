"""The tests' own infrastructure (review 38b): ports picked again when taken, where the
tests' files go and when they are removed, property tests that ``make soak`` lengthens."""

from __future__ import annotations

import pytest

from tests.ports import ATTEMPTS, IN_USE, on_free_ports


def test_a_start_refused_for_a_port_in_use_is_tried_again_on_new_ports() -> None:
    """Two xdist workers may pick the same free port (bind 0, close): the second daemon is
    refused (SO_REUSEPORT off), and starts again on another."""
    tried: list[list[int]] = []

    def start(ports: list[int]) -> list[int]:
        tried.append(ports)
        if len(tried) < 3:
            raise AssertionError(f"daemon exited with 1: ... cannot listen: [Errno 98] {IN_USE}")
        return ports

    assert on_free_ports(start, 2) == tried[-1]
    assert len(tried) == 3 and all(len(p) == 2 for p in tried)


def test_any_other_refusal_and_the_last_attempt_are_raised() -> None:
    calls: list[list[int]] = []

    def other(ports: list[int]) -> None:
        calls.append(ports)
        raise AssertionError("daemon exited with 1: --socket: ...")

    with pytest.raises(AssertionError, match="--socket"):
        on_free_ports(other)
    assert len(calls) == 1

    def always(ports: list[int]) -> None:
        calls.append(ports)
        raise RuntimeError(IN_USE)

    with pytest.raises(RuntimeError, match=IN_USE):
        on_free_ports(always)
    assert len(calls) == 1 + ATTEMPTS
