"""A per-instance memoised property without a lock, for the per-call search objects.

:func:`functools.cached_property` on Python 3.11 takes an ``RLock`` at every first read,
several microseconds each; a :class:`~numamem.memorymanager.search.rules.HintRules` reads half a
dozen of them per allocation, and is used by one thread only. :class:`memoized` computes
the value on the first read and stores it in the instance's ``__dict__`` under the
property's name, where every later read finds it without calling the descriptor (it is a
non-data descriptor, as ``cached_property`` is): the same caching, so ``name in
obj.__dict__`` still tells whether it was computed. Not thread-safe: two threads reading
the property of one instance at once may both compute it (the objects using it are
confined to one thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class memoized(Generic[T]):  # noqa: N801 - used as a decorator, like cached_property
    """``@memoized`` over a method of one argument (``self``): see the module docstring."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> memoized[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> T | memoized[T]:
        if instance is None:
            return self
        value = self.func(instance)
        instance.__dict__[self.name] = value
        return value
