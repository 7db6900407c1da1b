"""Hostile input against the real daemon beyond well-formed messages: undecodable payloads,
raw bytes, huge messages.

The fuzzer (tests/fuzz, tests/e2e/test_fuzz.py) sends well-formed hostile messages to
every RPC; here the daemon answers what does not even decode with a status code (never
INTERNAL or UNKNOWN), keeps SERVING, and its memory stays bounded.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import grpc
import psutil
import pytest

from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS
from tests.fuzz.catalogue import MAIN, RPCS

pytestmark = pytest.mark.e2e

BAD_FOR_INPUT = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
MAIN_RPCS = [rpc for rpc in RPCS if rpc.socket == MAIN]


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    d = DaemonProcess(
        short_tmpdir(),
        [  # the standard fake machine: 2 nodes
            *STATIC_ARGS,
            "--log-level",
            "error",
            "--max-message-bytes",
            str(1024 * 1024),
            "--topology-manager-policy",
            "restricted",
        ],
    )
    d.start()
    yield d
    d.kill()


def test_garbage_payloads_are_invalid_argument(daemon: DaemonProcess) -> None:
    rng = __import__("random").Random(5)
    with daemon.channel() as channel:
        for rpc in MAIN_RPCS:
            if rpc.path == "/grpc.health.v1.Health/Watch":
                continue  # a stream that never ends; the fuzzer reads its first answer
            for _ in range(10):
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
                try:
                    if rpc.streaming:
                        list(channel.unary_stream(rpc.path)(payload, timeout=10))
                    else:
                        channel.unary_unary(rpc.path)(payload, timeout=10)
                except grpc.RpcError as err:
                    assert err.code() not in BAD_FOR_INPUT, (rpc.path, err.code(), err.details())


def test_raw_bytes_on_the_socket(daemon: DaemonProcess) -> None:
    rng = __import__("random").Random(7)
    for _ in range(50):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(daemon.socket)
            s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
            with contextlib.suppress(OSError):
                s.recv(4096)
    daemon.wait_serving(5)


def test_huge_messages_and_million_container_pods(daemon: DaemonProcess) -> None:
    with NumamemClient(daemon.socket, timeout=30) as client:
        for count in (10**6, 10**4):
            pod = mm.Pod(uid="huge", containers=[mm.Container(name=f"c{i}") for i in range(count)])
            with pytest.raises(grpc.RpcError) as info:
                client.admit(pod)
            assert (
                info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            )  # too big, or over the per-pod limit
        big = mm.Pod(
            uid="x",
            containers=[mm.Container(name="a", limits={"memory": "1Gi", "k" * 2_000_000: "1"})],
        )
        with pytest.raises(grpc.RpcError) as info:
            client.admit(big)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert client.check_health() == 1


def test_memory_stays_bounded(daemon: DaemonProcess) -> None:
    """After thousands of hostile requests, the daemon's RSS stays small."""
    assert daemon.proc is not None
    rss = psutil.Process(daemon.proc.pid).memory_info().rss
    assert rss < 150 * 1024 * 1024, f"RSS {rss / 2**20:.0f} MiB"
