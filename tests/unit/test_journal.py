"""The metacache snapshot + journal (numamem.metacache.journal): what a commit writes, restore,
torn tails, damage in every byte, disk faults on append, fsync and compaction, export."""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from numamem.errors import CheckpointError, DurabilityUnknownError, NotFoundError, PersistenceError
from numamem.metacache import journal
from numamem.metacache.cache import MetaCache, State
from numamem.metacache.journal import JOURNAL_FILE, header, restore
from numamem.metacache.journal_store import JournalPersister
from numamem.metacache.persistence import STATE_FILE, decode_snapshot, encode
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo
from tests.properties import examples

BIG = 10**12  # a compaction threshold never reached


def info(pod: str, name: str, cpu: float) -> ContainerInfo:
    return ContainerInfo(pod_uid=pod, container_name=name, cpu_request=float(cpu))


def open_cache(directory: Path, **kwargs: int) -> tuple[MetaCache, JournalPersister]:
    """A cache on a persister as the daemon starts one (load, then restored), compacting in
    the committing thread (``background=False``) so tests are deterministic."""
    persister = JournalPersister(directory, background=False, **kwargs)  # type: ignore[arg-type]
    state = persister.load()
    persister.restored()
    return MetaCache(persister, initial=state or State()), persister


def canon(state: State) -> bytes:
    return encode(state)


def on_disk(directory: Path) -> State:
    restored = journal.read(directory)
    assert restored is not None
    return restored.state


def files(directory: Path) -> tuple[bytes, bytes]:
    return (directory / STATE_FILE).read_bytes(), (directory / JOURNAL_FILE).read_bytes()


def fill(cache: MetaCache, pods: int, containers: int = 1) -> None:
    for p in range(pods):
        for c in range(containers):
            cache.set_container_info(f"pod{p}", f"c{c}", info(f"pod{p}", f"c{c}", p + c))


# --- what a commit writes ----------------------------------------------------------------


def test_a_commit_appends_one_record_of_the_change_whatever_the_cache_holds(
    tmp_path: Path,
) -> None:
    sizes = []
    for pods in (10, 2000):
        directory = tmp_path / str(pods)
        directory.mkdir()
        five = {
            f"pod{p}": {f"c{c}": info(f"pod{p}", f"c{c}", c) for c in range(5)} for p in range(pods)
        }
        (directory / STATE_FILE).write_bytes(encode(State(five)))
        cache, _persister = open_cache(directory, min_compact_bytes=BIG)
        snapshot, before = files(directory)
        cache.set_container_info("pod3", "c0", info("pod3", "c0", 42))
        after_snapshot, after = files(directory)
        assert after_snapshot == snapshot  # the snapshot is not rewritten
        assert after.startswith(before)
        record = after[len(before) :]
        assert record.count(b"\n") == 1
        payload = json.loads(record[18:])
        # Only the container that changed, not its pod's other four.
        assert payload == {"pods": {"pod3": {"c0": json.loads(info("pod3", "c0", 42).fragment())}},
                           "seq": 1}  # fmt: skip
        sizes.append(len(record))
        assert canon(on_disk(directory)) == canon(cache.state())
    assert sizes[0] == sizes[1]


def test_a_batch_and_a_range_walk_are_one_record_each(tmp_path: Path) -> None:
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 4, 2)
    before = files(tmp_path)[1].count(b"\n")
    cache.update_containers(
        [(f"pod{p}", "c1", lambda i: setattr(i, "cpu_limit", 7.0)) for p in range(4)]
    )
    cache.range_and_delete_container(lambda i: i.cpu_request < 2, 0)
    cache.range_and_update_container(lambda p, c, i: setattr(i, "memory_limit", 1.0) or True)
    assert files(tmp_path)[1].count(b"\n") == before + 3
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_an_unchanged_write_appends_nothing(tmp_path: Path) -> None:
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    cache.set_pool_info("share", PoolInfo(pool_name="share"))
    before = files(tmp_path)
    cache.set_pool_info("share", PoolInfo(pool_name="share"))
    assert files(tmp_path) == before


