"""go-spew ``%#v`` text of the kubelet memory manager checkpoint structs (for the checksum).

The kubelet hashes ``dump.ForHash(&checkpoint)``: go-spew with ``SortKeys`` and
``DisableMethods``, ``%#v``, then FNV-1a-32 of that text. The go-spew rules
that matter here:

* every value shows its Go type in parentheses, except map keys and values and
  slice elements; struct fields show ``Name:`` and the value with its type;
* strings are raw (no quotes, no escaping); ints and uints are decimal;
* a nil map or slice prints ``<nil>`` after its type, an empty one ``map[]``/``[]``;
* inside a map, a non-nil pointer prints ``<*>`` and its pointee, a nil one
  ``<nil>``, and then spew's "ignore the next type" flag *stays set*: the struct
  field after a map whose last value was a nil pointer is printed without its
  type (``MachineState:(state.NUMANodeMap)map[7:<nil>] Entries:map[]``);
* map keys are sorted (ints numerically, strings bytewise).

The model below mirrors the Go structs field by field; ``None`` is Go's nil.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from numamem.memtypes import Block, NUMANodeState

LEGACY_TYPE = "state.MemoryManagerCheckpoint"
V1_TYPE = "state.MemoryManagerCheckpointV1"

RawBlocks = Sequence[Block] | None
RawContainers = Mapping[str, RawBlocks] | None
RawEntries = Mapping[str, RawContainers] | None
RawPodEntries = Mapping[str, RawBlocks] | None
"""pod uid -> ``PodEntry.MemoryBlocks`` (V2)."""


@dataclass
class _Out:
    parts: list[str]
    ignore_next_type: bool = False

    def typed(self, type_name: str) -> None:
        """Write ``(type)`` unless the ignore flag is set; the flag is then cleared."""
        if not self.ignore_next_type:
            self.parts.append("(")
            self.parts.append(type_name)
            self.parts.append(")")
        self.ignore_next_type = False


def _int_slice(out: _Out, values: Sequence[int] | None) -> None:
    out.typed("[]int")
    if values is None:
        out.parts.append("<nil>")
    else:
        out.parts.append("[" + " ".join(str(v) for v in values) + "]")


def _block(out: _Out, block: Block) -> None:
    # A slice element: the struct's own type is suppressed, its fields are typed.
    out.ignore_next_type = False
    out.parts.append("{NUMAAffinity:")
    _int_slice(out, block.numa_affinity)
    out.parts.append(f" Type:(v1.ResourceName){block.type} Size:(uint64){block.size}}}")


def _blocks(out: _Out, type_name: str, blocks: RawBlocks) -> None:
    out.typed(type_name)
    if blocks is None:
        out.parts.append("<nil>")
        return
    out.parts.append("[")
    for i, block in enumerate(blocks):
        if i:
            out.parts.append(" ")
        _block(out, block)
    out.parts.append("]")


def go_key(text: str) -> bytes:
    """A map key's sort key in Go's order (its bytes)."""
    return text.encode("utf-8", "surrogatepass")


def _node(out: _Out, node: NUMANodeState) -> None:
    out.parts.append(f"{{NumberOfAssignments:(int){node.number_of_assignments} MemoryMap:")
    out.typed("map[v1.ResourceName]*state.MemoryTable")
    if node.memory_map is None:
        out.parts.append("<nil>")
    else:
        out.parts.append("map[")
        for i, name in enumerate(sorted(node.memory_map, key=go_key)):
            if i:
                out.parts.append(" ")
            out.parts.append(name)
            out.parts.append(":")
            table = node.memory_map[name]
            if table is None:
                out.parts.append("<nil>")
                out.ignore_next_type = True
            else:
                out.parts.append(
                    f"<*>{{TotalMemSize:(uint64){table.total} SystemReserved:(uint64){table.system_reserved} "
                    f"Allocatable:(uint64){table.allocatable} Reserved:(uint64){table.reserved} "
                    f"Free:(uint64){table.free}}}"
                )
                out.ignore_next_type = False
        out.parts.append("]")
    out.parts.append(" Cells:")
    _int_slice(out, node.cells)
    out.parts.append("}")


def render_node(node: NUMANodeState) -> str:
    """The text of one non-nil node state in the machine state map (after its ``<*>``).

    A function of the node alone: it starts and ends with spew's ignore flag clear
    (the trailing ``Cells`` slice always clears it), so callers may cache it.
    """
    out = _Out([])
    _node(out, node)
    return "".join(out.parts)


def sorted_keys(mapping: Mapping[str, object]) -> list[str]:
    """Map keys in Go's order (bytewise)."""
    return sorted(mapping, key=go_key)


