"""The metacache core: upstream scenarios (tests/data/metacache-cases), edge cases, persistence."""

from __future__ import annotations

import errno
import json
import threading
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

from numamem.cpuset import CPUSet
from numamem.errors import (
    CheckpointError,
    DurabilityUnknownError,
    FailedPreconditionError,
    LimitExceededError,
    NotFoundError,
    PersistenceError,
)
from numamem.metacache.cache import MetaCache, State
from numamem.metacache.persistence import STATE_FILE, CheckpointPersister, decode, encode
from numamem.metacache.types import ContainerInfo, PoolInfo, RegionInfo, RegionStatus
from tests.daemon import data_path

CASES_DIR = data_path("metacache-cases")
OUT_OF_SUBSET = {
    # (numamem implements the 2023 API plus RangePool; the cases' SCHEMA.md marks these as outside it)
    "metacache_test/GetFilteredInferenceResult/test_without_filter": "inference results",
    "metacache_test/GetFilteredInferenceResult/test_with_filter": "inference results",
    "metacache_test/GetFilteredInferenceResult/test_with_invalid_result_type": "inference results",
    "metacache_test/GetInferenceResult/test_get_result_directly": "inference results",
    "metacache_test/SetInferenceResult/get_after_set": "inference results",
    "metacache_test/ResourcePackageConfig_GetSetClone": "resource-package config",
    "metacache_test/ResourcePackageConfig_ConcurrentAccess": "resource-package config",
    "feature_gates/writes_preserve_other_type_entries": "feature gates",
    "feature_gates/refresh_one_type_removes_stale_same_type_only": "feature gates",
    "feature_gates/empty_map_clears_type": "feature gates",
    "util_test/IsQuotaCtrlKnobEnabled": "feature gates",
}


def load_scenarios() -> list[dict[str, Any]]:
    scenarios = []
    for path in sorted(CASES_DIR.glob("*.json")):
        scenarios.extend(json.loads(path.read_text())["scenarios"])
    return scenarios


SCENARIOS = [s for s in load_scenarios() if s["id"] not in OUT_OF_SUBSET]


def test_every_scenario_is_run_or_listed() -> None:
    ids = {s["id"] for s in load_scenarios()}
    assert set(OUT_OF_SUBSET) <= ids
    assert {s["id"] for s in SCENARIOS} == {
        "historical/TestContainer",
        "historical/TestPool",
        "metacache_test/RangeAndDeleteContainerWithSafeTime",
        "checkpoint_test/TestCheckpoint",
        "types/ClonePodEntries",
    }


def container(d: dict[str, Any]) -> ContainerInfo:
    return ContainerInfo.from_json(d)


def pool(d: dict[str, Any]) -> PoolInfo:
    return PoolInfo.from_json(d)


def region(d: dict[str, Any]) -> RegionInfo:
    """Scenario regions use Go field names; the file format uses katalyst's snake_case tags."""
    snake = {
        "".join("_" + c.lower() if c.isupper() else c for c in k).lstrip("_"): v
        for k, v in d.items()
    }
    return RegionInfo.from_json(snake)


