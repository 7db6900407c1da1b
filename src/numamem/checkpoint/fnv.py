"""FNV-1a, 32 bit (Go ``hash/fnv.New32a``): offset basis 0x811c9dc5, prime 0x01000193.

Every checkpoint write hashes the whole go-spew text of the state (kubelet's
checksum), so the hash is on the request path. :func:`fnv1a_32` is the C++
implementation of ``fnv-hash-fast`` (about 1 ns/byte here, against 50 ns/byte
for the Python loop); :func:`fnv1a_32_reference` is the definition, used by
the tests to check the fast one.
"""

from __future__ import annotations

from fnv_hash_fast import fnv1a_32 as _fast_fnv1a_32

OFFSET_BASIS = 0x811C9DC5
PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    return int(_fast_fnv1a_32(data))


def fnv1a_32_reference(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``, byte by byte as the algorithm defines it."""
    h = OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * PRIME) & 0xFFFFFFFF
    return h
