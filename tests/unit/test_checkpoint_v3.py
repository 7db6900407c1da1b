"""memory_manager_state V3 with pod-level entries (KEP-5526): the section 8.3 vectors, byte
equality with the kubelet's encoding (tests/kubelet_v3.py), V2/V3 round trips through the
store, and what the PodLevelResourceManagers gate decides at restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numamem.checkpoint import kubelet, kubeletwrite
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.errors import CheckpointError
from numamem.memtypes import Block, MemoryTable, NUMANodeState, Snapshot
from tests import kubelet_v3
from tests.daemon import data_path
from tests.properties import examples

FIXTURES = data_path("kubelet-checkpoints")
EXAMPLES = data_path("checkpoint-examples")


def test_the_v3_example_is_the_kubelets_encoding_byte_for_byte() -> None:
    """Section 8.2's V3 example (dataChecksum 1844076009, legacy checksum 4050994722): numamem's
    V3 encoder and the test-side kubelet writer both produce the file."""
    text = (EXAMPLES / "v3_1844076009.json").read_bytes()
    loaded = kubelet.load(text)
    assert loaded.format == "v3"
    assert kubeletwrite.encode_v3("Static", loaded.machine_state, loaded.assignments, {}) == text
    assert kubelet_v3.encode("Static", loaded.machine_state, loaded.assignments, {}) == text
    doc = json.loads(text)
    assert (doc["checksum"], doc["dataChecksum"]) == (4050994722, 1844076009)


@pytest.mark.parametrize(
    ("fixture", "data_checksum", "pods"),
    [
        ("mm_v3_valid_1849615440.json", 1849615440, {}),
        ("mm_v3_podentries_637296054.json", 637296054, {"pod": (Block((0,), "memory", 512),)}),
    ],
)
def test_upstream_v3_vectors_are_reproduced_by_the_encoder(
    fixture: str, data_checksum: int, pods: dict[str, tuple[Block, ...]]
) -> None:
    """The upstream ``data`` strings re-encode byte for byte, and hash to the stored values."""
    text = (FIXTURES / fixture).read_bytes()
    loaded = kubelet.load(text)
    assert loaded.format == "v3"
    assert loaded.pod_entries == pods
    ours = json.loads(
        kubeletwrite.encode_v3(
            loaded.policy_name, loaded.machine_state, loaded.assignments, loaded.pod_entries
        )
    )
    stored = json.loads(text)
    assert ours["data"] == stored["data"]
    assert ours["dataChecksum"] == stored["dataChecksum"] == data_checksum
    assert kubelet_v3.fnv1a_32(("(string)" + stored["data"]).encode()) == data_checksum


def test_the_v2_vector_keeps_its_pod_entries() -> None:
    loaded = kubelet.load((FIXTURES / "mm_v2_valid_1278640530.json").read_bytes())
    assert loaded.format == "v2"
    assert loaded.pod_entries == {"pod": (Block((0,), "memory", 512),)}


names = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("\u2028é"),
    min_size=1,
    max_size=8,
)
sizes = st.integers(0, 2**64 - 1)
tables = st.builds(MemoryTable, sizes, sizes, sizes, sizes, sizes)
node_states = st.builds(
    NUMANodeState,
    st.integers(0, 100),
    st.dictionaries(st.sampled_from(["memory", "hugepages-2Mi", "hugepages-1Gi"]), tables),
    st.lists(st.integers(0, 15), min_size=1, max_size=3),
)
block_lists = st.lists(
    st.builds(
        Block,
        st.lists(st.integers(0, 15), min_size=1, max_size=3).map(tuple),
        st.sampled_from(["memory", "hugepages-2Mi"]),
        sizes,
    ),
    max_size=3,
).map(tuple)
v3_states = st.tuples(
    st.sampled_from(["Static", "static", "None"]),
    st.dictionaries(st.integers(0, 15), node_states, max_size=4),
    st.dictionaries(names, st.dictionaries(names, block_lists, max_size=3), max_size=3),
    st.dictionaries(names, block_lists, max_size=3),
)


@settings(max_examples=examples(60), deadline=None)
@given(v3_states)
def test_random_v3_states_equal_the_kubelets_bytes_and_round_trip(
    state: tuple[
        str,
        dict[int, NUMANodeState],
        dict[str, dict[str, tuple[Block, ...]]],
        dict[str, tuple[Block, ...]],
    ],
) -> None:
    policy, machine_state, entries, pod_entries = state
    data = kubeletwrite.encode_v3(policy, machine_state, entries, pod_entries)
    assert data == kubelet_v3.encode(policy, machine_state, entries, pod_entries)
    loaded = kubelet.load(data)
    assert loaded.format == "v3"
    assert (loaded.policy_name, loaded.machine_state) == (policy, machine_state)
    assert loaded.assignments == entries
    assert loaded.pod_entries == pod_entries
    # The legacy part is the V1 file of the same state (what a rolled-back kubelet reads).
    v1 = json.loads(kubeletwrite.encode_v1(policy, machine_state, entries))
    assert {k: v for k, v in json.loads(data).items() if k not in ("data", "dataChecksum")} == v1


GI = 2**30
MS = {0: NUMANodeState(1, {"memory": MemoryTable(8 * GI, GI, 7 * GI, 2 * GI, 5 * GI)}, [0])}
POD_BLOCKS = (Block((0,), "memory", 2 * GI),)
ENTRIES = {"p1": {"app": (Block((0,), "memory", GI),), "shared": (Block((0,), "memory", GI),)}}


@pytest.mark.parametrize("written", ["v2", "v3"])
def test_a_kubelet_file_with_pod_entries_is_honoured_and_rewritten_as_v3(
    tmp_path: Path, written: str
) -> None:
    encode = kubelet_v3.encode_v2 if written == "v2" else kubelet_v3.encode
    (tmp_path / STATE_FILE).write_bytes(encode("Static", MS, ENTRIES, {"p1": POD_BLOCKS}))
    store = KubeletStateStore(tmp_path, pod_level=True)
    snapshot = store.restore("Static")
    assert snapshot is not None
    assert dict(snapshot.pod_entries) == {"p1": POD_BLOCKS}
    assert {p: dict(c) for p, c in snapshot.assignments.items()} == ENTRIES
    store.save(
        Snapshot(
            "Static", snapshot.machine_state, snapshot.assignments, {}, {}, snapshot.pod_entries
        )
    )
    assert (tmp_path / STATE_FILE).read_bytes() == kubelet_v3.encode(
        "Static", MS, ENTRIES, {"p1": POD_BLOCKS}
    )


@pytest.mark.parametrize("written", ["v2", "v3"])
def test_with_the_gate_off_pod_entries_refuse_the_start_with_the_fix(
    tmp_path: Path, written: str
) -> None:
    encode = kubelet_v3.encode_v2 if written == "v2" else kubelet_v3.encode
    before = encode("Static", MS, ENTRIES, {"p1": POD_BLOCKS})
    (tmp_path / STATE_FILE).write_bytes(before)
    with pytest.raises(CheckpointError) as info:
        KubeletStateStore(tmp_path).restore("Static")
    text = str(info.value)
    assert "pod-level memory assignments" in text and "'p1'" in text
    assert "--feature-gates PodLevelResources=true,PodLevelResourceManagers=true" in text
    assert f"remove {tmp_path / STATE_FILE}" in text
    assert (tmp_path / STATE_FILE).read_bytes() == before  # nothing rewritten


def test_without_pod_entries_the_gate_off_writes_v1_and_on_writes_v3(tmp_path: Path) -> None:
    for pod_level, expected in [
        (False, kubeletwrite.encode_v1("Static", MS, ENTRIES)),
        (True, kubelet_v3.encode("Static", MS, ENTRIES, {})),
    ]:
        (tmp_path / str(pod_level)).mkdir()
        store = KubeletStateStore(tmp_path / str(pod_level), pod_level=pod_level)
        store.restore("Static")
        store.save(Snapshot("Static", MS, ENTRIES))
        assert (tmp_path / str(pod_level) / STATE_FILE).read_bytes() == expected


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["assign", "unassign", "pool", "empty-pool", "unpool"]),
            st.text(alphabet='ab-Zé"\\<', min_size=1, max_size=3),
            st.integers(min_value=1, max_value=3),
        ),
        max_size=40,
    )
)
@settings(max_examples=examples(50), deadline=None)
def test_the_incremental_v3_encoder_writes_the_kubelets_bytes(
    steps: list[tuple[str, str, int]],
) -> None:
    """V3Encoder keeps the texts of the pods and of the pod-level entries it saw; after any
    sequence of adds, changes and removals of both, its bytes are the kubelet's."""
    encoder = kubeletwrite.V3Encoder()
    machine = {0: NUMANodeState(0, {"memory": MemoryTable(8, 1, 7, 0, 7)}, [0])}
    entries: dict[str, dict[str, tuple[Block, ...]]] = {}
    pod_entries: dict[str, tuple[Block, ...]] = {}
    for op, pod, n in steps:
        if op == "assign":
            entries = {**entries, pod: {f"c{i}": (Block((0,), "memory", n),) for i in range(n)}}
        elif op == "unassign":
            entries = {p: c for p, c in entries.items() if p != pod}
        elif op == "pool":
            pod_entries = {**pod_entries, pod: (Block((0,), "memory", n),) * n}
        elif op == "empty-pool":
            pod_entries = {**pod_entries, pod: ()}
        else:
            pod_entries = {p: b for p, b in pod_entries.items() if p != pod}
        assert encoder.encode("Static", machine, entries, pod_entries) == kubelet_v3.encode(
            "Static", machine, entries, pod_entries
        )
