"""Conversions remembered by the message's bytes (numamem.api.converted): the same answer as
converting again, refusals never remembered and always naming their own field, bounded."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numamem.api import validation
from numamem.api.converted import Remembered
from numamem.api.validation import CONTAINERS, ConvertedContainers
from numamem.errors import InvalidArgumentError
from numamem.v1 import memorymanager_pb2 as mm
from tests.properties import examples

quantities = st.sampled_from(["1", "100Mi", "2Gi", "0.5", "-1", "1.5", "x", "1e3", "2Mi"])
resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi", "nvidia.com/gpu"]),
    quantities,
    max_size=3,
)
containers = st.builds(
    mm.Container,
    name=st.sampled_from(["a", "b", ""]),
    requests=resources,
    limits=resources,
    restart_policy=st.sampled_from(["", "Always", "Never"]),
)


def outcome(convert: Callable[..., object], *args: object, **kwargs: object) -> object:
    try:
        return convert(*args, **kwargs)
    except InvalidArgumentError as err:
        return ("refused", str(err))


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(containers, st.booleans(), st.integers(0, 3)), max_size=8))
def test_a_remembered_conversion_is_the_conversion_and_a_refusal_names_its_field(
    calls: list[tuple[mm.Container, bool, int]],
) -> None:
    cache = ConvertedContainers()
    for msg, init, index in calls:
        field = f"pod.{'init_containers' if init else 'containers'}[{index}]"
        expected = outcome(validation._container, msg, field, init=init)
        assert outcome(cache.get, msg, field, init=init) == expected


def test_an_init_containers_conversion_is_not_an_app_containers() -> None:
    sidecar = mm.Container(name="s", restart_policy="Always")
    assert CONTAINERS.get(sidecar, "pod.init_containers[0]", init=True).restartable
    with pytest.raises(
        InvalidArgumentError, match=r"pod.containers\[2\].restart_policy: only init"
    ):
        CONTAINERS.get(sidecar, "pod.containers[2]", init=False)


def test_a_pod_refused_for_a_container_names_that_containers_place_every_time() -> None:
    bad = mm.Container(name="c", requests={"memory": "2Gi"}, limits={"memory": "1Gi"})
    good = mm.Container(name="g", requests={"memory": "1Gi"}, limits={"memory": "1Gi"})
    for index, containers in ((1, [good, bad]), (0, [bad, good])):
        pod = mm.Pod(uid="u", containers=containers)
        with pytest.raises(InvalidArgumentError, match=rf"pod.containers\[{index}\].requests"):
            validation.pod_from_proto(pod, None, validation.Limits())  # type: ignore[arg-type]


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self, *, deterministic: bool = False) -> bytes:
        return self.data


def test_remembered_is_bounded_and_converts_large_messages_every_time() -> None:
    cache: Remembered[int] = Remembered(max_entries=4, max_key_bytes=8)
    calls = []

    def convert(n: int) -> int:
        calls.append(n)
        return n

    for n in range(10):
        assert cache.get(_Bytes(b"%d" % n), lambda n=n: convert(n)) == n
    assert len(cache._items) == 4
    assert cache.get(_Bytes(b"9"), lambda: convert(-1)) == 9  # remembered
    assert cache.get(_Bytes(b"x" * 9), lambda: convert(99)) == 99
    assert cache.get(_Bytes(b"x" * 9), lambda: convert(98)) == 98  # too large: not kept
    with pytest.raises(ValueError):
        cache.get(_Bytes(b"e"), lambda: int("e"))
    assert cache.get(_Bytes(b"e"), lambda: 5) == 5  # the failure was not remembered
