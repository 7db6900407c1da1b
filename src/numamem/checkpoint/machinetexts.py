"""The texts of a machine state in a V1 checkpoint: per node, rendered once per change.

A V1 write needs two texts of every node state: its go-spew text (in the checksum's dump,
:func:`~numamem.checkpoint.gospew.render_node`) and its JSON (:func:`node_json`, as Go's
``json.Marshal`` writes it). :func:`node_texts` renders both in one pass (a fast path for
the nodes numamem holds: a memory map without nil tables; any other node is rendered by
the two definitions). :class:`MachineTexts` keeps each node's two texts, with its node id
in front, across writes: a write renders only the nodes that changed (most change one or
two) and joins the kept pieces in each format's key order.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from numamem.checkpoint.gojson import go_string
from numamem.checkpoint.gospew import go_key, render_node
from numamem.memtypes import NUMANodeState


def int_list(values: Sequence[int] | None) -> str:
    """A Go ``[]int`` as JSON (``null`` for nil)."""
    return "null" if values is None else "[" + ",".join(str(v) for v in values) + "]"


def _sorted_str(keys: Any) -> list[Any]:
    return sorted(keys, key=lambda k: str(k).encode("utf-8", "surrogatepass"))


def node_json(node: NUMANodeState | None) -> str:
    """A ``*NUMANodeState`` as Go's ``json.Marshal`` writes it (the definition)."""
    if node is None:
        return "null"
    if node.memory_map is None:
        tables = "null"
    else:
        parts = []
        for name in _sorted_str(node.memory_map):
            t = node.memory_map[name]
            parts.append(
                f"{go_string(name)}:"
                + (
                    "null"
                    if t is None
                    else f'{{"total":{t.total},"systemReserved":{t.system_reserved},"allocatable":{t.allocatable},'
                    f'"reserved":{t.reserved},"free":{t.free}}}'
                )
            )
        tables = "{" + ",".join(parts) + "}"
    return f'{{"numberOfAssignments":{node.number_of_assignments},"memoryMap":{tables},"cells":{int_list(node.cells)}}}'


@functools.lru_cache(maxsize=256)
def _names(keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """A memory map's type names in Go's key order (bytewise: the same for spew and JSON),
    each with its JSON string (cached: a machine has a handful of type names)."""
    return tuple((name, go_string(name)) for name in sorted(keys, key=go_key))


def node_texts(node: NUMANodeState) -> tuple[str, str]:
    """``(render_node(node), node_json(node))`` of a non-nil node, in one pass."""
    memory_map = node.memory_map
    if memory_map is None or any(t is None for t in memory_map.values()):
        return render_node(node), node_json(node)  # nil forms and spew's sticky flag
    spews = []
    jsons = []
    for name, quoted in _names(tuple(memory_map)):
        t = memory_map[name]
        spews.append(
            f"{name}:<*>{{TotalMemSize:(uint64){t.total} SystemReserved:(uint64){t.system_reserved} "
            f"Allocatable:(uint64){t.allocatable} Reserved:(uint64){t.reserved} Free:(uint64){t.free}}}"
        )
        jsons.append(
            f'{quoted}:{{"total":{t.total},"systemReserved":{t.system_reserved},'
            f'"allocatable":{t.allocatable},"reserved":{t.reserved},"free":{t.free}}}'
        )
    cells = node.cells
    if cells is None:
        spew_cells, json_cells = "<nil>", "null"
    else:
        ids = [str(c) for c in cells]
        spew_cells, json_cells = "[" + " ".join(ids) + "]", "[" + ",".join(ids) + "]"
    n = node.number_of_assignments
    return (
        f"{{NumberOfAssignments:(int){n} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)"
        f"map[{' '.join(spews)}] Cells:([]int){spew_cells}}}",
        f'{{"numberOfAssignments":{n},"memoryMap":{{{",".join(jsons)}}},"cells":{json_cells}}}',
    )


class MachineTexts:
    """A machine state's pieces in a V1 checkpoint, kept across writes. Not thread-safe.

    Per node id it keeps a copy of the node state it last rendered and that node's pieces,
    ``<id>:<*><spew>`` and ``"<id>":<json>``; a node equal to its copy reuses them (equality,
    not identity: a caller may change a node in place). Ids that are gone are dropped; the
    two key orders (numeric for spew, as strings for JSON) are kept for the last set of ids.
    """

    def __init__(self) -> None:
        self._nodes: dict[int, tuple[NUMANodeState, str, str]] = {}
        self._keys: tuple[int, ...] = ()
        self._orders: tuple[list[int], list[int]] = ([], [])

    def texts(self, machine_state: Mapping[int, NUMANodeState | None]) -> tuple[str, str, bool]:
        """``(spew, json, nil_last)``: the spew text of the map (``map[...]``, what
        :func:`~numamem.checkpoint.gospew.render_checkpoint` writes after its type), its
        JSON object, and whether the last node in spew order is nil (spew's sticky flag)."""
        keys = tuple(machine_state)
        if keys != self._keys:
            self._keys = keys
            self._orders = (sorted(keys), _sorted_str(keys))
            if len(self._nodes) > len(keys) or any(k not in machine_state for k in self._nodes):
                self._nodes = {k: v for k, v in self._nodes.items() if k in machine_state}
        pieces: dict[int, tuple[str, str]] = {}
        for k in keys:
            node = machine_state[k]
            if node is None:
                pieces[k] = (f"{k}:<nil>", f'"{k}":null')
                continue
            hit = self._nodes.get(k)
            if hit is None or hit[0] != node:
                spew, js = node_texts(node)
                hit = (node.copy(), f"{k}:<*>{spew}", f'"{k}":{js}')
                self._nodes[k] = hit
            pieces[k] = (hit[1], hit[2])
        spew_order, json_order = self._orders
        spew_text = "map[" + " ".join([pieces[k][0] for k in spew_order]) + "]"
        json_text = "{" + ",".join([pieces[k][1] for k in json_order]) + "}"
        nil_last = bool(spew_order) and machine_state[spew_order[-1]] is None
        return spew_text, json_text, nil_last
