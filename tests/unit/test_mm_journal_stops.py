"""Journal mode at the edges of a run: a refused start, what a refusal names, a stop whose
fold fails (found by the hostile review of the journal commit; each failed before its fix)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from numamem.api.app import build_components
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.server import Daemon
from numamem.checkpoint.mmjournal import JOURNAL_FILE as MM_JOURNAL
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.client import error_reason
from numamem.errors import CheckpointError
from numamem.testing.server import serve_in_process
from tests.unit.test_fault_matrix import Cell, injector, pod


def crash_image(live_state: Path, into: Path) -> Path:
    """The state dir as a power cut / SIGKILL leaves it (every acknowledged change fsynced)."""
    shutil.copytree(live_state, into, ignore=shutil.ignore_patterns("*.sock", "*.lock"))
    return into


def uids(state_dir: Path) -> set[str]:
    snap = KubeletStateStore(state_dir, journal=True).restore("Static")
    return set(snap.assignments) if snap is not None else set()


def test_a_refused_start_does_not_erase_the_journal(tmp_path: Path) -> None:
    """Journal mode, crash after acknowledged admissions, then a start that restore refuses
    (policy mismatch: the kubelet's 'drain and delete' refusal). The refused start's shutdown
    calls store.close(), which 'compacts' with _last_state None: it writes an empty container
    map and a fresh journal, erasing every acknowledged record since the last compaction.
    The next start with the right policy reads the older memory_manager_state."""
    (tmp_path / "live").mkdir()
    with serve_in_process(root=tmp_path / "live", state_commit="journal") as server:
        assert server.client.admit(pod("a")).admitted
        assert server.client.admit(pod("b")).admitted
        cfg = server.config
        image = crash_image(Path(cfg.state_dir), tmp_path / "image")
    assert uids(image) == {"a", "b"}
    journal_before = (image / MM_JOURNAL).read_bytes()
    bad = replace(
        cfg, state_dir=str(image), socket=str(tmp_path / "s2.sock"), memory_manager_policy="None"
    )
    with pytest.raises(Exception, match="differs from state checkpoint policy"):
        Daemon(bad, build_components, set_umask=False).start()
    assert uids(image) == {"a", "b"}, "acknowledged admissions lost by a refused start"
    # "a refused start changes nothing on disk" (mmstore.KubeletStateStore docstring)
    assert (image / MM_JOURNAL).read_bytes() == journal_before


def test_a_refusal_names_the_files_that_hold_the_state(tmp_path: Path) -> None:
    """Journal mode, crash (the journal holds the state), restart with another policy: the
    refusal names the journal and the older memory_manager_state it overrides, and deleting
    the files it names (after draining) lets the same start through."""
    (tmp_path / "live").mkdir()
    with serve_in_process(root=tmp_path / "live", state_commit="journal") as server:
        assert server.client.admit(pod("a")).admitted
        image = crash_image(Path(server.config.state_dir), tmp_path / "image")
    with pytest.raises(CheckpointError) as refused:
        KubeletStateStore(image, journal=True).restore("None")
    text = str(refused.value)
    assert 'differs from state checkpoint policy "Static"' in text
    named = [Path(part.split('"')[0]) for part in text.split('files "')[1].split(' and "')]
    assert [p.name for p in named] == [MM_JOURNAL, STATE_FILE], text
    for path in named:
        path.unlink(missing_ok=True)
    assert KubeletStateStore(image, journal=True).restore("None") is None


def test_a_graceful_stop_whose_fold_fails_says_so(tmp_path: Path) -> None:
    """When the fold at a graceful stop fails (one EIO on the state file's rename), the stop
    logs an error naming the stale file and what to do before handing it to a kubelet; the
    journal keeps the pod, so the next start reads it."""
    (tmp_path / "live").mkdir()
    with serve_in_process(root=tmp_path / "live", state_commit="journal") as server:
        assert server.client.admit(pod("a")).admitted
        memory = server.component(MemoryManagerComponent)

        memory.store.faults = injector(Cell(STATE_FILE, "fold", "rename"), "EIO")
        state_dir = Path(server.config.state_dir)
        with capture_logs() as logs:
            server.daemon.shutdown()  # the graceful stop
    [error] = [e for e in logs if e["event"].startswith("memory_manager_state is behind")]
    assert error["log_level"] == "error" and error["state"] == str(state_dir / STATE_FILE)
    assert "numamem state verify" in error["event"]
    assert uids(state_dir) == {"a"}  # the journal still holds it


def test_a_journal_that_cannot_be_compacted_stops_at_its_budget(tmp_path: Path) -> None:
    """Compactions fail (EIO on every rename of the state file): changes go on being
    acknowledged while the journal is under its budget; the change that would pass it
    compacts first and fails, not applied; once the fault goes, the next change compacts and
    the journal is small again. A start never reads more than the budget."""
    (tmp_path / "live").mkdir()
    with serve_in_process(root=tmp_path / "live", state_commit="journal") as server:
        memory = server.component(MemoryManagerComponent)
        journal = memory.store.journal
        journal.compact_bytes, journal.max_bytes = 2048, 64 * 1024

        memory.store.faults = injector(Cell(STATE_FILE, "fold", "rename"), "EIO")
        state_dir = Path(server.config.state_dir)
        acknowledged = 0
        refused: grpc.RpcError | None = None
        for i in range(200):
            try:
                server.client.admit(pod(f"p{i}"))
            except grpc.RpcError as err:
                refused = err
                break
            acknowledged += 1
            assert journal.size <= max(journal.max_bytes, 16 * journal.last_record)
        assert refused is not None and 5 < acknowledged < 200
        assert error_reason(refused) == "CHECKPOINT_WRITE_FAILED"
        assert "not applied" in (refused.details() or "")  # type: ignore[attr-defined]
        assert (state_dir / MM_JOURNAL).stat().st_size <= journal.max_bytes
        assert journal.max_bytes > 16 * journal.last_record  # the byte budget was the bound
        assert uids(state_dir) == {f"p{i}" for i in range(acknowledged)}
        memory.store.faults = None
        assert server.client.admit(pod("after")).admitted
        assert (state_dir / MM_JOURNAL).stat().st_size < 4096
        assert uids(state_dir) == {f"p{i}" for i in range(acknowledged)} | {"after"}