def run_checkpoint_scenario(steps: list[dict[str, Any]]) -> None:
    """CheckpointNew / SetField / Marshal / Unmarshal / Verify: the project's own checkpoint format."""
    pods: dict[str, Any] = {}
    pools: dict[str, Any] = {}
    regions: dict[str, Any] = {}
    blob = b""
    for step in steps:
        if step["op"] == "CheckpointSetField":
            value = step["args"]["value"]
            field = step["args"]["field"]
            if field == "pod_entries":
                pods = {p: {c: container(i) for c, i in ctrs.items()} for p, ctrs in value.items()}
            elif field == "pool_entries":
                pools = {n: pool(i) for n, i in value.items()}
            elif field == "region_entries":
                regions = {n: region(i) for n, i in value.items()}
        elif step["op"] == "CheckpointMarshal":
            blob = encode(State(pods, pools, regions))
        elif step["op"] in ("CheckpointUnmarshal", "CheckpointVerifyChecksum"):
            restored = decode(blob)  # unmarshal and verify
            assert restored == State(pods, pools, regions)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_upstream_scenarios(scenario: dict[str, Any], tmp_path: Path) -> None:
    if scenario["id"].startswith("checkpoint_test/"):
        run_checkpoint_scenario(scenario["steps"])
        return
    if scenario["id"] == "types/ClonePodEntries":
        value = scenario["steps"][0]["args"]["value"]
        entries = {p: {c: container(i) for c, i in ctrs.items()} for p, ctrs in value.items()}
        clone = {p: {c: i.clone() for c, i in ctrs.items()} for p, ctrs in entries.items()}
        assert clone == entries
        assert all(clone[p][c] is not entries[p][c] for p in clone for c in clone[p])
        return
    cache = MetaCache(CheckpointPersister(tmp_path))
    saved: dict[str, Any] = {}
    for step in scenario["steps"]:
        op, args, expect = step["op"], step.get("args", {}), step.get("expect", {})
        if op == "inspect":
            state = cache.state()
            if "pod_count" in expect:
                assert len(state.pods) == expect["pod_count"]
            if "create_timestamp_count" in expect:
                assert cache.create_timestamp_count() == expect["create_timestamp_count"]
            continue
        if op in ("AddContainer", "SetContainerInfo"):
            raw = args["info"]
            info = saved[raw] if isinstance(raw, str) else container(raw)
            getattr(cache, "add_container" if op == "AddContainer" else "set_container_info")(
                args["pod_uid"], args["container_name"], info
            )
            if "save_as" in step:
                saved[step["save_as"]] = info
        elif op == "GetContainerInfo":
            assert (
                cache.get_container_info(args["pod_uid"], args["container_name"]) is not None
            ) == expect["found"]
        elif op == "RemovePod":
            cache.remove_pod(args["pod_uid"])
        elif op == "DeleteContainer":
            cache.delete_container(args["pod_uid"], args["container_name"])
        elif op == "SetPoolInfo":
            cache.set_pool_info(args["pool_name"], pool(args["info"]))
        elif op == "GetPoolInfo":
            assert (cache.get_pool_info(args["pool_name"]) is not None) == expect["found"]
        elif op == "DeletePool":
            cache.delete_pool(args["pool_name"])
        elif op == "GCPoolEntries":
            cache.gc_pool_entries(args["living"])
        elif op == "RangeAndDeleteContainer":
            assert args["predicate"] == "predicate_always_true"
            safe = args["safe_time"]
            cache.range_and_delete_container(
                lambda info: True, time.time_ns() if isinstance(safe, dict) else safe
            )
        else:
            pytest.fail(f"unexpected op {op}")


# --- edge cases and invariants ---------------------------------------------------------


class CountingPersister:
    def __init__(self) -> None:
        self.saves: list[State] = []
        self.fail: str | None = None
        self.delay = 0.0

    def save(self, state: State, pods: AbstractSet[str] | None = None) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise PersistenceError(self.fail)
        self.saves.append(state)


@pytest.fixture
def counting() -> CountingPersister:
    return CountingPersister()


@pytest.fixture
def cache(counting: CountingPersister) -> MetaCache:
    return MetaCache(counting, clock=iter(range(1000, 10**9)).__next__)


def info(pod: str = "p", ctr: str = "c", **kw: Any) -> ContainerInfo:
    return ContainerInfo(pod_uid=pod, container_name=ctr, **kw)


def test_missing_entries_are_not_found(cache: MetaCache) -> None:
    assert cache.get_container_info("p", "c") is None
    assert cache.get_container_entries("p") is None
    assert cache.get_pool_info("x") is None
    assert cache.get_pool_size("x") is None
    assert cache.get_region_info("r") is None


