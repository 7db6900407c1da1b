"""The daemon's lifecycle phase (starting, ready, stopping), which the server interceptor
reads on every RPC to answer UNAVAILABLE outside READY (:mod:`numamem.api.interceptors`)."""

from __future__ import annotations

import enum
import threading

from numamem.api import status


class Phase(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"


class Readiness:
    """The daemon's lifecycle phase, read by the interceptor on every RPC.

    Thread-safe: the phase is one reference assignment; ``wait_ready`` blocks on
    an event.
    """

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._ready = threading.Event()

    def set_ready(self) -> None:
        self.phase = Phase.READY
        self._ready.set()

    def set_stopping(self) -> None:
        self.phase = Phase.STOPPING

    def is_ready(self) -> bool:
        return self.phase is Phase.READY

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)


PHASE_MESSAGES = {
    Phase.STARTING: ("numamem is starting (restoring checkpoints); retry shortly", status.STARTING),
    Phase.STOPPING: (
        "numamem is shutting down; retry against the next instance",
        status.STOPPING,
    ),
}
"""What a numamem RPC is answered (UNAVAILABLE) outside READY: the message and its reason."""
