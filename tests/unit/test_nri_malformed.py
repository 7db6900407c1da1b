"""Malformed input from the runtime: each kind is answered as upstream's ttrpc server answers it
(or dropped), logged once per connection, counted, and the plugin goes on serving."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from numamem.nri.framing import (
    DATA,
    MAX_FRAME_PAYLOAD,
    MAX_MESSAGE,
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    FrameDecoder,
    Message,
    MessageDecoder,
    encode_frames,
    encode_message,
)
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api
from numamem.nriapi import ttrpc_pb2
from numamem.testing import nri_objects as obj
from numamem.testing.nri_runtime import plugin_env
from tests.properties import examples
from tests.unit.nri_support import Recorder, nri_threads

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"


class RawRuntime:
    """The runtime end of a pre-launched plugin's socketpair, byte by byte (no Endpoint)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(30)
        self._frames = FrameDecoder()
        self._decoders = {1: MessageDecoder(), 2: MessageDecoder()}
        self._inbox: dict[int, list[Message]] = {1: [], 2: []}
        self.next_sid = 1

    def send(self, conn: int, sid: int, mtype: int, payload: bytes, flags: int = 0) -> None:
        message = struct.pack(">IIBB", len(payload), sid, mtype, flags) + payload
        self.sock.sendall(b"".join(encode_frames(conn, message)))

    def request(self, method: str, payload: bytes, service: str = PLUGIN) -> int:
        sid = self.sid()
        envelope = ttrpc_pb2.Request(service=service, method=method, payload=payload)
        self.send(PLUGIN_CONN, sid, REQUEST, envelope.SerializeToString())
        return sid

    def sid(self) -> int:
        sid, self.next_sid = self.next_sid, self.next_sid + 2
        return sid

    def read(self, conn: int) -> Message:
        while not self._inbox[conn]:
            data = self.sock.recv(1 << 16)
            assert data, "the plugin closed the connection"
            for frame in self._frames.feed(data):
                for message in self._decoders[frame.conn_id].feed(frame.payload):  # type: ignore[union-attr]
                    assert isinstance(message, Message)
                    self._inbox[frame.conn_id].append(message)  # type: ignore[union-attr]
        return self._inbox[conn].pop(0)

    def answer(self, conn: int = PLUGIN_CONN) -> tuple[int, int, str, bytes]:
        """The next response on ``conn``: stream id, status code, message, payload."""
        message = self.read(conn)
        assert message.type == RESPONSE
        response = ttrpc_pb2.Response.FromString(message.payload)
        assert response.HasField("status")  # Go's client needs it, even for OK
        return message.stream_id, response.status.code, response.status.message, response.payload

    def register(self) -> api.RegisterPluginRequest:
        """Serve the plugin's RegisterPlugin (conn 2) and configure it."""
        message = self.read(2)
        envelope = ttrpc_pb2.Request.FromString(message.payload)
        assert (envelope.service, envelope.method) == (
            "nri.pkg.api.v1alpha1.Runtime",
            "RegisterPlugin",
        )
        ok = ttrpc_pb2.Response()
        ok.status.SetInParent()
        self.send(2, message.stream_id, RESPONSE, ok.SerializeToString())
        sid = self.request(
            "Configure", api.ConfigureRequest(request_timeout=2000).SerializeToString()
        )
        assert self.answer()[:2] == (sid, 0)
        return api.RegisterPluginRequest.FromString(envelope.payload)

    def works(self) -> None:
        """A valid CreateContainer is answered (the plugin survived what came before)."""
        pod = obj.pod()
        request = api.CreateContainerRequest(pod=pod, container=obj.container(pod))
        sid = self.request("CreateContainer", request.SerializeToString())
        got_sid, code, text, payload = self.answer()
        assert (got_sid, code, text) == (sid, 0, "")
        assert (
            api.CreateContainerResponse.FromString(payload).adjust.linux.resources.cpu.mems == "0"
        )


@dataclass
class Session:
    raw: RawRuntime
    plugin: Plugin
    thread: threading.Thread