def test_repeated_add_updates_only_positive_requests_and_limits(
    cache: MetaCache, counting: CountingPersister
) -> None:
    cache.add_container(
        "p",
        "c",
        info(
            qos_level="shared_cores",
            cpu_request=1,
            memory_limit=10,
            labels={"a": "1"},
            owner_pool_name="share",
            region_names={"r1"},
        ),
    )
    created = cache.create_timestamp("p", "c")
    writes = len(counting.saves)
    cache.add_container(
        "p",
        "c",
        info(
            qos_level="dedicated_cores",
            cpu_request=0,
            cpu_limit=-1,
            memory_limit=20,
            labels={"b": "2"},
            owner_pool_name="other",
        ),
    )
    got = cache.get_container_info("p", "c")
    assert got is not None
    assert (got.cpu_request, got.cpu_limit, got.memory_limit) == (1, 0, 20)
    assert (got.qos_level, got.labels, got.owner_pool_name, got.region_names) == (
        "shared_cores",
        {"a": "1"},
        "share",
        {"r1"},
    )
    assert cache.create_timestamp("p", "c") == created  # not refreshed
    assert len(counting.saves) == writes + 1  # the changed limit is durable (see add_container)
    cache.add_container("p", "c", info(memory_limit=20))
    assert len(counting.saves) == writes + 1  # a repeated add that changes nothing does not write


def test_set_container_info_replaces_and_writes_only_on_change(
    cache: MetaCache, counting: CountingPersister
) -> None:
    cache.set_container_info("p", "c", info(qos_level="shared_cores", labels={"a": "1"}))
    assert cache.create_timestamp("p", "c") is None  # SetContainerInfo records no create time
    writes = len(counting.saves)
    cache.set_container_info("p", "c", info(qos_level="shared_cores", labels={"a": "1"}))
    assert len(counting.saves) == writes
    cache.set_container_info("p", "c", info(qos_level="reclaimed_cores"))
    got = cache.get_container_info("p", "c")
    assert got is not None and got.labels == {} and got.qos_level == "reclaimed_cores"


def test_deleting_the_last_container_removes_the_pod(cache: MetaCache) -> None:
    cache.add_container("p", "a", info(ctr="a"))
    cache.add_container("p", "b", info(ctr="b"))
    assert cache.delete_container("p", "a")
    assert set(cache.get_container_entries("p") or {}) == {"b"}
    cache.delete_container("p", "b")
    assert cache.get_container_entries("p") is None


def test_remove_pod_is_idempotent_and_clears_timestamps(
    cache: MetaCache, counting: CountingPersister
) -> None:
    cache.add_container("p", "a", info(ctr="a"))
    cache.add_container("p", "b", info(ctr="b"))
    assert cache.create_timestamp_count() == 2
    assert cache.remove_pod("p")
    writes = len(counting.saves)
    assert not cache.remove_pod("p")
    assert len(counting.saves) == writes
    assert cache.create_timestamp_count() == 0


def test_delete_missing_container_clears_a_stale_timestamp(
    cache: MetaCache, counting: CountingPersister
) -> None:
    cache.add_container("p", "c", None)  # nil info: an empty pod entry plus a timestamp
    assert cache.get_container_entries("p") == {}
    assert cache.create_timestamp_count() == 1
    before = counting.saves[-1]
    assert not cache.delete_container("p", "c")
    assert cache.create_timestamp_count() == 0
    # Timestamps are not persisted: what reaches the persister has the same entries.
    assert counting.saves[-1] == before


def test_values_are_copied_in_both_directions(cache: MetaCache) -> None:
    given = info(
        labels={"a": "1"}, topology_aware_assignments={0: CPUSet.parse("0-3")}, region_names={"r"}
    )
    cache.add_container("p", "c", given)
    given.labels["b"] = "2"
    given.region_names.add("x")
    got = cache.get_container_info("p", "c")
    assert got is not None and got.labels == {"a": "1"} and got.region_names == {"r"}
    got.labels["c"] = "3"
    got.topology_aware_assignments[1] = CPUSet.parse("4")
    again = cache.get_container_info("p", "c")
    assert (
        again is not None
        and again.labels == {"a": "1"}
        and set(again.topology_aware_assignments) == {0}
    )
    p = PoolInfo("share", {0: CPUSet.parse("0-1")})
    cache.set_pool_info("share", p)
    p.region_names.add("r")
    assert cache.get_pool_info("share") == PoolInfo("share", {0: CPUSet.parse("0-1")})
    r = RegionInfo("r1", region_status=RegionStatus())
    cache.set_region_entries({"r1": r})
    r.region_status.overshoot_status["cpu"] = "true"
    got_region = cache.get_region_info("r1")
    assert got_region is not None and got_region.region_status.overshoot_status == {}


