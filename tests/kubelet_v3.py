"""A test-side writer of kubelet master's ``memory_manager_state`` V3 (spec section 8.2/8.3).

Written from the format's rules with Python's ``json`` and a plain FNV-1a loop, apart
from numamem's encoders (:mod:`numamem.checkpoint.kubeletwrite`), so that tests can compare
numamem's bytes with the kubelet's encoding of the same state. The legacy ``checksum``
is the go-spew hash of the V1 struct (:func:`numamem.checkpoint.gospew.render_checkpoint`,
itself pinned by the upstream vectors in ``tests/unit/test_checkpoint.py``).

Go's ``json.Marshal``: struct fields in declaration order, map keys sorted as strings,
``omitempty`` on ``entries``, ``podEntries`` and ``memoryBlocks``, compact, no trailing
newline, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped. The states tests use hold
printable names, where Python's other escaping equals Go's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from numamem.checkpoint.gospew import render_checkpoint
from numamem.memtypes import Block, NUMANodeState

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return h


GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
"""What Go's ``json.Marshal`` escapes beyond Python's ``json`` (they occur only in strings)."""


def _dumps(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "".join(GO_ESCAPES.get(ch, ch) for ch in text)


def _blocks(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    return [
        {"numaAffinity": list(b.numa_affinity or ()), "type": b.type, "size": b.size}
        for b in blocks
    ]


def _machine(machine_state: Mapping[int, NUMANodeState]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(str(n) for n in machine_state):
        node = machine_state[int(key)]
        tables = node.memory_map or {}
        out[key] = {
            "numberOfAssignments": node.number_of_assignments,
            "memoryMap": {
                name: {
                    "total": tables[name].total,
                    "systemReserved": tables[name].system_reserved,
                    "allocatable": tables[name].allocatable,
                    "reserved": tables[name].reserved,
                    "free": tables[name].free,
                }
                for name in sorted(tables)
            },
            "cells": list(node.cells or ()),
        }
    return out


def _legacy(
    policy: str,
    machine_state: Mapping[int, NUMANodeState],
    entries: Mapping[str, Mapping[str, Sequence[Block]]],
) -> dict[str, Any]:
    doc: dict[str, Any] = {"policyName": policy, "machineState": _machine(machine_state)}
    if entries:
        doc["entries"] = {
            pod: {ctr: _blocks(entries[pod][ctr]) for ctr in sorted(entries[pod])}
            for pod in sorted(entries)
        }
    return doc


def v3_data(
    policy: str,
    machine_state: Mapping[int, NUMANodeState],
    entries: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
) -> str:
    """The ``data`` string: ``{policyName, machineState, entries, podEntries}``."""
    return _dumps(_with_pods(_legacy(policy, machine_state, entries), pod_entries))


def _with_pods(doc: dict[str, Any], pod_entries: Mapping[str, Sequence[Block]]) -> dict[str, Any]:
    if pod_entries:
        doc["podEntries"] = {
            pod: ({"memoryBlocks": _blocks(pod_entries[pod])} if pod_entries[pod] else {})
            for pod in sorted(pod_entries)
        }
    return doc


def encode(
    policy: str,
    machine_state: Mapping[int, NUMANodeState],
    entries: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
) -> bytes:
    """The V3 file as kubelet master's ``MarshalCheckpoint`` writes it."""
    legacy = _legacy(policy, machine_state, entries)
    legacy["checksum"] = fnv1a_32(render_checkpoint(policy, machine_state, entries).encode("utf-8"))
    data = v3_data(policy, machine_state, entries, pod_entries)
    legacy["data"] = data
    legacy["dataChecksum"] = fnv1a_32(("(string)" + data).encode("utf-8"))
    return _dumps(legacy).encode("utf-8")


def encode_v2(
    policy: str,
    machine_state: Mapping[int, NUMANodeState],
    entries: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]],
) -> bytes:
    """The V2 file a v1.36-era kubelet with the gate on writes: V1 plus ``podEntries``, the
    checksum over the V2 struct (``PodEntries`` rendered before ``Checksum``)."""
    doc = _with_pods(_legacy(policy, machine_state, entries), pod_entries)
    text = render_checkpoint(policy, machine_state, entries, pod_entries=pod_entries)
    doc["checksum"] = fnv1a_32(text.encode("utf-8"))
    return _dumps(doc).encode("utf-8")
