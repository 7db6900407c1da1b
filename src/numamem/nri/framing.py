"""The two byte-level framings of an NRI connection: the multiplexer and ttrpc. Pure: no I/O.

One unix stream carries **mux frames** ``u32be conn_id | u32be length | payload``
(containerd/nri ``pkg/net/multiplex``): the payloads of one ``conn_id`` form a
byte stream, and a frame's payload is at most :data:`MAX_FRAME_PAYLOAD` bytes
(a ttrpc header and the largest ttrpc message). Connection 0 is reserved,
:data:`PLUGIN_CONN` carries the plugin's service (the runtime calls the plugin),
:data:`RUNTIME_CONN` the runtime's service (the plugin calls the runtime).

Inside one connection's byte stream, **ttrpc messages** ``u32be length |
u32be stream_id | u8 type | u8 flags`` + ``length`` bytes of protobuf
(containerd/ttrpc ``channel.go``); ``length`` is at most :data:`MAX_MESSAGE`.
A message over the limit is not an error of the stream: upstream discards its
bytes and answers that stream with RESOURCE_EXHAUSTED, and so do the decoders
here (they report it and skip it). Everything in this module is deterministic
and never raises on input bytes; malformed input comes out as a problem value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FRAME_HEADER = 8
MESSAGE_HEADER = 10
MAX_MESSAGE = 4 << 20
"""ttrpc's message limit (``DefaultMessageLengthLimit``), bytes of protobuf after the header."""
MAX_FRAME_PAYLOAD = MESSAGE_HEADER + MAX_MESSAGE
"""The multiplexer's payload limit (``maxPayloadSize``): upstream refuses to write more."""

PLUGIN_CONN = 1
RUNTIME_CONN = 2

REQUEST = 1
RESPONSE = 2
DATA = 3

GO_READ_BUFFER = 4096
"""The size of the ``bufio.Reader`` Go's ttrpc channel reads a mux connection through.

Go's mux connection hands out one frame per ``Read`` and fails the read (ENOMEM)
when the frame is larger than the buffer it reads into. The bufio reader reads
into its own 4096-byte buffer unless it is empty and asked for at least 4096
bytes, which then go straight into the message buffer; so a frame the runtime
can read is either at most 4096 bytes or the rest of a message whose first
4096 bytes came in an earlier frame. :func:`message_chunks` cuts messages so,
exactly as Go's own ``bufio.Writer`` (4096 bytes) does when ttrpc sends.
"""

_FRAME = struct.Struct(">II")
_MESSAGE = struct.Struct(">IIBB")


@dataclass(frozen=True)
class Frame:
    conn_id: int
    payload: bytes


@dataclass(frozen=True)
class OversizedFrame:
    """A frame header announced more than :data:`MAX_FRAME_PAYLOAD` bytes; they are skipped."""

    conn_id: int
    length: int


@dataclass(frozen=True)
class Message:
    stream_id: int
    type: int
    flags: int
    payload: bytes


@dataclass(frozen=True)
class OversizedMessage:
    """A ttrpc header announced more than :data:`MAX_MESSAGE` bytes; they are skipped."""

    stream_id: int
    type: int
    length: int


def encode_frames(conn_id: int, data: bytes, max_payload: int = MAX_FRAME_PAYLOAD) -> list[bytes]:
    """``data`` for connection ``conn_id`` as mux frames of at most ``max_payload`` bytes each
    (one empty frame for empty data)."""
    if not 0 < conn_id <= 0xFFFFFFFF:
        raise ValueError(f"conn_id {conn_id} is not a usable connection (1 .. 2**32-1)")
    if not 0 < max_payload <= MAX_FRAME_PAYLOAD:
        raise ValueError(f"max_payload {max_payload} is not in 1 .. {MAX_FRAME_PAYLOAD}")
    if not data:
        return [_FRAME.pack(conn_id, 0)]
    view = memoryview(data)
    return [
        _FRAME.pack(conn_id, len(view[i : i + max_payload])) + view[i : i + max_payload]
        for i in range(0, len(view), max_payload)
    ]