def test_range_and_update_changes_are_kept_and_false_stops_the_walk(cache: MetaCache) -> None:
    for pod in ("p1", "p2", "p3"):
        for ctr in ("a", "b"):
            cache.add_container(pod, ctr, info(pod, ctr))
    calls: list[tuple[str, str]] = []

    def bump(pod: str, ctr: str, i: ContainerInfo) -> bool:
        calls.append((pod, ctr))
        i.cpu_request = 7
        return len(calls) < 3

    cache.range_and_update_container(bump)
    assert len(calls) == 3  # D2: false stops the whole walk, not just the pod
    changed = [
        (p, c)
        for p, ctrs in cache.state().pods.items()
        for c, i in ctrs.items()
        if i.cpu_request == 7
    ]
    assert changed == calls
    seen: list[str] = []
    cache.range_container(lambda pod, ctr, i: seen.append(pod) or len(seen) < 2)
    assert len(seen) == 2
    cache.set_pool_info("a", PoolInfo("a"))
    cache.set_pool_info("b", PoolInfo("b"))
    pools: list[str] = []
    cache.range_pool(lambda name, p: pools.append(name) or False)
    assert len(pools) == 1
    cache.set_region_entries({"r1": RegionInfo("r1"), "r2": RegionInfo("r2")})
    regions: list[RegionInfo] = []
    cache.range_region_info(lambda name, r: regions.append(r) or False)
    assert len(regions) == 1  # a real early stop
    regions[0].region_type = "changed"
    assert cache.get_region_info(regions[0].region_name).region_type == ""  # a copy


def test_callbacks_may_read_but_not_write(cache: MetaCache) -> None:
    """D7: a Range callback reading the cache does not deadlock; writing through the API is refused."""
    cache.add_container("p", "c", info())
    read: list[ContainerInfo | None] = []
    cache.range_and_update_container(
        lambda pod, ctr, i: read.append(cache.get_container_info(pod, ctr)) or True
    )
    cache.range_container(
        lambda pod, ctr, i: read.append(cache.get_container_info(pod, ctr)) or True
    )
    assert len(read) == 2 and all(r is not None for r in read)
    with pytest.raises(FailedPreconditionError, match="may read the metacache but not write"):
        cache.range_container(lambda pod, ctr, i: cache.delete_container(pod, ctr) or True)
    with pytest.raises(FailedPreconditionError):
        cache.range_and_delete_container(lambda i: cache.remove_pod("p") or True, 0)
    assert cache.get_container_info("p", "c") is not None


def run_with_timeout(fn: Any, seconds: float = 5.0) -> None:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it does not return."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"did not return within {seconds}s (deadlock)"
    if errors:
        raise errors[0]


def test_range_callbacks_may_read_create_timestamps(cache: MetaCache) -> None:
    """D7: every read is safe inside every Range callback, create_timestamp included."""
    cache.add_container("p", "a", info("p", "a"))
    cache.add_container("p", "b", info("p", "b"))
    seen: list[int | None] = []

    def reading(*args: Any) -> bool:
        seen.append(cache.create_timestamp("p", "a"))
        assert cache.create_timestamp_count() == 2
        assert cache.get_container_info("p", "b") is not None
        return True

    run_with_timeout(lambda: cache.range_container(reading))
    run_with_timeout(lambda: cache.range_and_update_container(reading))
    run_with_timeout(lambda: cache.range_and_delete_container(lambda i: reading() and False, 0))
    assert seen == [1000] * 6