# --- restore ---------------------------------------------------------------------------


def every_kind_of_write(cache: MetaCache) -> None:
    fill(cache, 3, 2)
    cache.delete_container("pod0", "c0")
    cache.remove_pod("pod1")
    cache.set_pool_info("share", PoolInfo(pool_name="share", region_names={"r1"}))
    cache.set_pool_info("reclaim", PoolInfo(pool_name="reclaim"))
    cache.delete_pool("reclaim")
    cache.set_region_info("r1", RegionInfo(region_name="r1", owner_pool_name="share"))
    cache.set_region_entries({"r2": RegionInfo(region_name="r2", headroom=3.5)})
    cache.add_container("pod9", "main", info("pod9", "main", 0.5))


def test_a_restart_without_shutdown_replays_the_journal(tmp_path: Path) -> None:
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    every_kind_of_write(cache)
    # No close(): as after SIGKILL. The snapshot is still the empty one written at start.
    assert decode_snapshot(files(tmp_path)[0])[0].pods == {}
    again, _persister = open_cache(tmp_path, min_compact_bytes=BIG)
    assert canon(again.state()) == canon(cache.state())
    again.set_container_info("pod2", "c0", info("pod2", "c0", 99))
    assert canon(on_disk(tmp_path)) == canon(again.state())


def test_shutdown_leaves_a_complete_snapshot_and_an_empty_journal(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    every_kind_of_write(cache)
    persister.close()
    persister.close()  # idempotent
    snapshot, log = files(tmp_path)
    state, generation = decode_snapshot(snapshot)
    assert canon(state) == canon(cache.state())
    assert log == header(generation)
    assert b'"generation":' in snapshot and b'"pod_entries":' in snapshot


def test_compaction_writes_a_snapshot_when_the_journal_outgrows_it(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=1)
    fill(cache, 30)
    assert persister.compactions > 0
    snapshot, log = files(tmp_path)
    assert len(log) <= len(snapshot) + 600  # at most about one record past the threshold
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_compaction_by_record_count(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG, max_records=5)
    fill(cache, 12)
    assert persister.compactions == 2
    assert files(tmp_path)[1].count(b"\n") == 1 + 2  # header and the records since
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_writes_during_a_compaction_are_kept(tmp_path: Path) -> None:
    """The snapshot is written outside the journal lock: a commit can land in between and must
    survive the journal swap."""
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 5)
    wrote = []

    def write_during_rename(stage: str, target: Path) -> None:
        if stage == "rename" and target.name == STATE_FILE and not wrote:
            wrote.append(True)
            cache.set_container_info("late", "c", info("late", "c", 1))

    persister.faults = write_during_rename
    persister.compact()
    assert wrote
    snapshot, log = files(tmp_path)
    assert b'"late"' not in snapshot and b'"late"' in log
    assert log.count(b"\n") == 2  # the new header and the late record
    assert canon(on_disk(tmp_path)) == canon(cache.state())
    assert "late" in cache.state().pods


def test_a_one_file_checkpoint_without_journal_is_read_as_a_snapshot(tmp_path: Path) -> None:
    """Files written by numamem before the journal (or by tools): generation 0, no journal."""
    state = State({"p": {"c": info("p", "c", 1)}})
    (tmp_path / STATE_FILE).write_bytes(encode(state))
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    assert canon(cache.state()) == canon(state)
    assert files(tmp_path)[1] == header(0)
    cache.set_container_info("p", "d", info("p", "d", 2))
    assert set(on_disk(tmp_path).pods["p"]) == {"c", "d"}


# --- torn tails and damage ---------------------------------------------------------------


def journal_with_last_record(tmp_path: Path) -> tuple[bytes, bytes, bytes, bytes]:
    """(snapshot, journal without its last record, full journal, the state before the last)."""
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3, 2)
    before_state = canon(cache.state())
    _, before = files(tmp_path)
    cache.set_region_info("r", RegionInfo(region_name="r", headroom=1.5))
    snapshot, full = files(tmp_path)
    return snapshot, before, full, before_state


