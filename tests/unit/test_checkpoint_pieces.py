"""The V1 encoder's kept pieces against the definitions, after any sequence of changes.

:func:`node_texts`, :func:`checkpoint_text` and the entry texts are fast paths of
:func:`render_node`, :func:`node_json`, :func:`render_checkpoint`, :func:`render_entry` and
the JSON definitions below; :class:`MachineTexts` and
:class:`V1Encoder` keep pieces across writes. Each is compared here with a from-scratch
rendering by the definitions (which the upstream vectors of ``test_checkpoint.py`` pin).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from numamem.checkpoint import kubeletwrite
from numamem.checkpoint.entrytexts import blocks_json, entry_json, entry_spew
from numamem.checkpoint.fnv import fnv1a_32_reference
from numamem.checkpoint.gojson import go_string
from numamem.checkpoint.gospew import (
    checkpoint_text,
    go_key,
    render_checkpoint,
    render_entry,
    render_node,
)
from numamem.checkpoint.machinetexts import MachineTexts, node_json, node_texts
from numamem.memtypes import Block, MemoryTable, NUMANodeState
from tests.properties import examples
from tests.unit.test_checkpoint import blocks, ints

tables = st.builds(MemoryTable, ints, ints, ints, ints, ints)
type_names = st.one_of(
    st.sampled_from(["memory", "hugepages-2Mi", "hugepages-1Gi"]),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6),
)
live_nodes = st.builds(
    NUMANodeState,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.one_of(
        st.none(),
        st.dictionaries(type_names, tables, max_size=4),
        st.dictionaries(type_names, st.one_of(tables, st.none()), max_size=3),
    ),
    st.one_of(st.none(), st.lists(st.integers(0, 63), max_size=4)),
)
nodes = st.one_of(st.none(), live_nodes)
names = st.text(alphabet='ab-_Zé\u00ff"\\<\u2028\ud800', min_size=1, max_size=4)
containers = st.one_of(
    st.none(),
    st.dictionaries(
        names, st.one_of(st.none(), st.lists(blocks, max_size=3).map(tuple)), max_size=3
    ),
)


def _int_list(values: Sequence[int] | None) -> str:
    return "null" if values is None else "[" + ",".join(str(v) for v in values) + "]"


def reference_blocks_json(blocks: Sequence[Block] | None) -> str:
    """The definition (numamem's encoder before the fast paths)."""
    if blocks is None:
        return "null"
    return (
        "["
        + ",".join(
            f'{{"numaAffinity":{_int_list(b.numa_affinity)},"type":{go_string(b.type)},"size":{b.size}}}'
            for b in blocks
        )
        + "]"
    )


def reference_entry_json(pod: str, containers: Mapping[str, Sequence[Block] | None] | None) -> str:
    """The definition (numamem's encoder before the fast paths)."""
    if containers is None:
        return f"{go_string(pod)}:null"
    ordered = sorted(containers, key=lambda k: str(k).encode("utf-8", "surrogatepass"))
    return (
        f"{go_string(pod)}:{{"
        + ",".join(f"{go_string(c)}:{reference_blocks_json(containers[c])}" for c in ordered)
        + "}"
    )


def reference_v1(
    policy: str,
    machine_state: Mapping[int, NUMANodeState | None] | None,
    assignments: Mapping[str, Any],
) -> bytes:
    """The V1 file rendered from scratch by the definitions."""
    spew = render_checkpoint(policy, machine_state, assignments)
    checksum = fnv1a_32_reference(spew.encode("utf-8", "replace"))
    if machine_state is None:
        ms = "null"
    else:
        ms = "{" + ",".join(f'"{k}":{node_json(machine_state[k])}' for k in sorted(machine_state, key=str)) + "}"  # fmt: skip
    out = '{"policyName":' + go_string(policy) + ',"machineState":' + ms
    if assignments:
        pods = sorted(assignments, key=go_key)
        out += (
            ',"entries":{' + ",".join(reference_entry_json(p, assignments[p]) for p in pods) + "}"
        )
    out += ',"checksum":' + str(checksum) + "}"
    return out.encode("utf-8", "replace")


@settings(max_examples=examples(100), deadline=None)
@given(live_nodes)
def test_node_texts_are_the_two_definitions(node: NUMANodeState) -> None:
    assert node_texts(node) == (render_node(node), node_json(node))


@settings(max_examples=examples(100), deadline=None)
@given(st.text(max_size=4), containers)
def test_entry_texts_are_the_definitions(pod: str, ctrs: Any) -> None:
    assert entry_spew(pod, ctrs) == render_entry(pod, ctrs)
    assert entry_json(pod, ctrs) == reference_entry_json(pod, ctrs)
    for ctr_blocks in (ctrs or {}).values():
        assert blocks_json(ctr_blocks) == reference_blocks_json(ctr_blocks)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.text(max_size=5),
    st.one_of(st.none(), st.dictionaries(st.integers(0, 63), nodes, max_size=4)),
    st.one_of(st.none(), st.dictionaries(names, containers, max_size=3)),
)
def test_checkpoint_text_is_render_checkpoint(
    policy: str,
    machine_state: dict[int, NUMANodeState | None] | None,
    entries: dict[str, Any] | None,
) -> None:
    machine_text, nil_last = None, False
    if machine_state is not None:
        ids = sorted(machine_state)
        parts = [
            f"{k}:<nil>" if machine_state[k] is None else f"{k}:<*>{render_node(machine_state[k])}"  # type: ignore[arg-type]
            for k in ids
        ]
        machine_text = "map[" + " ".join(parts) + "]"
        nil_last = bool(ids) and machine_state[ids[-1]] is None
    texts = None if entries is None else [render_entry(p, entries[p]) for p in sorted(entries, key=go_key)]  # fmt: skip
    assert checkpoint_text(policy, machine_text, nil_last, texts) == render_checkpoint(
        policy, machine_state, entries
    )


