"""pytest fixtures of the containerd harness (registered in tests/conftest.py).

``containerd_dist`` is parametrized over the builds of :data:`instance.DISTRIBUTIONS`
(ids ``containerd-1.7``, ``containerd-2.x``), so every test using these fixtures runs
on each. It skips only where the harness cannot run, saying which
(:func:`tests.containerd.available.build`): not root, no cpuset cgroup controller, or no
Debian registry on a first download (naming the URL tried).
``containerd_factory`` makes private instances (started, images imported, unless
``start=False``) and at teardown cleans each up and fails the test if anything is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.containerd import available
from tests.containerd.instance import DISTRIBUTIONS, Containerd, Distribution
from tests.containerd.kubelet import Kubelet


def _distribution(name: str) -> Distribution:
    """The build ``name``, fetched once per machine (then cached); skips saying why not."""
    got = available.build(name)
    if isinstance(got, str):
        pytest.skip(got)
    return got


@pytest.fixture(params=list(DISTRIBUTIONS), ids=[f"containerd-{n}" for n in DISTRIBUTIONS])
def containerd_dist(request: pytest.FixtureRequest) -> Distribution:
    """The containerd build of this parameter, fetched once per machine (then cached)."""
    return _distribution(request.param)


@pytest.fixture(
    scope="module", params=list(DISTRIBUTIONS), ids=[f"containerd-{n}" for n in DISTRIBUTIONS]
)
def shared_containerd(request: pytest.FixtureRequest) -> Iterator[Containerd]:
    """One started private containerd of this parameter for a whole test module (each
    starts in about 2 s): its tests must leave it as they found it (remove their pods);
    cleaned up, and checked for what it left, after the module."""
    inst = Containerd(_distribution(request.param))
    try:
        inst.start()
        inst.import_images()
        yield inst
    finally:
        left = inst.cleanup()
    if left:
        pytest.fail("the containerd harness left behind:\n" + "\n".join(left))


@pytest.fixture
def containerd_factory(containerd_dist: Distribution) -> Iterator[Callable[..., Containerd]]:
    """``make(start=True, **Containerd kwargs)``: a private containerd of this parameter."""
    made: list[Containerd] = []

    def make(start: bool = True, **kwargs: Any) -> Containerd:
        inst = Containerd(containerd_dist, **kwargs)
        made.append(inst)
        if start:
            inst.start()
            inst.import_images()
        return inst

    yield make
    left = [f"{inst.base}: {line}" for inst in made for line in inst.cleanup()]
    if left:
        pytest.fail("the containerd harness left behind:\n" + "\n".join(left))


@pytest.fixture
def containerd(containerd_factory: Callable[..., Containerd]) -> Containerd:
    """A started private containerd with the test images, cleaned up after the test."""
    return containerd_factory()


@pytest.fixture
def kubelet(containerd: Containerd) -> Kubelet:
    """Runs pods on ``containerd`` the way the kubelet does."""
    return Kubelet(containerd)