def test_a_torn_last_record_of_every_length_is_dropped(tmp_path: Path) -> None:
    snapshot, before, full, before_state = journal_with_last_record(tmp_path)
    for cut in range(len(before) + 1, len(full)):
        restored = restore(snapshot, full[:cut], tmp_path / JOURNAL_FILE)
        assert restored is not None
        assert canon(restored.state) == before_state, cut
        assert restored.torn == cut - len(before) and restored.journal_end == len(before)
    # At start the torn bytes are cut off (and logged); the next commit follows the good ones.
    (tmp_path / JOURNAL_FILE).write_bytes(full[: len(before) + 7])
    with capture_logs() as logs:
        cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    assert files(tmp_path)[1] == before
    assert [e["bytes"] for e in logs if "torn" in e["event"]] == [7]
    cache.set_container_info("pod0", "c0", info("pod0", "c0", 5))
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_flipped_byte_anywhere_in_the_journal_is_refused_or_drops_only_the_last_record(
    tmp_path: Path,
) -> None:
    snapshot, before, full, before_state = journal_with_last_record(tmp_path)
    complete = canon(restore(snapshot, full, tmp_path).state)  # type: ignore[union-attr]
    outcomes = {"refused": 0, "dropped last": 0}
    for position in range(len(full)):
        for mask in (0x01, 0x20, 0xFF):
            damaged = bytearray(full)
            damaged[position] ^= mask
            try:
                restored = restore(snapshot, bytes(damaged), tmp_path / JOURNAL_FILE)
            except CheckpointError:
                outcomes["refused"] += 1
                continue
            # Only damage inside the last record can pass, as a torn append (never acknowledged
            # as far as the journal can tell): the record is dropped, nothing else changes.
            assert position >= len(before), (position, mask)
            assert restored is not None and restored.torn > 0
            assert canon(restored.state) == before_state != complete
            outcomes["dropped last"] += 1
    assert outcomes["refused"] > 0 and outcomes["dropped last"] > 0


def test_a_flipped_byte_anywhere_in_the_snapshot_is_refused(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    every_kind_of_write(cache)
    persister.close()
    snapshot, log = files(tmp_path)
    for position in range(len(snapshot)):
        damaged = bytearray(snapshot)
        damaged[position] ^= 0x01
        with pytest.raises(CheckpointError):
            restore(bytes(damaged), log, tmp_path)


def test_a_missing_record_in_the_middle_is_refused(tmp_path: Path) -> None:
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 4)
    snapshot, log = files(tmp_path)
    lines = log.split(b"\n")
    with pytest.raises(CheckpointError, match="where 2 was due"):
        restore(snapshot, b"\n".join(lines[:2] + lines[3:]), tmp_path)


def test_a_journal_that_does_not_belong_to_the_snapshot_refuses_the_start(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3)
    persister.close()
    (tmp_path / JOURNAL_FILE).write_bytes(header(10**6))  # from a later snapshot than this one
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CheckpointError) as refused:
        JournalPersister(tmp_path).load()
    message = str(refused.value)
    assert str(tmp_path / STATE_FILE) in message and "do not belong together" in message
    assert "--metacache-discard-corrupt-state" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # a refused start writes nothing
    with capture_logs() as logs:
        fresh = JournalPersister(tmp_path, background=False)
        assert fresh.load(discard_corrupt=True) is None
        fresh.restored()
    assert len([e for e in logs if "moved aside" in e["event"]]) == 2
    aside = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    assert [n.split(".corrupt-")[0] for n in aside] == [STATE_FILE, JOURNAL_FILE]
    assert on_disk(tmp_path).pods == {}


