"""The NRI framings (mux frames, ttrpc messages): round trips through arbitrary cuts, limits,
and malformed input that never raises."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numamem.nri import framing
from numamem.nri.framing import (
    GO_READ_BUFFER,
    MAX_FRAME_PAYLOAD,
    MAX_MESSAGE,
    Frame,
    FrameDecoder,
    Message,
    MessageDecoder,
    OversizedFrame,
    OversizedMessage,
    encode_frames,
    encode_message,
    message_chunks,
)
from tests.properties import examples

conn_ids = st.sampled_from([1, 2, 7])
payloads = st.binary(max_size=300)
messages = st.builds(
    Message,
    stream_id=st.integers(0, 2**32 - 1),
    type=st.integers(0, 255),
    flags=st.integers(0, 255),
    payload=payloads,
)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (any positions, in any order)."""
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=examples(300))
@given(
    st.lists(st.tuples(conn_ids, messages), max_size=12),
    st.integers(1, 64),
    st.lists(st.integers(0, 10_000), max_size=20),
)
def test_messages_split_into_frames_and_cut_anywhere_round_trip(
    sent: list[tuple[int, Message]], max_payload: int, points: list[int]
) -> None:
    """Any sequence of ttrpc messages on any connections, framed in chunks of any size and
    delivered in pieces cut anywhere, comes out as the same messages per connection."""
    stream = b"".join(
        f
        for conn_id, m in sent
        for f in encode_frames(
            conn_id, encode_message(m.stream_id, m.type, m.flags, m.payload), max_payload
        )
    )
    frames = FrameDecoder()
    decoders: dict[int, MessageDecoder] = {}
    received: dict[int, list[object]] = {}
    for piece in cut(stream, points):
        for frame in frames.feed(piece):
            assert isinstance(frame, Frame)
            assert len(frame.payload) <= max_payload
            decoder = decoders.setdefault(frame.conn_id, MessageDecoder())
            received.setdefault(frame.conn_id, []).extend(decoder.feed(frame.payload))
    expected: dict[int, list[object]] = {}
    for conn_id, m in sent:
        expected.setdefault(conn_id, []).append(m)
    assert received == expected
    assert frames.pending == 0
    assert all(d.pending == 0 for d in decoders.values())


@given(st.binary(max_size=20_000), st.integers(1, MAX_FRAME_PAYLOAD))
def test_payloads_larger_than_a_frame_are_split_and_reassembled(data: bytes, size: int) -> None:
    frames = encode_frames(2, data, size)
    assert all(len(f) - 8 <= size for f in frames)
    decoder = FrameDecoder()
    out = [f for frame in frames for f in decoder.feed(frame)]
    assert b"".join(f.payload for f in out if isinstance(f, Frame)) == data
    assert {f.conn_id for f in out if isinstance(f, Frame)} == {2}


def test_a_payload_over_the_mux_limit_takes_two_frames() -> None:
    data = bytes(MAX_FRAME_PAYLOAD + 1)
    frames = encode_frames(1, data)
    assert [len(f) - 8 for f in frames] == [MAX_FRAME_PAYLOAD, 1]


def test_the_limits_are_upstreams() -> None:
    """ttrpc: 4 MiB messages, 10-byte headers; the mux: payloads up to header + message."""
    assert (MAX_MESSAGE, framing.MESSAGE_HEADER, framing.FRAME_HEADER) == (4 << 20, 10, 8)
    assert MAX_FRAME_PAYLOAD == 4 * 1024 * 1024 + 10


def test_headers_are_big_endian() -> None:
    message = encode_message(0x01020304, 2, 5, b"xy")
    assert message == bytes([0, 0, 0, 2, 1, 2, 3, 4, 2, 5]) + b"xy"
    assert encode_frames(0x0A0B0C0D, b"z") == [bytes([10, 11, 12, 13, 0, 0, 0, 1]) + b"z"]