def render_entry(pod: str, containers: RawContainers) -> str:
    """``pod:map[container:[blocks] ...]``, one key/value of ``Entries``.

    Independent of what precedes it: spew's "ignore the next type" flag is set
    before every map value, and cleared after it.
    """
    out = _Out([pod, ":"], ignore_next_type=True)
    out.typed("")  # suppressed: map values carry no type
    if containers is None:
        out.parts.append("<nil>")
        return "".join(out.parts)
    out.parts.append("map[")
    for j, name in enumerate(sorted_keys(containers)):
        if j:
            out.parts.append(" ")
        out.parts.append(name)
        out.parts.append(":")
        out.ignore_next_type = True
        _blocks(out, "", containers[name])
    out.parts.append("]")
    return "".join(out.parts)


def checkpoint_text(
    policy_name: str,
    machine_text: str | None,
    nil_last: bool,
    entry_texts: Sequence[str] | None,
    *,
    type_name: str = LEGACY_TYPE,
) -> str:
    """:func:`render_checkpoint` of the V1 struct (checksum 0) from its pieces: ``machine_text``
    is the machine state map's text after its type (``map[...]``; None: a nil map),
    ``nil_last`` whether its last node is nil (which sets spew's flag: the type of
    ``Entries`` is then not printed), ``entry_texts`` the :func:`render_entry` texts in Go's
    key order (None: a nil map)."""
    machine = "<nil>" if machine_text is None else machine_text
    entries_type = "" if nil_last else "(state.ContainerMemoryAssignments)"
    entries = "<nil>" if entry_texts is None else "map[" + " ".join(entry_texts) + "]"
    return (
        f"(*{type_name}){{PolicyName:(string){policy_name} MachineState:(state.NUMANodeMap)"
        f"{machine} Entries:{entries_type}{entries} Checksum:(checksum.Checksum)0}}"
    )


def render_checkpoint(
    policy_name: str,
    machine_state: Mapping[int, NUMANodeState | None] | None,
    entries: RawEntries,
    *,
    type_name: str = LEGACY_TYPE,
    pod_entries: RawPodEntries | bool = False,
    checksum: int = 0,
    entry_texts: Sequence[str] | None = None,
    node_text: Callable[[NUMANodeState], str] = render_node,
) -> str:
    """``%#v`` of ``&MemoryManagerCheckpoint{...}``; ``pod_entries`` False = the V1 struct.

    ``entry_texts`` are the :func:`render_entry` texts of ``entries`` in Go's key
    order (:func:`sorted_keys`), when the caller has them (a pod's text depends
    only on the pod, so it can be cached); by default they are rendered here.
    ``node_text`` renders one node state (:func:`render_node`, or a cache of it).
    """
    out = _Out([f"(*{type_name}){{PolicyName:(string){policy_name} MachineState:"])
    out.typed("state.NUMANodeMap")
    if machine_state is None:
        out.parts.append("<nil>")
    else:
        out.parts.append("map[")
        for i, node_id in enumerate(sorted(machine_state)):
            if i:
                out.parts.append(" ")
            out.parts.append(f"{node_id}:")
            node = machine_state[node_id]
            if node is None:
                out.parts.append("<nil>")
                out.ignore_next_type = True
            else:
                out.parts.append("<*>")
                out.parts.append(node_text(node))
                out.ignore_next_type = False
        out.parts.append("]")
    out.parts.append(" Entries:")
    out.typed("state.ContainerMemoryAssignments")
    if entries is None:
        out.parts.append("<nil>")
    else:
        if entry_texts is None:
            entry_texts = [render_entry(pod, entries[pod]) for pod in sorted_keys(entries)]
        out.parts.append("map[")
        out.parts.append(" ".join(entry_texts))
        out.parts.append("]")
        out.ignore_next_type = False
    if pod_entries is not False:
        out.parts.append(" PodEntries:")
        out.typed("state.PodMemoryAssignments")
        if pod_entries is None or pod_entries is True:
            out.parts.append("<nil>")
        else:
            out.parts.append("map[")
            for i, pod in enumerate(sorted(pod_entries, key=go_key)):
                if i:
                    out.parts.append(" ")
                out.parts.append(f"{pod}:{{MemoryBlocks:")
                _blocks(out, "[]state.Block", pod_entries[pod])
                out.parts.append("}")
            out.parts.append("]")
    out.parts.append(" Checksum:")
    out.typed("checksum.Checksum")
    out.parts.append(f"{checksum}}}")
    return "".join(out.parts)