def test_a_snapshot_newer_than_its_journal_adds_nothing_from_it(tmp_path: Path) -> None:
    """A crash between a rewrite's snapshot and its journal reset leaves an older journal: its
    records are all in the snapshot; the start replaces it with a fresh one."""
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3)
    _, old_journal = files(tmp_path)
    persister.close()
    (tmp_path / JOURNAL_FILE).write_bytes(old_journal)
    again, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    assert canon(again.state()) == canon(cache.state())
    generation = decode_snapshot(files(tmp_path)[0])[1]
    assert files(tmp_path)[1] == header(generation)


# --- disk faults ------------------------------------------------------------------------


def failing(stage: str, error: int, name: str = JOURNAL_FILE) -> Callable[[str, Path], None]:
    def hook(at: str, target: Path) -> None:
        if at == stage and target.name == name:
            raise OSError(error, "injected")

    return hook


@pytest.mark.parametrize("stage", ["append", "append-fsync"])
@pytest.mark.parametrize(("error", "name"), [(errno.ENOSPC, "ENOSPC"), (errno.EIO, "EIO")])
def test_a_failed_append_changes_nothing_and_the_next_one_works(
    tmp_path: Path, stage: str, error: int, name: str
) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 2)
    before = files(tmp_path)
    persister.faults = failing(stage, error)
    with pytest.raises(PersistenceError) as failed:
        cache.set_container_info("pod0", "c0", info("pod0", "c0", 9))
    assert name in str(failed.value) and "not applied" in str(failed.value)
    assert str(tmp_path / JOURNAL_FILE) in str(failed.value)
    assert files(tmp_path) == before  # an fsync failure's bytes were cut off again
    assert cache.get_container_info("pod0", "c0").cpu_request == 0  # type: ignore[union-attr]
    assert canon(on_disk(tmp_path)) == canon(cache.state())
    persister.faults = None
    cache.set_container_info("pod0", "c0", info("pod0", "c0", 10))
    assert canon(on_disk(tmp_path)) == canon(cache.state())
    assert on_disk(tmp_path).pods["pod0"]["c0"].cpu_request == 10


def test_an_append_that_cannot_be_undone_is_an_unknown_outcome_then_a_full_rewrite(
    tmp_path: Path,
) -> None:
    """The append's fsync fails and cutting the record off fails too: the record is in the
    file, so a restart reads the change. The writer learns an unknown outcome (not "not
    applied"), memory equals what a restart reads, health hears of it until the next write,
    which rewrites both files."""
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    reports: list[str | None] = []
    persister.durability_observers.append(reports.append)
    fill(cache, 2)

    def fsync_and_truncate_fail(at: str, target: Path) -> None:
        if at in ("append-fsync", "truncate") and target.name == JOURNAL_FILE:
            raise OSError(errno.EIO, "injected")

    persister.faults = fsync_and_truncate_fail
    with pytest.raises(DurabilityUnknownError, match="EIO") as raised:
        cache.set_container_info("pod0", "c0", info("pod0", "c0", 9))
    assert raised.value.applied
    assert cache.get_container_info("pod0", "c0").cpu_request == 9  # type: ignore[union-attr]
    assert canon(on_disk(tmp_path)) == canon(cache.state())  # what a restart reads
    assert reports[-1] is not None and "unknown" in reports[-1]
    persister.faults = None
    cache.set_container_info("pod1", "c0", info("pod1", "c0", 11))
    assert reports[-1] is None  # durable again: SERVING
    snapshot, log = files(tmp_path)
    state, generation = decode_snapshot(snapshot)
    assert canon(state) == canon(cache.state()) and log == header(generation)
    assert state.pods["pod0"]["c0"].cpu_request == 9
    cache.set_container_info("pod1", "c0", info("pod1", "c0", 12))  # back to appending
    assert files(tmp_path)[0] == snapshot
    assert canon(on_disk(tmp_path)) == canon(cache.state())


