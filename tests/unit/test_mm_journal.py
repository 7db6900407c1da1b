"""The memory manager's commit journal (``--state-commit=journal``): its format, what a restart
and the offline tools read, compaction, and switching modes (the fault matrix and the
power-loss simulation are in test_mm_journal_faults.py and test_power_loss.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness import shipped
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.checkpoint import kubelet
from numamem.checkpoint.mmcurrent import current_source
from numamem.checkpoint.mmjournal import HEADER, JOURNAL_FILE, read_journal, record
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
from numamem.checkpoint.records import frame
from numamem.cli.state_check import check_files
from numamem.errors import CheckpointError
from numamem.testing.server import serve_in_process
from tests.deploy_manifests import cli_args, daemonset_docs, numamem_container
from tests.unit.test_fault_matrix import pod

WHERE = Path("/x/numamem_state_journal")


@pytest.mark.parametrize(
    ("data", "state", "records", "torn"),
    [
        (HEADER, None, 0, 0),
        (HEADER + record(b"s1", b"m1") + record(b"s2", b"m2"), b"s2", 2, 0),
        (
            HEADER + record(b"s1", b"m1") + record(b"s2", b"m2")[:-3],
            b"s1",
            1,
            len(record(b"s2", b"m2")) - 3,
        ),
        (b"", None, 0, 0),  # an empty file: no records (the next change settles)
    ],
    ids=["header only", "last record wins", "torn last record dropped", "empty"],
)
def test_what_a_journal_reads_to(data: bytes, state: bytes, records: int, torn: int) -> None:
    found = read_journal(data, WHERE)
    assert (found.state, found.records, found.torn) == (state, records, torn)
    if state is not None:
        assert found.containers == b"m" + state[1:]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HEADER + record(b"s1", b"m1")[:-3] + b"xyz" + record(b"s2", b"m2"), "damaged and more"),
        (record(b"s1", b"m1"), "does not start with its header"),
        (HEADER + frame(b"nonsense"), "has no sizes"),
        (HEADER + frame(b"1 1\nabc"), "has wrong sizes"),
    ],
    ids=["damage before a good record", "no header", "no sizes", "wrong sizes"],
)
def test_damage_to_acknowledged_records_is_an_error(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        read_journal(data, WHERE)


def admit(server: object, uid: str) -> None:
    assert server.client.admit(pod(uid)).admitted  # type: ignore[attr-defined]


def held(state_dir: Path) -> set[str]:
    """The pods a restart (and the offline tools) read from ``state_dir``."""
    state = current_source(state_dir).state
    assert state is not None
    return set(kubelet.load(state).assignments)


def test_journal_mode_appends_and_a_graceful_stop_folds(tmp_path: Path) -> None:
    with serve_in_process(root=tmp_path, state_commit="journal") as server:
        state_dir = Path(server.config.state_dir)
        admit(server, "a")
        admit(server, "b")
        found = read_journal((state_dir / JOURNAL_FILE).read_bytes(), state_dir / JOURNAL_FILE)
        assert found.records >= 2 and found.state is not None
        assert set(kubelet.load(found.state).assignments) == {"a", "b"}
        # The kubelet's file lags behind the journal (the deliberate difference) ...
        on_disk = (
            (state_dir / STATE_FILE).read_bytes() if (state_dir / STATE_FILE).exists() else b""
        )
        assert not on_disk or set(kubelet.load(on_disk).assignments) < {"a", "b"}
        assert held(state_dir) == {"a", "b"}  # ... but every reader reads the journal first
        report = check_files(state_dir)
        assert isinstance(report, dict) and not report["problems"], report
        assert report["pods"] == 2 and report["journal"]["records"] == found.records
    # ... and a graceful stop leaves memory_manager_state current and the journal empty.
    assert set(kubelet.load((state_dir / STATE_FILE).read_bytes()).assignments) == {"a", "b"}
    assert (state_dir / JOURNAL_FILE).read_bytes() == HEADER
    assert json.loads((state_dir / CONTAINERS_FILE).read_bytes())["containers"] == {}


def test_the_journal_is_compacted_and_stays_bounded(tmp_path: Path) -> None:
    with serve_in_process(root=tmp_path, state_commit="journal") as server:
        store = server.component(MemoryManagerComponent).store
        store.journal.compact_bytes = 4096
        state_dir = Path(server.config.state_dir)
        sizes = []
        for i in range(40):
            admit(server, f"p{i}")
            server.client.release_pod(f"p{i}")
            sizes.append((state_dir / JOURNAL_FILE).stat().st_size)
        assert store.journal.compactions >= 5
        # Never more than the bound plus the record that crossed it.
        assert max(sizes) <= 4096 + store.journal.last_record
        # Right after a compaction the journal is its header and the files hold the state.
        store.compact_journal()
        assert (state_dir / JOURNAL_FILE).read_bytes() == HEADER
        assert kubelet.load((state_dir / STATE_FILE).read_bytes()).assignments == {}
        admit(server, "last")
        store.compact_journal()
        on_disk = kubelet.load((state_dir / STATE_FILE).read_bytes())
        assert set(on_disk.assignments) == {"last"} == held(state_dir)


def test_switching_modes_keeps_every_change(tmp_path: Path) -> None:
    """journal -> replace (the start folds the journal and removes it, so the replace mode's
    files are not overridden by old records at the next start) -> journal again."""
    root = tmp_path
    with serve_in_process(root=root, state_commit="journal") as server:
        state_dir = Path(server.config.state_dir)
        admit(server, "a")
        store = server.component(MemoryManagerComponent).store
        store.journal_mode = False  # no fold at this stop: as after a crash
        store.journal.close()
    assert read_journal((state_dir / JOURNAL_FILE).read_bytes(), state_dir).records >= 1
    stale = (state_dir / STATE_FILE).read_bytes() if (state_dir / STATE_FILE).exists() else b""
    assert not stale or not kubelet.load(stale).assignments  # "a" is only in the journal
    with serve_in_process(root=root, state_commit="replace") as server:
        assert not (state_dir / JOURNAL_FILE).exists()  # folded and removed at start
        assert held(state_dir) == {"a"}
        server.client.release_pod("a")
        admit(server, "b")
        assert held(state_dir) == {"b"}
    with serve_in_process(root=root, state_commit="journal") as server:
        assert held(state_dir) == {"b"}
        admit(server, "c")
        assert held(state_dir) == {"b", "c"}


def test_the_daemonset_ships_the_flags_the_nri_bench_measures(tmp_path: Path) -> None:
    """bench/nri.py runs the daemon with the DaemonSet's journal commit and podresources
    names, so its figures are those of what ships."""
    args = cli_args(numamem_container(daemonset_docs()["DaemonSet"])["args"])
    assert args.flag_state_commit == "journal"
    assert args.flag_podresources_socket is not None
    flags = {a.split("=", 1)[0] for a in shipped(tmp_path)}
    assert flags == {"--state-commit", "--podresources-socket"}
