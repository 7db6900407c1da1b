"""The kubelet ``memory_manager_state`` format: its structs, its checksums, reading V1, V2 and V3.

Reading follows the newest kubelet (master, V3-capable):

1. V3: the outer JSON, then ``data`` as JSON, then ``dataChecksum =
   FNV-1a-32("(string)" + data)``. When V3 fails and the file carries a
   non-empty ``data`` or a non-zero ``dataChecksum``, that is a hard error
   (``could not load v3 checkpoint: ...``) with no fallback.
2. V2 (``podEntries`` covered by the checksum), then
3. V1, whose checksum may be 0, or the hash under the legacy or the
   ``MemoryManagerCheckpointV1`` type name. The V1 error is the one reported.

Pod-level entries (``podEntries`` of V2, or inside V3's ``data``) are returned in
:attr:`Loaded.pod_entries`; whether they are kept is the store's decision (the
``PodLevelResourceManagers`` gate).

Writing (V1, or V3 with pod-level resource managers on) is :mod:`numamem.checkpoint.kubeletwrite`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from numamem.checkpoint.fnv import fnv1a_32
from numamem.checkpoint.gojson import Decoder, GoJSONError, Object, parse
from numamem.checkpoint.gospew import (
    LEGACY_TYPE,
    V1_TYPE,
    RawEntries,
    RawPodEntries,
    render_checkpoint,
)
from numamem.errors import CheckpointError, CorruptCheckpointError, quote
from numamem.memtypes import Block, MemoryTable, NUMANodeState

MachineStateRaw = dict[int, NUMANodeState | None] | None


@dataclass
class Checkpoint:
    """A decoded checkpoint struct; None is Go's nil, as the checksum needs."""

    policy_name: str = ""
    machine_state: MachineStateRaw = field(default_factory=dict)
    entries: dict[str, dict[str, list[Block] | None] | None] | None = field(default_factory=dict)
    pod_entries: dict[str, list[Block] | None] | None = field(default_factory=dict)
    checksum: int = 0
    data: str = ""
    data_checksum: int = 0


@dataclass
class Loaded:
    """A verified checkpoint, converted to the memory manager's state shapes."""

    policy_name: str
    machine_state: dict[int, NUMANodeState | None]
    assignments: dict[str, dict[str, tuple[Block, ...]]]
    format: str  # "v1", "v2" or "v3"
    pod_entries: dict[str, tuple[Block, ...]] = field(default_factory=dict)
    """Pod uid -> pod-level blocks (V2, V3); a ``null`` entry is one without blocks."""


def _block(value: Any, path: str) -> Block:
    if value is None:
        return Block(None, "", 0)
    obj = Decoder.obj(value, "state.Block", path)
    affinity: list[int] | None = None
    type_name, size = "", 0
    for name, v in Decoder.fields(obj, ["numaAffinity", "type", "size"]):
        if name == "numaAffinity":
            affinity = Decoder.int_slice(v, "Block.numaAffinity")
        elif v is None:
            continue
        elif name == "type":
            type_name = Decoder.string(v, "Block.type", "v1.ResourceName")
        else:
            size = Decoder.uint64(v, "Block.size")
    return Block(None if affinity is None else tuple(affinity), type_name, size)


def _blocks(value: Any, path: str) -> list[Block] | None:
    if value is None:
        return None
    return [_block(v, path) for v in Decoder.array(value, "[]state.Block", path)]


def _table(value: Any, path: str) -> MemoryTable | None:
    if value is None:
        return None
    obj = Decoder.obj(value, "state.MemoryTable", path)
    fields = {"total": 0, "systemReserved": 0, "allocatable": 0, "reserved": 0, "free": 0}
    for name, v in Decoder.fields(obj, list(fields)):
        if v is not None:
            fields[name] = Decoder.uint64(v, f"MemoryTable.{name}")
    return MemoryTable(
        fields["total"],
        fields["systemReserved"],
        fields["allocatable"],
        fields["reserved"],
        fields["free"],
    )


def _node(value: Any, path: str) -> NUMANodeState | None:
    if value is None:
        return None
    obj = Decoder.obj(value, "state.NUMANodeState", path)
    node = NUMANodeState(0, None, None)
    for name, v in Decoder.fields(obj, ["numberOfAssignments", "memoryMap", "cells"]):
        if name == "numberOfAssignments":
            if v is not None:
                node.number_of_assignments = Decoder.int64(v, "NUMANodeState.numberOfAssignments")
        elif name == "memoryMap":
            # A null table (never written by a kubelet) is kept for the checksum, then refused.
            tables = cast(dict[str, MemoryTable | None] | None, node.memory_map)
            merged = Decoder.merge_map(
                tables,
                v,
                "map[v1.ResourceName]*state.MemoryTable",
                "NUMANodeState.memoryMap",
                key=str,
                element=_table,
            )
            node.memory_map = cast(dict[str, MemoryTable] | None, merged)
        else:
            cells = Decoder.int_slice(v, "NUMANodeState.cells")
            node.cells = cells
    return node


def _containers(value: Any, path: str) -> dict[str, list[Block] | None] | None:
    return Decoder.merge_map(
        None, value, "map[string][]state.Block", path, key=str, element=_blocks
    )


def _pod_entry(value: Any, path: str) -> list[Block] | None:
    if value is None:
        return None
    obj = Decoder.obj(value, "state.PodEntry", path)
    blocks: list[Block] | None = None
    for _, v in Decoder.fields(obj, ["memoryBlocks"]):
        blocks = _blocks(v, "PodEntry.memoryBlocks")
    return blocks