@pytest.mark.parametrize("stage", ["write", "fsync", "rename"])
@pytest.mark.parametrize("file", [STATE_FILE, JOURNAL_FILE])
def test_a_failed_compaction_loses_nothing(tmp_path: Path, stage: str, file: str) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 4)
    persister.faults = failing(stage, errno.ENOSPC, file)
    with pytest.raises(PersistenceError, match="ENOSPC"):
        persister.compact()
    assert canon(on_disk(tmp_path)) == canon(cache.state())
    cache.set_container_info("pod9", "c", info("pod9", "c", 1))  # appends go on
    assert canon(on_disk(tmp_path)) == canon(cache.state())
    persister.faults = None
    persister.compact()
    assert files(tmp_path)[1] == header(decode_snapshot(files(tmp_path)[0])[1])
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_compaction_whose_directory_sync_fails_reports_until_a_commit_syncs_it(
    tmp_path: Path,
) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    reports: list[str | None] = []
    persister.durability_observers.append(reports.append)
    fill(cache, 2)
    persister.faults = failing("dirsync", errno.EIO, JOURNAL_FILE)
    persister.compact()
    assert reports[-1] is not None and "power loss" in reports[-1]
    persister.faults = None
    cache.set_container_info("pod0", "c0", info("pod0", "c0", 3))
    assert reports[-1] is None
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_snapshot_whose_directory_sync_fails_keeps_the_old_journal(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3)
    _, log = files(tmp_path)
    persister.faults = failing("dirsync", errno.EIO, STATE_FILE)
    persister.compact()
    assert files(tmp_path)[1] == log  # either snapshot with this journal is the whole state
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_rewrite_whose_snapshot_durability_is_unknown_says_so(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 1)
    persister._poisoned = True  # as after an append that could not be undone
    persister.faults = failing("dirsync", errno.EIO, STATE_FILE)
    with pytest.raises(DurabilityUnknownError):
        cache.set_container_info("pod0", "c0", info("pod0", "c0", 4))
    assert cache.get_container_info("pod0", "c0").cpu_request == 4  # type: ignore[union-attr]
    assert canon(on_disk(tmp_path)) == canon(cache.state())


# --- restore equivalence -----------------------------------------------------------------

names = st.sampled_from(["a", "b", "c"])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), names, names, st.integers(0, 9)),
        st.tuples(st.just("delete"), names, names),
        st.tuples(st.just("remove_pod"), names),
        st.tuples(st.just("batch"), st.lists(st.tuples(names, names, st.integers(0, 9)))),
        st.tuples(st.just("range_delete"), st.integers(0, 9)),
        st.tuples(st.just("pool"), names, st.sampled_from(["", "r1", "r2"])),
        st.tuples(st.just("delete_pool"), names),
        st.tuples(st.just("region"), names, st.integers(0, 9)),
        st.tuples(st.just("regions"), st.lists(names, unique=True)),
    ),
    max_size=40,
)


def apply(cache: MetaCache, op: tuple) -> None:  # type: ignore[type-arg]
    kind = op[0]
    if kind == "set":
        cache.set_container_info(op[1], op[2], info(op[1], op[2], op[3]))
    elif kind == "delete":
        cache.delete_container(op[1], op[2])
    elif kind == "remove_pod":
        cache.remove_pod(op[1])
    elif kind == "batch":
        with contextlib.suppress(NotFoundError):
            cache.update_containers(
                [(p, c, lambda i, v=v: setattr(i, "cpu_limit", float(v))) for p, c, v in op[1]]
            )
    elif kind == "range_delete":
        cache.range_and_delete_container(lambda i: i.cpu_request < op[1] / 3, 0)
    elif kind == "pool":
        regions = {op[2]} if op[2] else set()
        cache.set_pool_info(op[1], PoolInfo(pool_name=op[1], region_names=regions))
    elif kind == "delete_pool":
        cache.delete_pool(op[1])
    elif kind == "region":
        cache.set_region_info(op[1], RegionInfo(region_name=op[1], headroom=float(op[2])))
    else:
        cache.set_region_entries({n: RegionInfo(region_name=n) for n in op[1]})