def test_refused_and_failed_changes_take_their_timestamps_with_them(
    counting: CountingPersister,
) -> None:
    cache = MetaCache(counting, clock=iter(range(1000, 10**9)).__next__, max_entries=1)
    cache.add_container("p", "a", info("p", "a"))
    with pytest.raises(LimitExceededError):
        cache.add_container("p", "b", info("p", "b"))
    assert cache.create_timestamp("p", "b") is None
    assert cache.create_timestamp_count() == 1  # refused adds leave no timestamp behind
    counting.fail = "disk full"
    with pytest.raises(PersistenceError):
        cache.delete_container("p", "a")
    # The container still exists, so its safe-time protection must too.
    assert cache.get_container_info("p", "a") is not None
    assert cache.create_timestamp("p", "a") == 1000
    roomy = MetaCache(counting, clock=iter(range(1000, 10**9)).__next__)
    with pytest.raises(PersistenceError):
        roomy.add_container("q", "c", info("q", "c"))
    assert roomy.create_timestamp("q", "c") is None


def test_unknown_durability_keeps_memory_equal_to_the_file(tmp_path: Path) -> None:
    """A failed directory sync after the rename: the file holds the change, memory follows, and
    the writer learns that the outcome is unknown."""
    calls: list[str] = []

    def fail_once(stage: str, target: Path) -> None:
        if stage == "dirsync" and not calls:
            calls.append(stage)
            raise OSError(errno.EIO, "injected")

    persister = CheckpointPersister(tmp_path, faults=fail_once)
    reports: list[str | None] = []
    persister.durability_observers.append(reports.append)
    cache = MetaCache(persister)
    with pytest.raises(DurabilityUnknownError, match="outcome is unknown"):
        cache.add_container("p", "c", info())
    assert cache.get_container_info("p", "c") is not None
    assert decode((tmp_path / STATE_FILE).read_bytes()) == cache.state()
    assert reports[-1] is not None
    cache.add_container("p", "d", info("p", "d"))
    assert reports[-1] is None  # durable again


def test_safe_time_protection(counting: CountingPersister) -> None:
    clock = iter([100, 200, 300])
    cache = MetaCache(counting, clock=lambda: next(clock))
    for ctr in ("a", "b", "c"):
        cache.add_container("p", ctr, info(ctr=ctr))  # created at 100, 200, 300
    cache.set_container_info("p", "d", info(ctr="d"))  # no timestamp: never protected
    deleted = cache.range_and_delete_container(lambda i: True, 200)
    assert sorted(deleted) == [
        ("p", "a"),
        ("p", "b"),
        ("p", "d"),
    ]  # created == safeTime is deletable
    assert set(cache.get_container_entries("p") or {}) == {"c"}
    assert cache.range_and_delete_container(lambda i: i.container_name == "x", 0) == []
    assert cache.range_and_delete_container(lambda i: True, 0) == [
        ("p", "c")
    ]  # safeTime <= 0: no protection
    assert cache.create_timestamp_count() == 0


def test_pools(cache: MetaCache, counting: CountingPersister) -> None:
    cache.set_pool_info(
        "share",
        PoolInfo(
            "share", {0: CPUSet.parse("0-3"), 1: CPUSet.parse("8-9")}, {0: CPUSet.parse("0-7")}
        ),
    )
    cache.set_pool_info("reclaim", PoolInfo("reclaim"))
    assert cache.get_pool_size("share") == 6  # current assignments only
    assert cache.get_pool_size("reclaim") == 0
    writes = len(counting.saves)
    cache.set_pool_info("reclaim", PoolInfo("reclaim"))
    assert len(counting.saves) == writes
    assert not cache.delete_pool("nope")
    assert cache.gc_pool_entries(["share", "ghost"]) == ["reclaim"]
    assert cache.gc_pool_entries([]) == ["share"]
    assert cache.state().pools == {}