def start_session() -> Session:
    """A pre-launched plugin (a :class:`Recorder`) running in a thread on one end of a
    socketpair, registered by a :class:`RawRuntime` on the other end."""
    ours, theirs = socket.socketpair()
    plugin = Plugin.prelaunched(Recorder(), plugin_env("numamem", "90", theirs.detach()))
    thread = threading.Thread(target=plugin.run, name="plugin-run")
    thread.start()
    raw = RawRuntime(ours)
    raw.register()
    return Session(raw, plugin, thread)


@pytest.fixture
def session() -> Iterator[Session]:
    before = nri_threads()
    session = start_session()
    yield session
    session.raw.sock.close()  # the runtime goes: the pre-launched plugin returns
    session.thread.join(30)
    assert not session.thread.is_alive()
    assert nri_threads() == before


def envelope(method: str, payload: bytes, service: str = PLUGIN) -> bytes:
    return ttrpc_pb2.Request(service=service, method=method, payload=payload).SerializeToString()


# Each case sends something malformed; the plugin answers (stream id, code, message start) or
# drops it (None), and reports the problem kind.
Case = Callable[[RawRuntime], int | None]


def oversized_message(raw: RawRuntime) -> int:
    sid = raw.sid()
    body = bytes(MAX_MESSAGE + 1)
    raw.sock.sendall(
        b"".join(encode_frames(1, struct.pack(">IIBB", len(body), sid, REQUEST, 0) + body))
    )
    return sid


def reused(raw: RawRuntime) -> int:
    raw.send(1, raw.next_sid - 2, REQUEST, envelope("Configure", b""))
    return raw.next_sid - 2


def even(raw: RawRuntime) -> int:
    sid = raw.sid() + 1
    raw.send(1, sid, REQUEST, envelope("Configure", b""))
    return sid


def sent(mtype: int, payload: bytes = b"", conn: int = 1) -> Case:
    def case(raw: RawRuntime) -> int:
        sid = raw.sid()
        raw.send(conn, sid, mtype, payload)
        return sid

    return case


def frame(conn: int, payload: bytes) -> Case:
    def case(raw: RawRuntime) -> None:
        raw.sock.sendall(struct.pack(">II", conn, len(payload)) + payload)

    return case


CASES: list[tuple[str, Case, tuple[int, str] | None, str]] = [
    ("frame for an unknown connection", frame(7, b"junk"), None, "unknown_connection"),
    (
        "frame over the mux limit",
        frame(1, bytes(MAX_FRAME_PAYLOAD + 1)),
        None,
        "oversized_frame",
    ),
    (
        "message over the ttrpc limit",
        oversized_message,
        (8, "message length 4194305 exceed maximum message size of 4194304"),
        "oversized_message",
    ),
    (
        "even stream id",
        even,
        (3, "StreamID must be odd for client initiated streams"),
        "bad_stream_id",
    ),
    (
        "reused stream id",
        reused,
        (3, "StreamID cannot be re-used and must increment"),
        "bad_stream_id",
    ),
    (
        "undecodable envelope",
        sent(REQUEST, b"\xff\xff\xff"),
        (3, "unmarshal request error: "),
        "undecodable_request",
    ),
    (
        "undecodable payload",
        sent(REQUEST, envelope("CreateContainer", b"\x0a\xff")),
        (13, "ttrpc: error unmarshalling payload: "),
        "undecodable_payload",
    ),
    (
        "unknown service",
        sent(REQUEST, envelope("X", b"", "nope.Svc")),
        (12, "service nope.Svc"),
        "unknown_method",
    ),
    (
        "unknown method",
        sent(REQUEST, envelope("PostStartContainer", b"")),
        (12, "method PostStartContainer"),
        "",
    ),
    ("data message", sent(DATA, b"x"), (3, "StreamID is no longer active"), "unexpected_message"),
    ("response sent to the server", sent(RESPONSE, b""), None, "unexpected_message"),
    ("unknown message type", sent(9, b"?"), None, "unexpected_message"),
    ("reply nobody waits for", sent(RESPONSE, b"", conn=2), None, "inactive_stream"),
    ("request on the calling connection", sent(REQUEST, b"", conn=2), None, "unexpected_message"),
]