@settings(max_examples=examples(30), deadline=None)
@given(operations, st.integers(2, 30), st.data())
def test_restore_at_any_cut_point_equals_the_state_acknowledged_there(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list,
    max_records: int,
    data: st.DataObject,  # type: ignore[type-arg]
) -> None:
    """Differential: the in-memory cache is the reference. Each cut of the journal is a crash
    at that byte; the restored state is the state after the last whole record before it."""
    directory = tmp_path_factory.mktemp("journal")
    cache, persister = open_cache(directory, min_compact_bytes=BIG, max_records=max_records)
    history = [(len(files(directory)[1]), canon(cache.state()))]
    compactions = persister.compactions
    for op in ops:
        apply(cache, op)
        assert canon(on_disk(directory)) == canon(cache.state())
        size = len(files(directory)[1])
        if persister.compactions != compactions:
            compactions = persister.compactions
            history = []
        history.append((size, canon(cache.state())))
    snapshot, log = files(directory)
    head = log.index(b"\n") + 1  # the header record
    cuts = [*data.draw(st.lists(st.integers(0, len(log)), max_size=12)), 0, head, len(log)]
    for cut in cuts:
        if 0 < cut < head:
            with pytest.raises(CheckpointError, match="no journal header"):
                restore(snapshot, log[:cut], directory)
            continue
        restored = restore(snapshot, log[:cut], directory)
        assert restored is not None
        # An empty journal (cut 0) leaves the snapshot: the state at the last compaction.
        expected = [state for end, state in history if end <= max(cut, head)][-1]
        assert canon(restored.state) == expected, (cut, history)


# --- crashes (the process dies at a stage: nothing after it runs) ----------------------------


class Crash(BaseException):
    """Not an Exception: nothing in numamem catches it, as nothing survives SIGKILL."""


def crash_at(stage: str, name: str) -> Callable[[str, Path], None]:
    def hook(at: str, target: Path) -> None:
        if at == stage and target.name == name:
            raise Crash

    return hook


@pytest.mark.parametrize("stage", ["open", "write", "fsync", "rename", "dirsync"])
@pytest.mark.parametrize("file", [STATE_FILE, JOURNAL_FILE])
def test_a_crash_at_any_stage_of_a_compaction_restores_everything(
    tmp_path: Path, stage: str, file: str
) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    every_kind_of_write(cache)
    persister.faults = crash_at(stage, file)
    with pytest.raises(Crash):
        persister.compact()
    again, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    assert canon(again.state()) == canon(cache.state())
    again.set_container_info("pod2", "c1", info("pod2", "c1", 8))
    assert canon(on_disk(tmp_path)) == canon(again.state())


@pytest.mark.parametrize("stage", ["append", "append-fsync"])
def test_a_crash_during_an_append_shows_at_most_the_change_in_flight(
    tmp_path: Path, stage: str
) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3)
    acknowledged = cache.state()
    persister.faults = crash_at(stage, JOURNAL_FILE)
    with pytest.raises(Crash):
        cache.set_container_info("pod0", "c0", info("pod0", "c0", 7))
    in_flight = State(
        {**acknowledged.pods, "pod0": {"c0": info("pod0", "c0", 7)}},
        acknowledged.pools,
        acknowledged.regions,
    )
    again, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    expected = canon(acknowledged) if stage == "append" else canon(in_flight)
    assert canon(again.state()) == expected


# --- issue 24: faults that lost, resurrected or wedged ------------------------------------


