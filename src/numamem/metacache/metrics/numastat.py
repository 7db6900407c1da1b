"""The kernel's per-NUMA-node memory accounting and cpuset node lists, parsed (pure).

``memory.numa_stat`` comes in two formats, told apart by its first token:

* cgroup **v1**: ``<name>=<pages> N0=<pages> N1=<pages> ...``, one line per
  ``total``, ``file``, ``anon``, ``unevictable`` and their ``hierarchical_``
  variants (the cgroup and its descendants); values are **pages**;
* cgroup **v2**: ``<name> N0=<bytes> N1=<bytes> ...``, one line per ``anon``,
  ``file``, ``kernel_stack``, ``pagetables``, ``shmem``, ``file_mapped``, ...
  (always hierarchical); values are **bytes**, except the ``workingset_*``
  lines, which count events.

The parser is strict: a line that is not of its file's format, a value that is
not a whole number below 2^64, a node listed twice, a name listed twice or a
file that mixes both formats is a :class:`~numamem.errors.CgroupFormatError`
naming the file, the line number and the line. Names it does not know are
kept (newer kernels add lines).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from numamem.cpuset import MAX_NUMA_NODES, parse_cpulist
from numamem.errors import CgroupFormatError, InvalidArgumentError, quote

V1_FORMAT, V2_FORMAT = "v1", "v2"
MAX_LINES = 256
MAX_NODE = MAX_NUMA_NODES - 1  # the largest node id of any kernel configuration
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NODE = re.compile(r"^N([0-9]+)=([0-9]+)$")
_UINT64 = 1 << 64


@dataclass(frozen=True)
class NumaStat:
    """One ``memory.numa_stat``: line name -> NUMA node -> value, v1 pages already converted
    to bytes (so ``total`` is bytes in both formats; ``workingset_*`` stay event counts)."""

    format: str
    lines: Mapping[str, Mapping[int, int]]

    def line(self, name: str) -> Mapping[int, int]:
        """The line's values per node; empty when the file has no such line."""
        return self.lines.get(name, {})


def parse_numa_stat(text: str, path: str, page_size: int) -> NumaStat:
    """Parse ``memory.numa_stat`` text read from ``path`` (named in errors)."""
    lines: dict[str, dict[int, int]] = {}
    fmt: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        tokens = line.split()
        if not tokens:
            continue
        if len(lines) >= MAX_LINES:
            raise CgroupFormatError(f"{path}: more than {MAX_LINES} lines")

        def bad(why: str, line: str = line, number: int = number) -> CgroupFormatError:
            return CgroupFormatError(f"{path}: line {number} {quote(line.strip()[:120])}: {why}")

        name, sep, total = tokens[0].partition("=")
        line_format = V1_FORMAT if sep else V2_FORMAT
        if fmt is None:
            fmt = line_format
        elif line_format != fmt:
            raise bad(f"a {line_format} line in a {fmt}-format file")
        if not _NAME.match(name):
            raise bad(f"{quote(name)} is not a statistic name")
        if name in lines:
            raise bad(f"{quote(name)} is listed twice")
        if sep and _uint(total) is None:
            raise bad(f"total {quote(total)} is not a whole number")
        scale = page_size if fmt == V1_FORMAT else 1
        per_node: dict[int, int] = {}
        for token in tokens[1:]:
            match = _NODE.match(token)
            value = _uint(match.group(2)) if match else None
            if match is None or value is None:
                raise bad(f"{quote(token)} is not N<node>=<value>")
            node = int(match.group(1))
            if node > MAX_NODE:
                raise bad(f"node {node} is out of range")
            if node in per_node:
                raise bad(f"node {node} is listed twice")
            if value * scale >= _UINT64:
                raise bad(f"{quote(token)} is 2^64 bytes or more")
            per_node[node] = value * scale
        lines[name] = per_node
    return NumaStat(fmt or V2_FORMAT, lines)


def parse_mems(text: str, path: str) -> frozenset[int]:
    """A ``cpuset.mems``-style node list (``0-1,3``; empty text is no node), each id below
    ``MAX_NUMA_NODES``."""
    try:
        return frozenset(parse_cpulist(text, MAX_NUMA_NODES, "NUMA node"))
    except InvalidArgumentError as err:
        raise CgroupFormatError(f"{path}: {err}") from None


def _uint(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value < _UINT64 else None
