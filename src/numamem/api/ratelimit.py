"""The kubelet's podresources rate limit: a token bucket over a whole gRPC server.

:class:`RateLimit` is a server interceptor: every RPC takes one token of its
:class:`TokenBucket` first (the kubelet's ``WithRateLimiter``); when there is none the call is
answered RESOURCE_EXHAUSTED "rejected by rate limit" without reaching the servicer. The
bucket counts the calls of the server it is installed on only. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; :meth:`allow` takes one if there is one.
    Thread-safe."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


def _rejected(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")


class RateLimit(grpc.ServerInterceptor):
    """Every RPC of the server takes a token first (the kubelet's ``WithRateLimiter``)."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if self.bucket.allow():
            return continuation(details)
        return grpc.unary_unary_rpc_method_handler(_rejected)
