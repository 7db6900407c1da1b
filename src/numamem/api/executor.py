"""The RPC worker pool that counts its tasks, so that RPCs beyond a bound are refused before
they queue (``--max-concurrent-rpcs``; the interceptor reads :attr:`BoundedExecutor.in_flight`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any


class BoundedExecutor(futures.ThreadPoolExecutor):
    """A thread pool that counts the tasks submitted and not yet done (running or queued).

    gRPC submits every RPC of the main pool here from its one serving thread;
    the interceptor reads :attr:`in_flight` there to refuse RPCs beyond the
    bound before they queue. A task leaves the count when its future is done,
    however it ends.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._count_lock = threading.Lock()
        self.in_flight = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        with self._count_lock:
            self.in_flight += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: object) -> None:
        with self._count_lock:
            self.in_flight -= 1