def test_set_region_entries_replaces_all(cache: MetaCache, counting: CountingPersister) -> None:
    cache.set_region_entries({"r1": RegionInfo("r1"), "r2": RegionInfo("r2")})
    writes = len(counting.saves)
    cache.set_region_entries({"r1": RegionInfo("r1"), "r2": RegionInfo("r2")})
    assert len(counting.saves) == writes
    cache.set_region_entries({"r3": RegionInfo("r3", headroom=2.5)})
    assert set(cache.state().regions) == {"r3"}
    cache.set_region_info("r3", RegionInfo("r3", headroom=2.5))
    assert len(counting.saves) == writes + 1


def test_update_containers_is_all_or_nothing(cache: MetaCache, counting: CountingPersister) -> None:
    cache.add_container("p", "a", info(ctr="a"))
    writes = len(counting.saves)

    def set_pool(i: ContainerInfo) -> None:
        i.owner_pool_name = "share"

    with pytest.raises(NotFoundError):
        cache.update_containers([("p", "a", set_pool), ("p", "missing", set_pool)])
    got = cache.get_container_info("p", "a")
    assert got is not None and got.owner_pool_name == ""
    cache.update_containers([("p", "a", set_pool)])
    assert len(counting.saves) == writes + 1


def test_limit_on_entries(counting: CountingPersister) -> None:
    cache = MetaCache(counting, max_entries=2)
    cache.add_container("p", "a", info(ctr="a"))
    cache.set_pool_info("x", PoolInfo("x"))
    with pytest.raises(LimitExceededError, match="--max-metacache-entries 2"):
        cache.add_container("p", "b", info(ctr="b"))
    cache.set_pool_info("x", PoolInfo("x", region_names={"r"}))  # updating an entry is fine


def test_limits_on_an_entrys_bytes_and_on_all_bytes(counting: CountingPersister) -> None:
    """A hostile client cannot grow the daemon without bound with huge labels: one entry's
    JSON and all entries' JSON are bounded (RESOURCE_EXHAUSTED), and nothing is stored."""
    cache = MetaCache(counting, max_entry_bytes=2048, max_bytes=8192)
    small = info(ctr="a")
    cache.add_container("p", "a", small)
    huge = ContainerInfo(pod_uid="p", container_name="b", labels={"k": "v" * 4096})
    with pytest.raises(LimitExceededError, match="container 'b' of pod 'p' would take"):
        cache.set_container_info("p", "b", huge)
    with pytest.raises(LimitExceededError, match="--max-metacache-entry-bytes 2048"):
        cache.set_pool_info("x", PoolInfo("x", region_names={"r" * 3000}))
    assert cache.get_container_info("p", "b") is None and cache.get_pool_info("x") is None
    medium = {"k": "v" * 1500}
    for i in range(8):
        try:
            cache.set_container_info(
                "p", f"m{i}", ContainerInfo(pod_uid="p", container_name=f"m{i}", labels=medium)
            )
        except LimitExceededError as err:
            assert "--max-metacache-bytes 8192" in str(err)
            break
    else:
        pytest.fail("the total bound was never reached")
    assert cache.state().byte_count() <= 8192
    assert (
        cache.state().byte_count() == State(cache.state().pods).byte_count()
    )  # incremental == full
    cache.delete_container("p", "m0")  # shrinking is always fine
    cache.set_container_info("p", "m0", ContainerInfo(pod_uid="p", container_name="m0"))


def test_the_byte_limits_count_utf8_bytes_not_characters(counting: CountingPersister) -> None:
    """Before, the limits counted characters: 1,000 'é' (2,000 bytes in the files) passed a
    1,500-byte limit. Now the size is the fragment's UTF-8 length, as the files hold it."""
    cache = MetaCache(counting, max_entry_bytes=1500, max_bytes=100_000)
    wide = ContainerInfo(pod_uid="p", container_name="w", labels={"k": "é" * 1000})
    assert wide.fragment_bytes() == len(wide.fragment().encode()) > len(wide.fragment())
    with pytest.raises(LimitExceededError, match="--max-metacache-entry-bytes 1500"):
        cache.set_container_info("p", "w", wide)
    narrow = ContainerInfo(pod_uid="p", container_name="n", labels={"k": "e" * 1000})
    cache.set_container_info("p", "n", narrow)
    assert cache.state().byte_count() == len(narrow.fragment().encode())