def encode_message(stream_id: int, mtype: int, flags: int, payload: bytes) -> bytes:
    """One ttrpc message; ``ValueError`` if ``payload`` is over :data:`MAX_MESSAGE` (upstream's
    sender refuses such a message rather than sending it)."""
    if len(payload) > MAX_MESSAGE:
        raise ValueError(
            f"message of {len(payload)} bytes exceeds the ttrpc limit of {MAX_MESSAGE} bytes"
        )
    return _MESSAGE.pack(len(payload), stream_id, mtype, flags) + payload


def message_chunks(message: bytes) -> list[bytes]:
    """``message`` (one encoded ttrpc message) cut into the payloads of the frames that carry
    it so that Go's reader accepts them (see :data:`GO_READ_BUFFER`)."""
    if len(message) <= GO_READ_BUFFER:
        return [message]
    return [message[:GO_READ_BUFFER], message[GO_READ_BUFFER:]]


class _Stream:
    """A byte buffer consumed from the front, with a count of bytes still to skip."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.skip = 0

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def drop_skipped(self) -> bool:
        """Skip what is to be skipped; True when nothing is left to skip."""
        if self.skip:
            n = min(self.skip, len(self._buf) - self._pos)
            self._pos += n
            self.skip -= n
        return self.skip == 0

    def available(self) -> int:
        return len(self._buf) - self._pos

    def peek(self, st: struct.Struct) -> tuple[int, ...]:
        return st.unpack_from(self._buf, self._pos)

    def take(self, n: int) -> bytes:
        data = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return data

    @property
    def buffered(self) -> int:
        """Bytes held, skipped ones excluded (for tests and leak checks)."""
        return self.available()


class FrameDecoder:
    """Mux frames from a byte stream cut anywhere. Not thread-safe (one reader owns it)."""

    def __init__(self, max_payload: int = MAX_FRAME_PAYLOAD) -> None:
        self._in = _Stream()
        self._max = max_payload

    def feed(self, data: bytes) -> list[Frame | OversizedFrame]:
        """Frames completed by ``data``, in order. A frame announcing more than the limit comes
        out as :class:`OversizedFrame` and its bytes are skipped as they arrive."""
        self._in.feed(data)
        out: list[Frame | OversizedFrame] = []
        while self._in.drop_skipped() and self._in.available() >= FRAME_HEADER:
            conn_id, length = self._in.peek(_FRAME)
            if length > self._max:
                self._in.take(FRAME_HEADER)
                self._in.skip = length
                out.append(OversizedFrame(conn_id, length))
                continue
            if self._in.available() < FRAME_HEADER + length:
                break
            self._in.take(FRAME_HEADER)
            out.append(Frame(conn_id, self._in.take(length)))
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (0 at a frame boundary)."""
        return self._in.buffered


class MessageDecoder:
    """ttrpc messages from one mux connection's byte stream. Not thread-safe."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self._in = _Stream()
        self._max = max_message

    def feed(self, data: bytes) -> list[Message | OversizedMessage]:
        """Messages completed by ``data``, in order. A message over the limit comes out as
        :class:`OversizedMessage` (its stream id, so that it can be answered) and its
        bytes are skipped as they arrive, as upstream's channel discards them."""
        self._in.feed(data)
        out: list[Message | OversizedMessage] = []
        while self._in.drop_skipped() and self._in.available() >= MESSAGE_HEADER:
            length, stream_id, mtype, flags = self._in.peek(_MESSAGE)
            if length > self._max:
                self._in.take(MESSAGE_HEADER)
                self._in.skip = length
                out.append(OversizedMessage(stream_id, mtype, length))
                continue
            if self._in.available() < MESSAGE_HEADER + length:
                break
            self._in.take(MESSAGE_HEADER)
            out.append(Message(stream_id, mtype, flags, self._in.take(length)))
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held (0 at a message boundary)."""
        return self._in.buffered
