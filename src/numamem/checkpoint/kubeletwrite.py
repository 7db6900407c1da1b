"""Writing the kubelet ``memory_manager_state`` format: V1 or V3, byte-identical to the kubelet.

Writing V1 (``policyName``, ``machineState``, ``entries`` omitted when empty,
``checksum``) as compact JSON exactly as Go's ``json.Marshal`` writes it, with
the checksum over the go-spew text under the legacy type name
``state.MemoryManagerCheckpoint``: the one format every kubelet since v1.21
reads. Writing V3 (:class:`V3Encoder`, with pod-level resource managers on) as
kubelet master does: those V1 fields (the legacy checksum too, for a rollback),
then ``data``, the JSON of ``{policyName, machineState, entries, podEntries}``
(both omitted when empty), and ``dataChecksum = FNV-1a-32("(string)" + data)``.
Pod-level entries exist only inside ``data``.

The encoders keep the texts of what they rendered and render again only what changed
(a committed value is never mutated: identity means "unchanged"); one encoder per store,
not thread-safe. :func:`encode_v1` and :func:`encode_v3` render from scratch. Reading is
:mod:`numamem.checkpoint.kubelet`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from numamem.checkpoint.entrytexts import blocks_json, entry_json, entry_spew
from numamem.checkpoint.fnv import fnv1a_32
from numamem.checkpoint.gojson import go_string
from numamem.checkpoint.gospew import checkpoint_text, go_key
from numamem.checkpoint.kubelet import string_checksum
from numamem.checkpoint.machinetexts import MachineTexts
from numamem.memtypes import Block, NUMANodeState

V = TypeVar("V")

RawAssignments = Mapping[str, Mapping[str, Sequence[Block] | None] | None]


def _pod_entry_json(pod: str, blocks: Sequence[Block]) -> str:
    if not blocks:
        return f"{go_string(pod)}:{{}}"
    return f'{go_string(pod)}:{{"memoryBlocks":{blocks_json(blocks)}}}'


class _GoMapTexts(Generic[V]):
    """The texts of one Go map's entries in Go's key order, kept across calls.

    The memory manager never mutates a committed value (a change makes a new one), so
    identity means "unchanged": :meth:`texts` renders only the keys that are new or whose
    value is another object, and drops the keys that are gone. The keys are kept sorted
    (with their texts in lists beside them), so a call neither sorts nor rebuilds the
    lists. Holds the values it saw, so identity cannot be recycled.
    """

    def __init__(self, *renders: Callable[[str, V], str]) -> None:
        self._renders = renders
        self._values: dict[str, V] = {}
        self._order: list[str] = []
        self._keys: list[bytes] = []
        self._texts: tuple[list[str], ...] = tuple([] for _ in renders)

    def texts(self, mapping: Mapping[str, V]) -> tuple[list[str], ...]:
        """One list per render: the texts of every key, in Go's key order (the lists are
        kept: callers must not change them)."""
        values, texts = self._values, self._texts
        if values.keys() != mapping.keys():
            for key in values.keys() - mapping.keys():
                i = bisect.bisect_left(self._keys, go_key(key))
                del self._order[i], self._keys[i], values[key]
                for column in texts:
                    del column[i]
            for key in mapping.keys() - values.keys():
                sort_key = go_key(key)
                i = bisect.bisect_left(self._keys, sort_key)
                value = values[key] = mapping[key]
                self._order.insert(i, key)
                self._keys.insert(i, sort_key)
                for column, render in zip(texts, self._renders, strict=True):
                    column.insert(i, render(key, value))
        for i, key in enumerate(self._order):
            value = mapping[key]
            if values[key] is not value:
                values[key] = value
                for column, render in zip(texts, self._renders, strict=True):
                    column[i] = render(key, value)
        return texts


class V1Encoder:
    """Encodes V1 checkpoints, reusing each pod's text while the pod's mapping is the same object.

    A write renders only the pods that changed (:class:`_GoMapTexts`) and the machine
    state's nodes that changed (:class:`~numamem.checkpoint.machinetexts.MachineTexts`),
    and joins the kept pieces, instead of rendering the whole state. Not thread-safe: one
    encoder per store.
    """

    def __init__(self) -> None:
        self._entries: _GoMapTexts[Mapping[str, Sequence[Block] | None] | None] = _GoMapTexts(
            entry_spew, entry_json
        )
        self._machine = MachineTexts()

    def encode(
        self,
        policy_name: str,
        machine_state: Mapping[int, NUMANodeState | None] | None,
        assignments: RawAssignments,
    ) -> bytes:
        """The V1 file bytes, byte-identical to what the kubelet writes for the same state."""
        spews, jsons = self._entries.texts(assignments)
        if machine_state is None:
            ms_spew, ms, nil_last = None, "null", False
        else:
            ms_spew, ms, nil_last = self._machine.texts(machine_state)
        spew = checkpoint_text(policy_name, ms_spew, nil_last, spews)
        checksum = fnv1a_32(spew.encode("utf-8", "replace"))
        out = ['{"policyName":', go_string(policy_name), ',"machineState":', ms]
        if assignments:
            out += [',"entries":{', ",".join(jsons), "}"]
        out += [',"checksum":', str(checksum), "}"]
        return "".join(out).encode("utf-8", "replace")


class V3Encoder:
    """Encodes V3 checkpoints byte-identical to kubelet master's (``MarshalCheckpoint`` of
    ``MemoryManagerCheckpointV3``): the V1 encoding with ``data`` and ``dataChecksum``
    appended. ``data`` repeats the V1 fields but the checksum, so it is cut from the V1
    text (its machine state and entries are the same ``json.Marshal`` output), with the
    pod-level entries added. Not thread-safe: one encoder per store."""

    def __init__(self) -> None:
        self._v1 = V1Encoder()
        self._pods: _GoMapTexts[Sequence[Block]] = _GoMapTexts(_pod_entry_json)

    def encode(
        self,
        policy_name: str,
        machine_state: Mapping[int, NUMANodeState | None] | None,
        assignments: RawAssignments,
        pod_entries: Mapping[str, Sequence[Block]],
    ) -> bytes:
        v1 = self._v1.encode(policy_name, machine_state, assignments)
        # The last ',"checksum":' is V1's own: inside strings a quote is always escaped.
        head = v1[: v1.rindex(b',"checksum":')].decode("utf-8")
        (pods,) = self._pods.texts(pod_entries)
        data = head + (',"podEntries":{' + ",".join(pods) + "}" if pods else "") + "}"
        tail = f',"data":{go_string(data)},"dataChecksum":{string_checksum(data)}}}'
        return v1[:-1] + tail.encode("utf-8", "replace")


def encode_v3(
    policy_name: str,
    machine_state: Mapping[int, NUMANodeState | None] | None,
    assignments: RawAssignments,
    pod_entries: Mapping[str, Sequence[Block]],
) -> bytes:
    """The V3 file bytes, byte-identical to what kubelet master writes for the same state."""
    return V3Encoder().encode(policy_name, machine_state, assignments, pod_entries)


def encode_v1(
    policy_name: str,
    machine_state: Mapping[int, NUMANodeState | None] | None,
    assignments: RawAssignments,
) -> bytes:
    """The V1 file bytes, byte-identical to what the kubelet writes for the same state."""
    return V1Encoder().encode(policy_name, machine_state, assignments)
