"""Framed records of an append-only file: ``<length: 8 hex> <crc32: 8 hex> <payload>\\n``.

Both journals (the metacache's and the pod names file) append records in this frame.
:func:`frame` makes one; :class:`Scan` reads a file's records and tells a torn last
append (a crash during it: never acknowledged) from damage to acknowledged records.
Pure: no I/O.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from numamem.errors import CheckpointError

_HEADER = 18  # "%08x %08x "


def frame(payload: bytes) -> bytes:
    return b"%08x %08x " % (len(payload), zlib.crc32(payload)) + payload + b"\n"


class Scan:
    """The records of a journal (the file ``where``), read lazily: iterating yields each good record's payload
    span (start, end) and raises CheckpointError when a damaged record is not a torn last
    append; afterwards ``end`` is where the good records end, ``torn`` the bytes of a torn
    last record (0: the file ends cleanly) and ``records`` how many there were. Spans, not
    copies, one at a time: a journal can be tens of megabytes.

    An append writes one record at the end, so a torn one has nothing after it: no good
    record further on, and no bytes beyond the length its header claims. Anything else
    is damage to acknowledged records.
    """

    def __init__(self, data: bytes, where: Path) -> None:
        self.data = data
        self.where = where
        self.end = 0
        self.torn = 0
        self.records = 0

    def __iter__(self) -> Iterator[tuple[int, int]]:
        data, pos = self.data, 0
        while pos < len(data):
            end = _record_end(data, pos)
            if end is None:
                claimed = _claimed_end(data, pos)
                if _good_record_after(data, pos) or (claimed is not None and claimed < len(data)):
                    raise CheckpointError(
                        f"{self.where}: journal record at byte {pos} is damaged and more "
                        "records follow it"
                    )
                self.end, self.torn = pos, len(data) - pos
                return
            self.records += 1
            yield pos + _HEADER, end - 1
            pos = end
        self.end = pos


def _claimed_end(data: bytes, pos: int) -> int | None:
    """Where the record at ``pos`` ends by its header's length, or None if it has no header."""
    head = data[pos : pos + _HEADER]
    if len(head) < _HEADER or head[8:9] != b" " or head[17:18] != b" ":
        return None
    length = _hex(head[:8])
    if length is None or _hex(head[9:17]) is None:
        return None
    return pos + _HEADER + length + 1


def _hex(digits: bytes) -> int | None:
    """Eight lower-case hex digits as written by :func:`frame` (nothing else ``int`` accepts)."""
    if digits.strip(b"0123456789abcdef"):
        return None
    return int(digits, 16)


def _record_end(data: bytes, pos: int) -> int | None:
    """The end of the good record at ``pos`` (after its newline), or None."""
    end = _claimed_end(data, pos)
    if end is None or end > len(data) or data[end - 1 : end] != b"\n":
        return None
    if zlib.crc32(memoryview(data)[pos + _HEADER : end - 1]) != _hex(data[pos + 9 : pos + 17]):
        return None
    return end


def _good_record_after(data: bytes, pos: int) -> bool:
    start = pos
    while True:
        newline = data.find(b"\n", start)
        if newline < 0 or newline + 1 >= len(data):
            return False
        if _record_end(data, newline + 1) is not None:
            return True
        start = newline + 1