def decode(
    text: bytes | str | Any,
    *,
    v2: bool = False,
    v3: bool = False,
    parsed: bool = False,
    data: bool = False,
) -> Checkpoint:
    """Decode into the V1 (default), V2, V3 or V3-``data`` struct with Go's rules.

    Maps start empty, not nil (the kubelet pre-initialises them).
    """
    tree = text if parsed else parse(text)
    cp = Checkpoint()
    if tree is None:
        return cp
    if not isinstance(tree, Object):
        raise Decoder.type_error(tree, LEGACY_TYPE, "")
    names = ["policyName", "machineState", "entries"] + ([] if data else ["checksum"])
    if v2 or v3 or data:
        names.append("podEntries")
    if v3:
        names += ["data", "dataChecksum"]
    for name, v in Decoder.fields(tree, names):
        if name == "policyName":
            if v is not None:
                cp.policy_name = Decoder.string(v, "MemoryManagerCheckpoint.policyName")
        elif name == "machineState":
            cp.machine_state = Decoder.merge_map(
                cp.machine_state,
                v,
                "state.NUMANodeMap",
                "MemoryManagerCheckpoint.machineState",
                key=lambda k: Decoder.int_map_key(k, "machineState"),
                element=_node,
            )
        elif name == "entries":
            cp.entries = Decoder.merge_map(
                cp.entries,
                v,
                "state.ContainerMemoryAssignments",
                "MemoryManagerCheckpoint.entries",
                key=str,
                element=_containers,
            )
        elif name == "podEntries":
            cp.pod_entries = Decoder.merge_map(
                cp.pod_entries,
                v,
                "state.PodMemoryAssignments",
                "MemoryManagerCheckpoint.podEntries",
                key=str,
                element=_pod_entry,
            )
        elif name == "checksum":
            if v is not None:
                cp.checksum = Decoder.uint64(
                    v, "MemoryManagerCheckpoint.checksum", "checksum.Checksum"
                )
        elif name == "data":
            if v is not None:
                cp.data = Decoder.string(v, "MemoryManagerCheckpoint.data")
        elif v is not None:
            cp.data_checksum = Decoder.uint64(
                v, "MemoryManagerCheckpoint.dataChecksum", "checksum.Checksum"
            )
    return cp


def _hash(cp: Checkpoint, type_name: str, *, with_pod_entries: bool = False) -> int:
    raw_entries: RawEntries = cp.entries
    raw_pods: RawPodEntries | bool = cp.pod_entries if with_pod_entries else False
    text = render_checkpoint(
        cp.policy_name, cp.machine_state, raw_entries, type_name=type_name, pod_entries=raw_pods
    )
    return fnv1a_32(text.encode("utf-8", "replace"))


def string_checksum(data: str) -> int:
    """``checksum.New(string)``: FNV-1a-32 of ``"(string)" + data``."""
    return fnv1a_32(("(string)" + data).encode("utf-8", "replace"))


def _loaded(cp: Checkpoint, fmt: str) -> Loaded:
    for node_id, node in (cp.machine_state or {}).items():
        for name, table in ((node.memory_map if node else None) or {}).items():
            if table is None:
                raise CheckpointError(
                    f"machine state of NUMA node {node_id}: memory table {quote(name)} is null"
                )
    assignments = {
        pod: {c: tuple(b or ()) for c, b in (ctrs or {}).items()}
        for pod, ctrs in (cp.entries or {}).items()
    }
    pods = {pod: tuple(b or ()) for pod, b in (cp.pod_entries or {}).items()}
    return Loaded(cp.policy_name, dict(cp.machine_state or {}), assignments, fmt, pods)


def _v3_payload(tree: Any) -> bool:
    """Whether the raw file names a non-empty ``data`` or non-zero ``dataChecksum``."""
    if not isinstance(tree, Object):
        return False
    for name, v in Decoder.fields(tree, ["data", "dataChecksum"]):
        if name == "data" and v not in (None, ""):
            return True
        if name == "dataChecksum" and v not in (None, 0):
            return True
    return False


def load(data: bytes) -> Loaded:
    """Decode and verify with the newest kubelet's order (V3, V2, V1). Raises CheckpointError."""
    try:
        tree: Any = parse(data)
    except GoJSONError as err:
        tree_error: GoJSONError | None = err
        tree = None
    else:
        tree_error = None

    if tree_error is None:
        try:
            return _load_v3(tree)
        except CheckpointError as err:
            if _v3_payload(tree):
                raise CheckpointError(f"could not load v3 checkpoint: {err}") from err
        try:
            cp = decode(tree, v2=True, parsed=True)
            if cp.checksum == _hash(cp, LEGACY_TYPE, with_pod_entries=True):
                return _loaded(cp, "v2")
        except CheckpointError:
            pass
    if tree_error is not None:
        raise tree_error
    cp = decode(tree, parsed=True)
    if cp.checksum == 0 or cp.checksum in (_hash(cp, LEGACY_TYPE), _hash(cp, V1_TYPE)):
        return _loaded(cp, "v1")
    raise CorruptCheckpointError(cp.checksum, _hash(cp, LEGACY_TYPE))


def _load_v3(tree: Any) -> Loaded:
    try:
        outer = decode(tree, v3=True, parsed=True)
    except CheckpointError as err:
        raise CheckpointError(f"failed to deserialize memory manager checkpoint: {err}") from err
    try:
        inner = decode(outer.data, data=True)
    except CheckpointError as err:
        raise CheckpointError(
            f"failed to deserialize memory manager checkpoint data: {err}"
        ) from err
    if string_checksum(outer.data) != outer.data_checksum:
        raise CorruptCheckpointError(outer.data_checksum, string_checksum(outer.data))
    return _loaded(inner, "v3")
