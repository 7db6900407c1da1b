"""Conversions remembered by the message's bytes: a bounded, thread-safe cache.

An agent sends the same pod with each call for each of its containers (Allocate,
AddContainer, hints), and the pods of one workload repeat the same containers; converting
them (quantities, defaulting, QoS) costs tens of microseconds, serializing them for the key a
few. :class:`Remembered` keeps the last :attr:`~Remembered.max_entries` results of messages of
at most :attr:`~Remembered.max_key_bytes` serialized bytes (larger ones are converted every
time); a conversion that raises is not remembered. Results are shared: they must be
immutable.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class _Message(Protocol):
    def SerializeToString(self, *, deterministic: bool = ...) -> bytes: ...


class Remembered(Generic[T]):
    """See the module. Thread-safe: the conversion runs outside the lock (two threads may
    convert the same message; both results are equal)."""

    def __init__(self, max_entries: int, max_key_bytes: int) -> None:
        self.max_entries, self.max_key_bytes = max_entries, max_key_bytes
        self._items: collections.OrderedDict[bytes, T] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, msg: _Message, convert: Callable[[], T]) -> T:
        """The remembered conversion of ``msg``, or ``convert()`` (remembered if it returns)."""
        key = msg.SerializeToString(deterministic=True)
        if len(key) > self.max_key_bytes:
            return convert()
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        value = convert()
        with self._lock:
            self._items[key] = value
            if len(self._items) > self.max_entries:
                self._items.popitem(last=False)
        return value