@pytest.mark.parametrize(
    ("conn_id", "size"), [(0, 1), (2**32, 1), (1, 0), (1, MAX_FRAME_PAYLOAD + 1)]
)
def test_frames_refuse_reserved_connections_and_bad_sizes(conn_id: int, size: int) -> None:
    with pytest.raises(ValueError, match=r"conn_id|max_payload"):
        encode_frames(conn_id, b"x", size)


def test_a_message_over_the_limit_is_not_encoded() -> None:
    encode_message(1, 1, 0, bytes(MAX_MESSAGE))
    with pytest.raises(ValueError, match="exceeds the ttrpc limit of 4194304 bytes"):
        encode_message(1, 1, 0, bytes(MAX_MESSAGE + 1))


@given(st.integers(0, MAX_MESSAGE))
def test_message_chunks_fit_go_reads(length: int) -> None:
    """A frame Go's bufio reader fills its 4096-byte buffer from is at most 4096 bytes; only
    the rest of a message it reads straight into the message buffer is larger."""
    message = encode_message(1, 2, 0, b"\x01" * length)
    chunks = message_chunks(message)
    assert b"".join(chunks) == message
    assert len(chunks[0]) <= GO_READ_BUFFER
    if len(chunks) == 2:
        assert len(chunks[0]) == GO_READ_BUFFER
        assert len(chunks[1]) <= MAX_FRAME_PAYLOAD


@given(st.binary(max_size=5000), st.lists(st.integers(0, 6000), max_size=10))
def test_garbage_never_raises(data: bytes, points: list[int]) -> None:
    frames = FrameDecoder()
    messages = MessageDecoder()
    for piece in cut(data, points):
        for item in frames.feed(piece):
            assert isinstance(item, Frame | OversizedFrame)
            if isinstance(item, Frame):
                assert len(item.payload) <= MAX_FRAME_PAYLOAD
        for item2 in messages.feed(piece):
            assert isinstance(item2, Message | OversizedMessage)


@given(
    st.integers(MAX_FRAME_PAYLOAD + 1, 2**32 - 1),
    st.lists(st.integers(0, 100_000), max_size=5),
)
def test_an_oversized_frame_is_reported_once_and_skipped(length: int, points: list[int]) -> None:
    """The decoder reports the frame as soon as its header is in, skips its bytes as they come
    (never holding them), and decodes the frame after it."""
    skipped = min(length, 70_000)  # the test sends only the start of a huge frame
    data = struct.pack(">II", 9, length) + bytes(skipped)
    decoder = FrameDecoder()
    out = [f for piece in cut(data, points) for f in decoder.feed(piece)]
    assert out == [OversizedFrame(9, length)]
    assert decoder.pending == 0
    if skipped == length:  # the whole frame went by: the next one decodes
        assert decoder.feed(encode_frames(1, b"ok")[0]) == [Frame(1, b"ok")]


def test_an_oversized_message_is_reported_with_its_stream_and_skipped() -> None:
    """As upstream's channel: discard the bytes, then answer that stream (RESOURCE_EXHAUSTED)."""
    length = MAX_MESSAGE + 1
    decoder = MessageDecoder()
    header = struct.pack(">IIBB", length, 7, 1, 0)
    assert decoder.feed(header + bytes(1000)) == [OversizedMessage(7, 1, length)]
    assert decoder.feed(bytes(length - 1000)) == []
    assert decoder.feed(encode_message(9, 1, 0, b"next")) == [Message(9, 1, 0, b"next")]


def test_a_message_at_the_limit_decodes() -> None:
    message = encode_message(3, 1, 0, b"\x07" * MAX_MESSAGE)
    decoder = MessageDecoder()
    out = [m for chunk in cut(message, [5, 4096, 1 << 21]) for m in decoder.feed(chunk)]
    assert out == [Message(3, 1, 0, b"\x07" * MAX_MESSAGE)]