def test_byte_count_follows_every_kind_of_write(counting: CountingPersister) -> None:
    cache = MetaCache(counting)
    cache.add_container("p", "a", info(ctr="a"))
    cache.set_pool_info("x", PoolInfo("x", region_names={"r"}))
    cache.set_region_entries({"r": RegionInfo("r"), "s": RegionInfo("s")})
    cache.set_region_info("r", RegionInfo("r", owner_pool_name="x"))
    cache.update_containers([("p", "a", lambda c: setattr(c, "owner_pool_name", "x" * 100))])
    cache.range_and_delete_container(lambda c: False, 0)
    cache.delete_pool("x")
    state = cache.state()
    assert state.byte_count() == State(state.pods, state.pools, state.regions).byte_count() > 0


def test_failed_write_drops_pending_changes(cache: MetaCache, counting: CountingPersister) -> None:
    cache.add_container("p", "a", info(ctr="a"))
    counting.fail = "No space left on device"
    with pytest.raises(PersistenceError, match="No space left on device"):
        cache.add_container("p", "b", info(ctr="b"))
    assert set(cache.get_container_entries("p") or {}) == {"a"}
    counting.fail = None
    cache.add_container("p", "b", info(ctr="b"))  # recovers when the disk does
    assert set(cache.get_container_entries("p") or {}) == {"a", "b"}