def test_a_journal_that_cannot_be_reopened_after_a_swap_is_never_written_through_another_fd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction swaps in a new journal, and opening it to append fails (EMFILE in a busy
    daemon). Before, the persister kept the closed descriptor's number, the next commit wrote
    its record into whatever file got that number, and was acknowledged: lost on restart."""
    import os

    cache, _ = open_cache(tmp_path, min_compact_bytes=1)  # every commit compacts (inline)
    real_open = os.open
    refused = []

    def open_refusing_the_journal_once(path: object, flags: int, *args: object) -> int:
        if str(path).endswith(JOURNAL_FILE) and flags & os.O_APPEND and not refused:
            refused.append(path)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_refusing_the_journal_once)
    cache.set_container_info("pod0", "c0", info("pod0", "c0", 1))  # its compaction's reopen fails
    assert refused
    other = tmp_path / "unrelated"
    with other.open("wb") as unrelated:  # takes the lowest free descriptor number
        cache.set_container_info("pod1", "c0", info("pod1", "c0", 1))  # acknowledged
        unrelated.flush()
        assert other.read_bytes() == b""
    assert set(on_disk(tmp_path).pods) == {"pod0", "pod1"}
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_failed_reopen_fails_the_commit_not_applied_until_it_opens(tmp_path: Path) -> None:
    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 1)
    persister.faults = failing("reopen", errno.EMFILE)
    persister.compact()  # the journal is swapped, but cannot be opened again
    with pytest.raises(PersistenceError, match=r"EMFILE.*not applied"):
        cache.set_container_info("pod1", "c0", info("pod1", "c0", 1))
    assert "pod1" not in cache.state().pods and "pod1" not in on_disk(tmp_path).pods
    persister.faults = None
    cache.set_container_info("pod1", "c0", info("pod1", "c0", 1))
    assert canon(on_disk(tmp_path)) == canon(cache.state())


class Broken:
    """A persister that fails in a way its contract does not allow (not PersistenceError)."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error
        self.saved: list[State] = []

    def save(self, state: State, pods: object = None) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        self.saved.append(state)


@pytest.mark.parametrize(
    "error", [OSError(errno.EBADF, "Bad file descriptor"), RuntimeError("a defect")]
)
def test_a_persister_error_of_another_kind_never_wedges_the_writers(error: Exception) -> None:
    """Before, only PersistenceError ended a commit round: any other error left every later
    writer waiting for ever."""
    import threading

    persister = Broken(error)
    cache = MetaCache(persister)
    with pytest.raises(DurabilityUnknownError) as raised:
        cache.set_container_info("p", "c", info("p", "c", 1))
    assert not raised.value.applied and "unknown" in str(raised.value)
    assert cache.state().pods == {}  # not applied: memory stays as it was
    done = threading.Event()

    def second_writer() -> None:
        cache.set_container_info("p", "c", info("p", "c", 2))
        done.set()

    threading.Thread(target=second_writer, daemon=True).start()
    assert done.wait(2), "the second writer is still blocked"
    assert cache.get_container_info("p", "c").cpu_request == 2  # type: ignore[union-attr]
    assert persister.saved[-1].pods["p"]["c"].cpu_request == 2


def test_an_interrupted_commit_ends_its_round(tmp_path: Path) -> None:
    """A BaseException (an interrupt, a simulated crash) propagates, but the round ends: the
    other writers are not left waiting for a committer that is gone."""

    class Interrupt(BaseException):
        pass

    persister = Broken(Interrupt())  # type: ignore[arg-type]
    cache = MetaCache(persister)
    with pytest.raises(Interrupt):
        cache.set_container_info("p", "c", info("p", "c", 1))
    cache.set_container_info("p", "c", info("p", "c", 2))  # answers at once
    assert cache.get_container_info("p", "c").cpu_request == 2  # type: ignore[union-attr]


