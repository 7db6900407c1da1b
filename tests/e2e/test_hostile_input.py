"""Hostile input against the real daemon: every RPC fuzzed, raw bytes, huge messages.

The daemon answers every request with a status code (never INTERNAL or
UNKNOWN for bad input), keeps SERVING, and its memory stays bounded.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import psutil
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2, metacache_pb2, topology_pb2
from numamem.v1 import memorymanager_pb2 as mm
from tests.daemon import STATIC_ARGS

pytestmark = pytest.mark.e2e

BAD_QUANTITIES = [
    "1e400",
    "-1",
    "NaN",
    "Infinity",
    "1Gb",
    "",
    " 1",
    "0x10",
    "١",
    "9" * 60,
    "1e-400",
    "1.5",
    "-0",
    "1Ei",
    "9Ei",
    "1E",
    "1Ki1",
    "🙂",
    "1\x00",
    "+-1",
]
NAMES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "memory",
            "cpu",
            "hugepages-2Mi",
            "hugepages-1Gi",
            "hugepages-64Ki",
            "c0",
            "app",
            "Always",
            "Guaranteed",
        ]
    ),
)
INTS = st.one_of(
    st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 0, 1, 7, 63, 64, 2**31 - 1])
)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(NAMES, st.sampled_from(BAD_QUANTITIES), st.text(max_size=40))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_ENUM):
        return INTS
    if t == FieldDescriptor.TYPE_INT64:
        return st.integers(-(2**63), 2**63 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_UINT32):
        return st.integers(0, 2**32 - 1 if t == FieldDescriptor.TYPE_UINT32 else 2**64 - 1)
    return st.none()


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Random field values for any message type (maps and lists included, bounded depth)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = _scalar(field.message_type.fields_by_name["key"])
            value_field = field.message_type.fields_by_name["value"]
            value = (
                messages(value_field.message_type, depth + 1)
                if value_field.message_type
                else _scalar(value_field)
            )
            strategy: st.SearchStrategy[Any] = st.dictionaries(key, value, max_size=4)
        elif field.message_type is not None:
            if depth > 3 or field.message_type.full_name.startswith("google.protobuf."):
                continue
            inner = messages(field.message_type, depth + 1)
            strategy = st.lists(inner, max_size=4) if field.is_repeated else inner
        else:
            strategy = st.lists(_scalar(field), max_size=6) if field.is_repeated else _scalar(field)
        fields[field.name] = st.one_of(st.none(), strategy)
    return st.fixed_dictionaries({}, optional=fields)


def build(cls: type[Message], values: dict[str, Any]) -> Message:
    msg = cls()
    _fill(msg, values)
    return msg


def _fill(msg: Message, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if value is None:
            continue
        field = msg.DESCRIPTOR.fields_by_name[name]
        target = getattr(msg, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.message_type is not None:
                    _fill(target[k], v)
                else:
                    target[k] = v
        elif field.message_type is not None:
            if field.is_repeated:
                for item in value:
                    _fill(target.add(), item)
            else:
                target.SetInParent()
                _fill(target, value)
        elif field.is_repeated:
            target.extend(value)
        else:
            setattr(msg, name, value)


def rpcs() -> Iterator[tuple[str, Any, Any, bool]]:
    for module in (topology_pb2, memorymanager_pb2, metacache_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                req = getattr(module, method.input_type.name, None) or getattr(
                    memorymanager_pb2, method.input_type.name, None
                )
                resp_module = (
                    module if hasattr(module, method.output_type.name) else memorymanager_pb2
                )
                yield (
                    f"/{service.full_name}/{method.name}",
                    req,
                    getattr(resp_module, method.output_type.name),
                    method.server_streaming,
                )


RPCS = list(rpcs())
BAD_FOR_INPUT = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    root = short_tmpdir()
    write_sysfs(root / "sys", standard_nodes(2))
    d = DaemonProcess(
        root,
        [
            "--sysfs-root",
            str(root / "sys"),
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


def call(
    channel: grpc.Channel, method: str, request: Message, response: Any, streaming: bool
) -> grpc.StatusCode:
    try:
        if streaming:
            stub = channel.unary_stream(
                method,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response.FromString,
            )
            for _ in stub(request, timeout=10):
                pass
        else:
            channel.unary_unary(
                method,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response.FromString,
            )(request, timeout=10)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("method", "request_cls", "response_cls", "streaming"), RPCS, ids=[r[0] for r in RPCS]
)
def test_fuzz_every_rpc(
    daemon: DaemonProcess, method: str, request_cls: Any, response_cls: Any, streaming: bool
) -> None:
    with daemon.channel() as channel:

        @settings(
            max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        @given(messages(request_cls.DESCRIPTOR))
        def fuzz(values: dict[str, Any]) -> None:
            code = call(channel, method, build(request_cls, values), response_cls, streaming)
            assert code not in BAD_FOR_INPUT, f"{method} answered {code}"

        fuzz()
    daemon.wait_serving(5)


def test_garbage_payloads_are_invalid_argument(daemon: DaemonProcess) -> None:
    rng = __import__("random").Random(5)
    with daemon.channel() as channel:
        for method, _, _, streaming in RPCS:
            for _ in range(10):
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
                try:
                    if streaming:
                        list(channel.unary_stream(method)(payload, timeout=10))
                    else:
                        channel.unary_unary(method)(payload, timeout=10)
                except grpc.RpcError as err:
                    assert err.code() not in BAD_FOR_INPUT, (method, err.code(), err.details())


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
