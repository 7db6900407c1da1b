"""One pod's texts in a checkpoint (go-spew and JSON), rendered in straight-line code.

A write renders the entries of the pods that changed (the kept texts of the others are
reused, :class:`~numamem.checkpoint.kubeletwrite.V1Encoder`): :func:`entry_spew` is
:func:`~numamem.checkpoint.gospew.render_entry` and :func:`entry_json` Go's ``json.Marshal``
of an entry (defined in ``tests/unit/test_checkpoint_pieces.py``), each written as f-strings
over the blocks instead of spew's typed writer and generator expressions (property tests
hold them to the definitions). Pure functions; the JSON strings of memory type names are cached (a machine
has a handful).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from numamem.checkpoint.gojson import go_string
from numamem.checkpoint.gospew import go_key
from numamem.memtypes import Block

type_json = functools.lru_cache(maxsize=256)(go_string)
"""go_string of a memory type name, cached."""


def _sorted(keys: Mapping[str, object]) -> list[str]:
    return sorted(keys, key=go_key) if len(keys) > 1 else list(keys)


def _block_spew(b: Block) -> str:
    affinity = b.numa_affinity
    ids = "<nil>" if affinity is None else "[" + " ".join([str(n) for n in affinity]) + "]"
    return f"{{NUMAAffinity:([]int){ids} Type:(v1.ResourceName){b.type} Size:(uint64){b.size}}}"


def entry_spew(pod: str, containers: Mapping[str, Sequence[Block] | None] | None) -> str:
    """``pod:map[container:[blocks] ...]`` as go-spew writes one key/value of ``Entries``."""
    if containers is None:
        return f"{pod}:<nil>"
    parts = []
    for name in _sorted(containers):
        blocks = containers[name]
        if blocks is None:
            parts.append(f"{name}:<nil>")
        else:
            parts.append(f"{name}:[" + " ".join([_block_spew(b) for b in blocks]) + "]")
    return f"{pod}:map[" + " ".join(parts) + "]"


def blocks_json(blocks: Sequence[Block] | None) -> str:
    """A ``[]Block`` as Go's ``json.Marshal`` writes it."""
    if blocks is None:
        return "null"
    parts = []
    for b in blocks:
        affinity = b.numa_affinity
        ids = "null" if affinity is None else "[" + ",".join([str(n) for n in affinity]) + "]"
        parts.append(f'{{"numaAffinity":{ids},"type":{type_json(b.type)},"size":{b.size}}}')
    return "[" + ",".join(parts) + "]"


def entry_json(pod: str, containers: Mapping[str, Sequence[Block] | None] | None) -> str:
    """``"pod":{"container":[blocks],...}``, one key/value of ``entries`` in the JSON."""
    if containers is None:
        return f"{go_string(pod)}:null"
    parts = [f"{go_string(c)}:{blocks_json(containers[c])}" for c in _sorted(containers)]
    return f"{go_string(pod)}:{{" + ",".join(parts) + "}"
