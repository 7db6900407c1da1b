"""The daemon's component list: the services it serves (numamem.api.component)."""

from __future__ import annotations

import pytest

from numamem.api.component import StatelessComponent, service_names
from numamem.errors import StartupError


def serving(*names: str) -> StatelessComponent:
    component = StatelessComponent()
    component.service_names = names
    return component


def test_service_names_are_every_components_in_order() -> None:
    components = [serving("a.A", "a.B"), serving(), serving("c.C")]
    assert service_names(components) == ["a.A", "a.B", "c.C"]


@pytest.mark.parametrize(
    "components",
    [[serving("a.A"), serving("a.A")], [serving("a.A", "a.A")]],
    ids=["two components", "one component"],
)
def test_a_service_named_twice_refuses_the_start(components: list[StatelessComponent]) -> None:
    with pytest.raises(StartupError, match=r"a service is registered twice: \['a.A', 'a.A'\]"):
        service_names(components)
