"""FNV-1a, 32 bit (Go ``hash/fnv.New32a``): offset basis 0x811c9dc5, prime 0x01000193."""

from __future__ import annotations

OFFSET_BASIS = 0x811C9DC5
PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    h = OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * PRIME) & 0xFFFFFFFF
    return h