def test_group_commit_under_concurrency(counting: CountingPersister) -> None:
    """16 writers, a slow disk: every write is acknowledged after it is durable, in far fewer commits."""
    counting.delay = 0.005
    cache = MetaCache(counting)
    acked: list[tuple[str, str]] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(20):
            cache.add_container(f"pod{n}", f"c{i}", info(f"pod{n}", f"c{i}"))
            durable = counting.saves[-1]
            assert f"c{i}" in durable.pods[f"pod{n}"]  # acknowledged only once on "disk"
            with lock:
                acked.append((f"pod{n}", f"c{i}"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(acked) == 320
    final = counting.saves[-1]
    assert sorted((p, c) for p, ctrs in final.pods.items() for c in ctrs) == sorted(acked)
    assert len(counting.saves) < 320 / 3, f"{len(counting.saves)} commits for 320 writes"


# --- persistence ---------------------------------------------------------------------------


def populated(persister: CheckpointPersister) -> MetaCache:
    cache = MetaCache(persister)
    cache.add_container(
        "pod1",
        "c1",
        info(
            "pod1",
            "c1",
            container_type=1,
            labels={"app": "x"},
            cpu_request=1.5,
            topology_aware_assignments={0: CPUSet.parse("0-3"), 10: CPUSet.parse("")},
            region_names={"r1"},
            container_id="cid-1",
        ),
    )
    cache.set_pool_info("share", PoolInfo("share", {0: CPUSet.parse("0-3")}, {}, {"r1"}))
    cache.set_region_entries(
        {
            "r1": RegionInfo(
                "r1",
                "share",
                "share",
                CPUSet.parse("0-1"),
                RegionStatus({"cpu": "false"}, "upper"),
                {"pod1": {"c1"}},
                headroom=1.002,
            )
        }
    )
    return cache


def test_restart_round_trip(tmp_path: Path) -> None:
    cache = populated(CheckpointPersister(tmp_path))
    restored = CheckpointPersister(tmp_path).load()
    assert restored == cache.state()
    again = MetaCache(CheckpointPersister(tmp_path), initial=restored)
    assert (
        again.create_timestamp_count() == 0
    )  # timestamps are not restored: everything is deletable
    assert again.range_and_delete_container(lambda i: True, 10**30) == [("pod1", "c1")]


def test_file_is_canonical_json_with_a_verified_checksum(tmp_path: Path) -> None:
    populated(CheckpointPersister(tmp_path))
    data = (tmp_path / STATE_FILE).read_bytes()
    doc = json.loads(data)
    assert list(doc) == ["checksum", "pod_entries", "pool_entries", "region_entries"]
    assert doc["pod_entries"]["pod1"]["c1"]["TopologyAwareAssignments"] == {"0": "0-3", "10": ""}
    assert doc["region_entries"]["r1"]["binding_numas"] == "0-1"
    corrupt = data.replace(b'"cid-1"', b'"cid-2"')
    with pytest.raises(CheckpointError, match="checkpoint is corrupted"):
        decode(corrupt)


def test_missing_null_corrupt_and_discarded_files(tmp_path: Path) -> None:
    persister = CheckpointPersister(tmp_path)
    assert persister.load() is None
    path = tmp_path / STATE_FILE
    null_maps = b'{"checksum":0,"pod_entries":null,"pool_entries":null,"region_entries":null}'
    from numamem.checkpoint.fnv import fnv1a_32

    path.write_bytes(
        null_maps.replace(b'"checksum":0', f'"checksum":{fnv1a_32(null_maps)}'.encode())
    )
    assert persister.load() == State()  # D4: null maps are empty
    path.write_bytes(b'{"checksum":1,"pod_entries":{}}')
    with pytest.raises(CheckpointError) as info_:
        persister.load()
    assert str(path) in str(info_.value)
    assert "--metacache-discard-corrupt-state" in str(info_.value)
    path.write_bytes(b"{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        persister.load()
    assert persister.load(discard_corrupt=True) is None
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"{STATE_FILE}.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"{not json"  # moved aside, never deleted


def test_which_mutations_write(tmp_path: Path) -> None:
    persister = CheckpointPersister(tmp_path)
    cache = MetaCache(persister)

    def writes(action: Any) -> int:
        before = persister.writes
        action()
        return persister.writes - before

    assert writes(lambda: cache.add_container("p", "c", info())) == 1
    assert writes(lambda: cache.add_container("p", "c", info())) == 0
    assert writes(lambda: cache.set_container_info("p", "c", info())) == 0
    assert writes(lambda: cache.range_and_update_container(lambda p, c, i: True)) == 0
    assert writes(lambda: cache.range_container(lambda p, c, i: True)) == 0
    assert writes(lambda: cache.delete_container("p", "nope")) == 0
    assert writes(lambda: cache.set_pool_info("x", PoolInfo("x"))) == 1
    assert writes(lambda: cache.delete_pool("nope")) == 0
    assert writes(lambda: cache.gc_pool_entries(["x"])) == 0
    assert writes(lambda: cache.gc_pool_entries([])) == 1
    assert writes(lambda: cache.range_and_delete_container(lambda i: False, 0)) == 0
    assert writes(lambda: cache.remove_pod("p")) == 1


def test_incremental_encoding_and_counting_equal_full_ones(tmp_path: Path) -> None:
    """The persister reuses unchanged pods' text; every file must equal a fresh encode."""
    persister = CheckpointPersister(tmp_path)
    cache = MetaCache(persister)
    path = tmp_path / STATE_FILE
    steps: list[Any] = [
        lambda: cache.add_container("p1", "a", info("p1", "a", cpu_request=1)),
        lambda: cache.add_container("p2", "a", info("p2", "a", cpu_request=2)),
        lambda: cache.add_container("p1", "b", info("p1", "b")),
        lambda: cache.set_container_info("p2", "a", info("p2", "a", cpu_request=5)),
        lambda: cache.range_and_update_container(
            lambda p, c, i: setattr(i, "cpu_limit", 3.0) or True  # type: ignore[func-returns-value]
        ),
        lambda: cache.delete_container("p1", "a"),
        lambda: cache.set_pool_info("share", PoolInfo(pool_name="share")),
        lambda: cache.remove_pod("p2"),
        lambda: cache.add_container("p2", "a", info("p2", "a", cpu_request=7)),
    ]
    for step in steps:
        step()
        state = cache.state()
        assert path.read_bytes() == encode(state)
        # The entry count a writer derives incrementally equals a full count.
        assert state.entry_count() == State(state.pods, state.pools, state.regions).entry_count()
    assert decode(path.read_bytes()) == cache.state()