def test_an_unexpected_error_in_the_journal_persister_is_an_unknown_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect outside the file operations (which each say what they did): the outcome is
    unknown, health hears of it, and the next write rewrites everything."""
    from numamem.metacache import journal_store

    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    reports: list[str | None] = []
    persister.durability_observers.append(reports.append)
    fill(cache, 1)

    def defect(*args: object) -> bytes:
        raise RuntimeError("a defect")

    real = journal_store.change_payload
    monkeypatch.setattr(journal_store, "change_payload", defect)
    with pytest.raises(DurabilityUnknownError, match="a defect") as raised:
        cache.set_container_info("pod0", "c0", info("pod0", "c0", 5))
    assert not raised.value.applied
    assert canon(cache.state()) == canon(on_disk(tmp_path))
    assert reports[-1] is not None
    monkeypatch.setattr(journal_store, "change_payload", real)
    cache.set_container_info("pod1", "c0", info("pod1", "c0", 1))
    assert reports[-1] is None
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_a_damaged_journal_refusal_names_the_journal_and_a_damaged_snapshot_the_snapshot(
    tmp_path: Path,
) -> None:
    cache, _ = open_cache(tmp_path, min_compact_bytes=BIG)
    fill(cache, 3)
    snapshot, log = files(tmp_path)
    damaged = bytearray(log)
    damaged[log.index(b"\n") + 30] ^= 0x01  # inside the first change record: more follow it
    (tmp_path / JOURNAL_FILE).write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError) as refused:
        JournalPersister(tmp_path).load()
    assert f"{tmp_path / JOURNAL_FILE}: journal record at byte" in str(refused.value)
    (tmp_path / JOURNAL_FILE).write_bytes(log)
    (tmp_path / STATE_FILE).write_bytes(snapshot.replace(b'"checksum":', b'"checksum":1', 1))
    with pytest.raises(CheckpointError) as refused:
        JournalPersister(tmp_path).load()
    assert f"{tmp_path / STATE_FILE}: " in str(refused.value)


def test_an_interrupt_inside_an_append_never_lets_the_next_append_follow_it(
    tmp_path: Path,
) -> None:
    """A BaseException after the record reached the file: the writer learns nothing (the
    interrupt propagates), the journal is poisoned, and the next commit rewrites both files
    instead of appending after the stray record (which made the next start refuse)."""

    class Interrupt(BaseException):
        pass

    cache, persister = open_cache(tmp_path, min_compact_bytes=BIG)
    reports: list[str | None] = []
    persister.durability_observers.append(reports.append)
    cache.set_container_info("pod0", "c0", info("pod0", "c0", 1))

    def interrupt(at: str, target: Path) -> None:
        if at == "append-fsync":
            raise Interrupt

    persister.faults = interrupt
    with pytest.raises(Interrupt):
        cache.set_container_info("pod1", "c0", info("pod1", "c0", 2))
    assert reports[-1] is not None and "interrupted" in reports[-1]
    persister.faults = None
    cache.set_container_info("pod2", "c0", info("pod2", "c0", 3))
    assert reports[-1] is None
    assert set(cache.state().pods) == {"pod0", "pod2"}
    assert canon(on_disk(tmp_path)) == canon(cache.state())


def test_each_writer_learns_its_own_failed_rounds_outcome() -> None:
    """Two rounds fail one after the other, the first with an unknown outcome and the second
    "not applied": a writer of the first round that looks only after the second failed is
    still told its own round's outcome (before, the second round's text overwrote it)."""
    import threading

    class TwoFailures:
        calls = 0

        def save(self, state: State, pods: object = None) -> None:
            TwoFailures.calls += 1
            if TwoFailures.calls == 1:
                raise DurabilityUnknownError("cut-off not synced", applied=False)
            raise PersistenceError("ENOSPC; the change was not applied")

    cache = MetaCache(TwoFailures())
    real_finish = cache._finish_round
    first_done, second_done = threading.Event(), threading.Event()

    def finish(*args: object, **kwargs: object) -> None:
        real_finish(*args, **kwargs)  # type: ignore[arg-type]
        if not first_done.is_set():
            first_done.set()
            second_done.wait(5)  # the first round's committer is preempted right here
        else:
            second_done.set()

    cache._finish_round = finish  # type: ignore[method-assign]
    told: dict[str, BaseException] = {}

    def write(uid: str) -> None:
        try:
            cache.set_container_info(uid, "c", info(uid, "c", 1))
        except PersistenceError as err:
            told[uid] = err

    first = threading.Thread(target=write, args=("a",))
    first.start()
    assert first_done.wait(5)
    second = threading.Thread(target=write, args=("b",))
    second.start()
    first.join(5)
    second.join(5)
    assert isinstance(told["a"], DurabilityUnknownError) and not told["a"].applied
    assert type(told["b"]) is PersistenceError and "not applied" in str(told["b"])
