"""The lock-free memoised property of the per-call search objects."""

from __future__ import annotations

from numamem.memorymanager.search.memo import memoized


class _Counted:
    def __init__(self) -> None:
        self.calls = 0

    @memoized
    def value(self) -> int:
        """The doc."""
        self.calls += 1
        return self.calls * 10


def test_memoized_computes_once_per_instance_and_keeps_the_value_in_its_dict() -> None:
    a, b = _Counted(), _Counted()
    assert "value" not in a.__dict__
    assert (a.value, a.value, a.calls) == (10, 10, 1)
    assert a.__dict__["value"] == 10
    assert (b.value, b.calls) == (10, 1)
    del a.__dict__["value"]  # forgetting it computes it again
    assert (a.value, a.calls) == (20, 2)


def test_memoized_on_the_class_is_the_descriptor() -> None:
    descriptor = _Counted.__dict__["value"]
    assert _Counted.value is descriptor
    assert descriptor.__doc__ == "The doc."
    assert descriptor.name == "value"
