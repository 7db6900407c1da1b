"""SIGTERM and SIGINT for the daemon's serving loop, whichever thread the kernel gives them to.

The serving loop (:meth:`numamem.api.server.Daemon.run`) sleeps in ``select()`` on a
self-pipe. A process-directed signal goes to any thread that does not block it: the main
thread when it can take it at once, else another one, a gRPC thread for instance (after
SIGSTOP and SIGCONT the main thread often has a signal pending, and the kernel then passes
it over). Python's C-level handler, run on that thread, only flags the signal for the main
thread, which sleeps on in ``select()``: a SIGTERM after SIGSTOP/SIGCONT left the daemon
running in about half the tries (measured: 4 of 8 runs never exited).
:func:`signal_wakeup` also makes the self-pipe Python's wakeup fd, which that C handler
writes the signal's number to from whatever thread it runs on: ``select()`` returns, and
the Python-level handler runs on the main thread at once.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

Handler = Callable[[int, FrameType | None], None]


@contextlib.contextmanager
def signal_wakeup(handler: Handler, wake_fd: int) -> Iterator[None]:
    """Inside the block: ``handler`` for SIGTERM and SIGINT, and ``wake_fd`` (non-blocking,
    the self-pipe's write end) Python's wakeup fd. The previous wakeup fd is restored on
    leaving it (the handlers stay: a signal after the loop ended finds the pipe gone and is
    only recorded). Main thread only (Python's rule for both)."""
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    previous = signal.set_wakeup_fd(wake_fd)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