@pytest.mark.parametrize(("what", "case", "answer", "kind"), CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_answered_or_dropped_and_the_plugin_survives(
    session: Session, what: str, case: Case, answer: tuple[int, str] | None, kind: str
) -> None:
    with capture_logs() as logs:
        sid = case(session.raw)
        if answer is not None:
            got_sid, code, text, _ = session.raw.answer()
            assert (got_sid, code) == (sid, answer[0])
            assert text.startswith(answer[1]), text
        session.raw.works()  # answered next: nothing was answered for a dropped input
    problems = [e for e in logs if "problem" in e]
    assert [e["problem"] for e in problems] == ([kind] if kind else [])
    assert all(e["log_level"] == "warning" and e["peer"] for e in problems)
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]
    assert session.plugin.problems is not None
    assert session.plugin.problems.counts() == ({kind: 1} if kind else {})


def test_repeated_problems_are_logged_once_and_counted(session: Session) -> None:
    with capture_logs() as logs:
        for _ in range(5):
            frame(7, b"junk")(session.raw)
            sent(9, b"?")(session.raw)
        session.raw.works()
    assert sorted(e["problem"] for e in logs if "problem" in e) == [
        "unexpected_message",
        "unknown_connection",
    ]
    assert session.plugin.problems is not None
    assert session.plugin.problems.counts() == {"unknown_connection": 5, "unexpected_message": 5}


def test_the_counts_are_logged_when_the_connection_ends() -> None:
    with capture_logs() as logs:
        session = start_session()
        for _ in range(3):
            frame(5, b"")(session.raw)
        session.raw.works()
        session.raw.sock.close()
        session.thread.join(30)
    [summary] = [e for e in logs if e["event"] == "problems on the NRI connection"]
    assert summary["counts"] == {"unknown_connection": 3}


METHODS = [
    "Configure", "Synchronize", "Shutdown", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox",
    "CreateContainer", "UpdateContainer", "StopContainer", "RemoveContainer", "StateChange", "X",
]  # fmt: skip

# Well-formed ttrpc messages with random envelopes and payloads (requests the plugin decodes
# and hands to its handler), and raw frames of random bytes.
ttrpc_messages = st.builds(
    lambda sid, mtype, method, payload: encode_message(
        sid, mtype, 0, envelope(method, payload) if mtype == REQUEST else payload
    ),
    st.integers(0, 200),
    st.sampled_from([REQUEST, REQUEST, REQUEST, RESPONSE, DATA, 7]),
    st.sampled_from(METHODS),
    st.binary(max_size=48),
)
frames_st = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([1, 2]), ttrpc_messages),
        st.tuples(st.sampled_from([1, 2, 3]), st.binary(max_size=64)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_st, st.binary(max_size=64))
def test_random_frames_never_crash_the_plugin(frames: list[tuple[int, bytes]], tail: bytes) -> None:
    """Whatever arrives after the registration, the reader neither dies nor raises: the plugin
    serves until the runtime closes, then returns having joined every thread."""
    before = nri_threads()
    with capture_logs() as logs:
        session = start_session()
        raw = session.raw
        for conn, payload in frames:
            raw.sock.sendall(b"".join(encode_frames(conn, payload)))
        raw.sock.sendall(tail)
        raw.sock.shutdown(socket.SHUT_WR)  # all sent: the plugin reads to the end, then returns
        session.thread.join(30)
        raw.sock.close()
    assert not session.thread.is_alive()
    assert nri_threads() == before
    failures = [e for e in logs if e["log_level"] in ("error", "critical")]
    assert failures == []


def test_a_request_in_the_same_frame_as_garbage_for_another_connection_is_served(
    session: Session,
) -> None:
    """Frames are independent: a bad one does not disturb the next in the same write."""
    pod = obj.pod()
    request = api.CreateContainerRequest(pod=pod, container=obj.container(pod))
    sid = session.raw.sid()
    good = encode_message(sid, REQUEST, 0, envelope("CreateContainer", request.SerializeToString()))
    session.raw.sock.sendall(struct.pack(">II", 9, 3) + b"bad" + b"".join(encode_frames(1, good)))
    assert session.raw.answer()[:2] == (sid, 0)
