"""Journal mode (``--state-commit=journal``): what the second hostile review of it found,
kept as regression tests (each failed on 84475ad): an older map's pod names kept at a
graceful stop, ``state verify`` showing the journal and naming it, and a damaged journal's
refusal naming every file that holds the state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numamem.checkpoint.containerfile import encode_containers, read_container_file
from numamem.checkpoint.mmjournal import HEADER, JOURNAL_FILE, read_journal, record
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE, KubeletStateStore
from numamem.checkpoint.namesfile import NAMES_FILE
from numamem.cli.main import main
from numamem.errors import CheckpointError
from tests.unit.test_cli_state import machine_flags, written_state
from tests.unit.test_namesfile import manager, named


def test_a_graceful_stop_in_journal_mode_keeps_an_older_maps_pod_names(tmp_path: Path) -> None:
    """An older numamem kept the pod names in the container map; the first save moves them
    to the names file before anything rewrites the map (_move_legacy_names). A daemon
    started in journal mode (no journal yet: needs_settle) and stopped gracefully before any
    change folds at close(): _settle rewrites the map from memory without names, and never
    moves them. The next start has lost the names of pods that still hold memory."""
    m = manager(tmp_path)
    for uid in ("u1", "u2"):
        assert m.admit(named(uid)).result.admitted
    m.store.close()
    (tmp_path / NAMES_FILE).unlink()  # as an older numamem left it: names in the map
    legacy = {"u1": ("shop", "web-u1"), "u2": ("shop", "web-u2")}
    (tmp_path / CONTAINERS_FILE).write_bytes(encode_containers({}, legacy))

    upgraded = manager(tmp_path, journal=True)
    assert dict(upgraded.pod_names()) == legacy
    upgraded.store.close()  # the graceful stop, no change made

    on_disk = read_container_file((tmp_path / CONTAINERS_FILE).read_bytes()).names
    assert dict(manager(tmp_path, journal=True).pod_names()) == legacy, (
        f"pod names lost at a graceful stop; map now names {on_disk}, names file "
        f"exists={(tmp_path / NAMES_FILE).exists()}"
    )


def test_state_verify_text_tells_the_journal_from_memory_manager_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/state-files.md and the stop's error tell the operator, before handing the
    kubelet's file to a kubelet, to "check that `numamem state verify` shows no journal
    records". The text output never mentions the journal (report["journal"] is JSON only),
    and it attributes the journal's content to memory_manager_state: here that file does not
    even exist, yet verify prints "memory_manager_state: V1 checkpoint ... 1 pod" and OK."""
    state = tmp_path / "state"
    written_state(state, journal=True)  # a crash (no graceful stop): the pod is only in the journal
    assert read_journal((state / JOURNAL_FILE).read_bytes(), state).records >= 1
    assert main(["state", "verify", "--state-dir", str(state), *machine_flags(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert not (state / STATE_FILE).exists()
    # what the operator is told to look for: the journal's records, and no claim that a
    # missing memory_manager_state holds the pod
    assert re.search(rf"{JOURNAL_FILE}: .*record", out), out
    assert f"{state / STATE_FILE}: V1 checkpoint" not in out, out


def test_state_verify_names_the_journal_when_its_record_does_not_decode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon's refusal names the journal (1c8b5c7); state verify blames
    memory_manager_state, a file that is not there, for the journal record's state."""
    state = tmp_path / "state"
    state.mkdir()
    (state / JOURNAL_FILE).write_bytes(HEADER + record(b"not json", b""))
    assert main(["state", "verify", "--state-dir", str(state), *machine_flags(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{state / JOURNAL_FILE}" in out and f"{state / STATE_FILE}:" not in out, out


def test_a_damaged_journal_refusal_names_every_file_holding_the_state(tmp_path: Path) -> None:
    """1c8b5c7 made a refusal of the journal record's state name the journal and
    memory_manager_state ("delete ... files"). A damaged journal is refused naming the
    journal alone: deleting what the refusal names (the kubelet's contract: start from no
    checkpoint) leaves the older memory_manager_state, and the next start quietly reads a
    state older than the acknowledged changes, with assignments of pods drained since."""
    m = manager(tmp_path, journal=True)
    assert m.admit(named("u1")).result.admitted
    m.store.close()  # graceful: memory_manager_state holds u1
    m = manager(tmp_path, journal=True)
    assert m.admit(named("u2")).result.admitted
    assert m.admit(named("u3")).result.admitted  # a crash: u2, u3 only in the journal
    data = bytearray((tmp_path / JOURNAL_FILE).read_bytes())
    data[len(HEADER) + 40] ^= 0xFF  # damage the first record; a good one follows
    (tmp_path / JOURNAL_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as refused:
        KubeletStateStore(tmp_path, journal=True).restore("Static")
    text = str(refused.value)
    named_files = re.findall(r'"([^"]+)"', text.split("delete the memory manager checkpoint")[1])
    for path in named_files:
        Path(path).unlink(missing_ok=True)
    after = KubeletStateStore(tmp_path, journal=True).restore("Static")
    assert after is None, (
        f"deleted {[Path(p).name for p in named_files]} as told; the next start reads "
        f"pods {sorted(after.assignments)} from {STATE_FILE}"
    )
