"""One NRI trunk: a connected stream socket, a reader thread that demultiplexes it, serialized writes.

Both ends of NRI use it: the plugin (:mod:`numamem.nri.plugin`) and the
scripted runtime of the tests (:mod:`numamem.testing.nri_runtime`). The reader
thread owns the decoders; it hands every complete ttrpc message (or oversized
one) of a known connection to ``on_message`` and must not be blocked by it for
long. Frames of other connections and oversized frames are reported to the
:class:`~numamem.nri.problems.ProblemLog` and skipped. Nothing the peer sends
stops the reader but the end of the stream (or :meth:`Connection.close`);
``on_close`` runs once, in the reader thread, after the socket is closed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable

from numamem.errors import NriConnectionError
from numamem.logging import get_logger
from numamem.nri import problems as kinds
from numamem.nri.framing import (
    MAX_FRAME_PAYLOAD,
    Frame,
    FrameDecoder,
    Message,
    MessageDecoder,
    OversizedFrame,
    OversizedMessage,
    encode_frames,
    message_chunks,
)
from numamem.nri.problems import ProblemLog

_log = get_logger("nri")

OnMessage = Callable[[int, Message | OversizedMessage], None]

READ_SIZE = 1 << 16


class Connection:
    """A trunk carrying the mux connections ``conn_ids``; see the module docstring.

    :meth:`send` is thread-safe and writes one ttrpc message atomically (its
    frames are never interleaved with another message's). :meth:`close` is
    idempotent and may be called from any thread, the reader's included.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        peer: str,
        conn_ids: Iterable[int],
        on_message: OnMessage,
        on_close: Callable[[], None],
        problems: ProblemLog,
    ) -> None:
        self._sock = sock
        self.peer = peer
        self._decoders = {conn_id: MessageDecoder() for conn_id in conn_ids}
        self._frames = FrameDecoder()
        self._on_message = on_message
        self._on_close = on_close
        self.problems = problems
        self._write_lock = threading.Lock()
        self._closing = threading.Event()
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name=f"nri-reader-{peer}")

    def start(self) -> None:
        self._reader.start()

    def send(self, conn_id: int, message: bytes) -> None:
        """Write one encoded ttrpc message on ``conn_id``; :class:`NriConnectionError` if the
        trunk is closed or the write fails (the trunk is then closed)."""
        frames = [f for chunk in message_chunks(message) for f in encode_frames(conn_id, chunk)]
        self.send_raw(b"".join(frames))

    def send_raw(self, data: bytes) -> None:
        """Write ``data`` as it is (the framing is the caller's: tests send malformed input)."""
        with self._write_lock:
            if self._closing.is_set():
                raise NriConnectionError(f"the NRI connection to {self.peer} is closed")
            try:
                self._sock.sendall(data)
            except OSError as e:
                self.close()
                raise NriConnectionError(
                    f"writing to the NRI connection to {self.peer} failed: {e}"
                ) from e

    def close(self) -> None:
        """Shut the socket down; the reader sees the end of the stream and finishes."""
        if self._closing.is_set():
            return
        self._closing.set()
        with contextlib.suppress(OSError):  # not connected any more: the reader is finishing
            self._sock.shutdown(socket.SHUT_RDWR)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the reader to finish; True if it did (False on timeout or if not started)."""
        if self._reader.ident is None:
            return False
        if self._reader is not threading.current_thread():
            self._reader.join(timeout)
        return not self._reader.is_alive()

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data = self._sock.recv(READ_SIZE)
                except OSError as e:
                    if not self._closing.is_set():
                        _log.info("NRI connection failed", peer=self.peer, error=str(e))
                    return
                if not data:
                    return
                for frame in self._frames.feed(data):
                    self._deliver(frame)
        except Exception:  # noqa: BLE001 - a defect must not leave a half-dead connection
            _log.exception("NRI reader failed; closing the connection", peer=self.peer)
        finally:
            self.close()  # unblocks a writer stuck on a peer that stopped reading
            with self._write_lock:
                self._sock.close()
            self.closed.set()
            self.problems.summarize()
            self._on_close()

    def _deliver(self, frame: Frame | OversizedFrame) -> None:
        if isinstance(frame, OversizedFrame):
            self.problems.report(
                kinds.OVERSIZED_FRAME,
                "NRI frame over the multiplexer's limit skipped",
                conn_id=frame.conn_id,
                length=frame.length,
                limit=MAX_FRAME_PAYLOAD,
            )
            return
        decoder = self._decoders.get(frame.conn_id)
        if decoder is None:
            self.problems.report(
                kinds.UNKNOWN_CONNECTION,
                "NRI frame for a connection nobody serves dropped",
                conn_id=frame.conn_id,
                length=len(frame.payload),
                served=sorted(self._decoders),
            )
            return
        for message in decoder.feed(frame.payload):
            try:
                self._on_message(frame.conn_id, message)
            except Exception:  # noqa: BLE001 - one message's defect must not stop the reader
                _log.exception(
                    "NRI message handling failed; the message is dropped",
                    peer=self.peer,
                    conn_id=frame.conn_id,
                    stream_id=message.stream_id,
                )