def _apply(
    step: tuple[str, int, NUMANodeState | None, str, Any],
    machine: dict[int, NUMANodeState | None],
    assignments: dict[str, Any],
) -> tuple[dict[int, NUMANodeState | None], dict[str, Any]]:
    """One change, as the memory manager makes them (new objects) or in place (a caller's)."""
    op, node_id, node, pod, ctrs = step
    if op == "node":  # a new node object (copy on write)
        machine = {**machine, node_id: node}
    elif op == "drop-node":
        machine = {k: v for k, v in machine.items() if k != node_id}
    elif op == "in-place":  # the same node object, changed: equality, not identity, decides
        target = machine.get(node_id)
        if target is not None:
            target.number_of_assignments += 1
            if target.memory_map:
                table = next(iter(target.memory_map.values()))
                if table is not None:
                    table.free = (table.free + 1) % 2**64
    elif op == "pod":
        assignments = {**assignments, pod: ctrs}
    else:
        assignments = {p: c for p, c in assignments.items() if p != pod}
    return machine, assignments


steps = st.lists(
    st.tuples(
        st.sampled_from(["node", "node", "drop-node", "in-place", "pod", "drop-pod"]),
        st.integers(0, 5),
        nodes,
        names,
        containers,
    ),
    max_size=30,
)


@settings(max_examples=examples(60), deadline=None)
@given(st.dictionaries(st.integers(0, 5), nodes, max_size=4), steps)
def test_machine_texts_after_any_changes_are_a_fresh_rendering(
    machine: dict[int, NUMANodeState | None], changes: Sequence[Any]
) -> None:
    kept = MachineTexts()
    assignments: dict[str, Any] = {}
    for step in [None, *changes]:
        if step is not None:
            machine, assignments = _apply(step, machine, assignments)
        assert kept.texts(machine) == MachineTexts().texts(machine)
        spew, js, nil_last = kept.texts(machine)
        ids = sorted(machine)
        parts = [f"{k}:<nil>" if machine[k] is None else f"{k}:<*>{render_node(machine[k])}" for k in ids]  # type: ignore[arg-type]  # fmt: skip
        assert spew == "map[" + " ".join(parts) + "]"
        assert js == "{" + ",".join(f'"{k}":{node_json(machine[k])}' for k in sorted(machine, key=str)) + "}"  # fmt: skip
        assert nil_last == (bool(ids) and machine[ids[-1]] is None)


@settings(max_examples=examples(60), deadline=None)
@given(st.text(max_size=4), st.dictionaries(st.integers(0, 5), nodes, max_size=4), steps)
def test_v1_encoder_after_any_changes_writes_the_definitions_bytes(
    policy: str, machine: dict[int, NUMANodeState | None], changes: Sequence[Any]
) -> None:
    encoder = kubeletwrite.V1Encoder()
    assignments: dict[str, Any] = {}
    for step in [None, *changes]:
        if step is not None:
            machine, assignments = _apply(step, machine, assignments)
        assert encoder.encode(policy, machine, assignments) == reference_v1(
            policy, machine, assignments
        )
    assert encoder.encode(policy, None, assignments) == reference_v1(policy, None, assignments)
