"""REVIEW (reviewnri), SOUND (checked, passes): after a 45 s daemon outage, does the plugin keep
failing creations while gRPC's reconnect backoff (1.6x per attempt, up to 120 s by default;
``DaemonLink`` uses ``NumamemClient``'s default channel) waits? It does not: the first creation
after the daemon is SERVING succeeds (grpcio 1.x on a unix socket). About 50 s."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from numamem.client import NumamemClient
from numamem.errors import NriStatusError
from numamem.testing.daemon import DaemonProcess
from tests.daemon import STATIC_ARGS
from tests.e2e.nri_node import GI, Node

pytestmark = pytest.mark.e2e


@pytest.fixture
def node(short_root: Path, daemon_factory: list[DaemonProcess]) -> Iterator[Node]:
    d = DaemonProcess(short_root, list(STATIC_ARGS))
    daemon_factory.append(d)
    d.start()
    n = Node(short_root, d)
    n.start_plugin()
    yield n
    n.close()


def test_creations_succeed_once_the_daemon_answers_again(node: Node) -> None:
    sandbox = node.run_pod("after-outage")
    node.daemon.stop(signal.SIGKILL)
    outage = time.monotonic()
    while time.monotonic() - outage < 45:  # the kubelet retries the creation meanwhile
        with pytest.raises(NriStatusError):
            node.create(sandbox, "app", GI)
        time.sleep(2)
    node.daemon.start()  # SERVING: health answers
    back = time.monotonic()
    with NumamemClient(node.daemon.socket, timeout=5) as fresh:
        assert fresh.get_state() is not None  # a new channel reaches it at once
    failures = []
    while True:
        try:
            node.create(sandbox, "app", GI)
            break
        except NriStatusError as err:
            failures.append(err.message[:90])
            assert time.monotonic() - back < 150, failures[-1]
            time.sleep(0.5)
    print(
        f"{len(failures)} creations failed over {time.monotonic() - back:.1f} s after the daemon "
        f"was back; first: {failures[:1]}"
    )
    assert failures == [], "creations failed while the daemon answered"
