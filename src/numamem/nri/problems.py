"""What the runtime sends that the plugin cannot use: each kind logged once per connection, counted.

A broken or hostile peer can send the same bad thing thousands of times a
second; the plugin must neither crash nor drown its log. :class:`ProblemLog`
logs the first occurrence of each kind on a connection as a warning that says
what was wrong (the fields name the connection, stream and sizes), counts the
rest, and logs the counts once when the connection ends.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from numamem.logging import get_logger

_log = get_logger("nri")

# The kinds (stable identifiers: tests and metrics match on them).
OVERSIZED_FRAME = "oversized_frame"
UNKNOWN_CONNECTION = "unknown_connection"
OVERSIZED_MESSAGE = "oversized_message"
UNEXPECTED_MESSAGE = "unexpected_message"
UNDECODABLE_REQUEST = "undecodable_request"
UNDECODABLE_PAYLOAD = "undecodable_payload"
UNDECODABLE_RESPONSE = "undecodable_response"
BAD_STREAM_ID = "bad_stream_id"
UNKNOWN_METHOD = "unknown_method"
UNSUBSCRIBED_EVENT = "unsubscribed_event"
INACTIVE_STREAM = "inactive_stream"
OVERLOADED = "overloaded"
LATE_REPLY = "late_reply"
OVERSIZED_REPLY = "oversized_reply"


class ProblemLog:
    """Counts problems by kind for one connection; logs each kind's first occurrence.

    Thread-safe: the reader and the handler threads report into the same log.
    """

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def report(self, kind: str, message: str, **fields: Any) -> None:
        """Record one problem; the first of its kind on this connection is logged with
        ``message`` (what was wrong and what the plugin did about it) and ``fields``."""
        with self._lock:
            self._counts[kind] += 1
            first = self._counts[kind] == 1
        if first:
            _log.warning(
                message,
                problem=kind,
                peer=self._peer,
                note="further problems of this kind on this connection are counted, not logged",
                **fields,
            )

    def counts(self) -> dict[str, int]:
        """A copy of the counts so far."""
        with self._lock:
            return dict(self._counts)

    def summarize(self) -> None:
        """Log the counts once (at the end of the connection) if any kind repeated."""
        counts = self.counts()
        if any(n > 1 for n in counts.values()):
            _log.warning("problems on the NRI connection", peer=self._peer, counts=counts)
