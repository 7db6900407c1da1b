"""One fault matrix for both components: every persistence step of every file × every fault.

Files and the operations that write them (each through the real servicers of an
in-process daemon, :func:`numamem.testing.server.serve_in_process`, with the podresources
socket on, so that admissions write the pod names too):

* ``memory_manager_state`` and ``numamem_pod_names`` by Admit (the name appended first, then
  the state; the descriptor reopened when it was closed); ``numamem_pod_names`` rewritten
  (a fold: an atomic write ahead of the state's) by the Admit of a released pod without
  its name;
  ``memory_manager_state`` also by the Admit of a pod that sets pod-level resources (KEP-5526,
  with the feature gates in the pod scope: its pod-level entry, its containers and the
  record of which hold memory of their own in one write) and by the removal of its last
  container (which releases the pod's budget and its entry);
  ``numamem_containers`` alone by AddContainer (an id added: the map first) and after the
  state by RemoveContainer (an id removed: the map last, a failure there is logged);
* ``sys_advisor_state.journal`` by a metacache write (append, fsync, and the cut-off after
  a failed fsync or write), by compaction (the journal swap) and by the rewrite a poisoned
  journal makes at the next write;
* ``sys_advisor_state`` (the snapshot) by compaction and by that rewrite.

Each step of the atomic write (open, write, fsync, close, rename, dirsync) and of the
journal (reopen, append, append-fsync, truncate, truncate-fsync) fails with EMFILE, ENOSPC,
EIO, EBADF or an exception that is not an OSError. After each cell:

* a read answers within 2 s while the fault persists, and once it is gone the next write of
  each component answers within 2 s and succeeds (nothing wedges);
* either memory equals what a restart reads (the stores' own restore, read-only), or the
  call failed UNAVAILABLE with reason DURABILITY_UNKNOWN and health is NOT_SERVING; a call
  that failed otherwise left memory equal to the disk and its change absent;
* nothing acknowledged is lost: what was acknowledged before (and the faulted call, when it
  was acknowledged) is in what a restart reads;
* after the recovery writes, memory equals the disk again and health is SERVING;
* no descriptor leaks: the descriptors open on the state directory are those of before.

``NUMAMEM_FAULT_SEED`` (printed; 0 by default) varies the history before the fault: how
many metacache writes precede it and whether a compaction ran first; ``make soak`` runs the
matrix under several random seeds.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.mmstore import CONTAINERS_FILE, KubeletStateStore
from numamem.checkpoint.mmstore import STATE_FILE as MM_FILE
from numamem.checkpoint.namesfile import NAMES_FILE
from numamem.client import error_reason
from numamem.config.model import FeatureGates
from numamem.metacache.cache import State
from numamem.metacache.journal import JOURNAL_FILE
from numamem.metacache.journal_store import JournalPersister
from numamem.metacache.persistence import STATE_FILE as SNAPSHOT_FILE
from numamem.metacache.persistence import encode
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc

SERVING, NOT_SERVING = 1, 2
ATOMIC = ("open", "write", "fsync", "close", "rename", "dirsync")
FAULTS: dict[str, Callable[[], Exception]] = {
    "EMFILE": lambda: OSError(errno.EMFILE, "Too many open files"),
    "ENOSPC": lambda: OSError(errno.ENOSPC, "No space left on device"),
    "EIO": lambda: OSError(errno.EIO, "Input/output error"),
    "EBADF": lambda: OSError(errno.EBADF, "Bad file descriptor"),
    "not-OSError": lambda: RuntimeError("injected defect"),
}


@dataclass(frozen=True)
class Cell:
    file: str
    step: str
    """admit, add-id, remove-id, append, compact or rewrite (see the module docstring)."""
    stage: str
    also: tuple[str, ...] = ()
    """Stages failing together with ``stage`` (a cut-off is only tried after a failure)."""

    def __str__(self) -> str:
        also = "+".join(self.also)
        return f"{self.file}/{self.step}/{self.stage}{'+' + also if also else ''}"


def cells() -> list[Cell]:
    out = [Cell(MM_FILE, "admit", s) for s in ATOMIC]
    out += [Cell(CONTAINERS_FILE, step, s) for step in ("add-id", "remove-id") for s in ATOMIC]
    out += [Cell(NAMES_FILE, "admit", s) for s in ("append", "append-fsync")]
    out += [Cell(NAMES_FILE, "admit-reopen", "open")]
    out += [Cell(NAMES_FILE, "revive", s) for s in ATOMIC]
    out += [Cell(MM_FILE, step, s) for step in POD_LEVEL_STEPS for s in ATOMIC]
    out += [Cell(CONTAINERS_FILE, "admit-pod-level", s) for s in ATOMIC]
    out += [Cell(SNAPSHOT_FILE, step, s) for step in ("compact", "rewrite") for s in ATOMIC]
    out += [Cell(JOURNAL_FILE, "append", s) for s in ("append", "append-fsync")]
    out += [
        Cell(JOURNAL_FILE, "append", "truncate", ("append-fsync",)),
        Cell(JOURNAL_FILE, "append", "truncate", ("append",)),
        Cell(JOURNAL_FILE, "append", "truncate-fsync", ("append-fsync",)),
    ]
    out += [
        Cell(JOURNAL_FILE, step, s) for step in ("compact", "rewrite") for s in (*ATOMIC, "reopen")
    ]
    # A write that puts part of its bytes in the file before it fails (a torn prefix), then
    # the fault; for the journal also with the cut-off failing, and with the retried
    # directory sync of a journal swap failing.
    out += [Cell(MM_FILE, "admit", SHORT), Cell(CONTAINERS_FILE, "add-id", SHORT)]
    out += [Cell(NAMES_FILE, "admit", SHORT), Cell(NAMES_FILE, "revive", SHORT)]
    out += [Cell(MM_FILE, "admit-pod-level", SHORT)]
    out += [Cell(SNAPSHOT_FILE, step, SHORT) for step in ("compact", "rewrite")]
    out += [Cell(JOURNAL_FILE, step, SHORT) for step in ("append", "compact", "rewrite")]
    out += [Cell(JOURNAL_FILE, "append", SHORT, ("truncate",))]
    out += [Cell(JOURNAL_FILE, "append", SHORT, ("truncate-fsync",))]
    out += [Cell(JOURNAL_FILE, "swap-retry", "dirsync-retry")]
    return out


POD_LEVEL_STEPS = ("admit-pod-level", "release-pod-level")
"""Steps on a daemon with the pod-level feature gates in the pod scope."""
MM_STEPS = ("admit", "admit-reopen", "revive", "add-id", "remove-id", *POD_LEVEL_STEPS)
"""Steps that change the memory manager (the others change the metacache)."""

SHORT = "short-write"
"""Not a hook stage: the file system writes half of the first buffer, then the next write
of that file raises the fault."""


class ShortWrites(FileSystem):
    """The real file system, but the first write to ``name`` (or one of its temp files) stops
    half way and the next one raises ``fault()``: a torn prefix in the file, as ENOSPC in the
    middle of a write. Descriptors opened before are recognised by their /proc link."""

    def __init__(self, name: str, fault: Callable[[], Exception]) -> None:
        self.name, self.fault = name, fault
        self.stage = 0

    def _ours(self, fd: int) -> bool:
        target = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        return target == self.name or target.startswith(f".{self.name}.tmp-")

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.stage == 0 and len(data) > 1 and self._ours(fd):
            self.stage = 1
            return super().write(fd, data[: len(data) // 2])
        if self.stage == 1 and self._ours(fd):
            self.stage = 2
            raise self.fault()
        return super().write(fd, data)


MATRIX = [(cell, fault) for cell in cells() for fault in FAULTS]
SEED = int(os.environ.get("NUMAMEM_FAULT_SEED", "0"))


def history(cell: Cell, fault: str) -> tuple[int, bool]:
    """(metacache writes before the fault, whether a compaction ran before them)."""
    if SEED == 0:
        return 3, False
    rng = random.Random(f"{SEED}/{cell}/{fault}")
    return rng.randint(1, 8), rng.random() < 0.5


def test_matrix_size_is_printed(report: list[str]) -> None:
    report.append(
        f"fault matrix: {len(cells())} steps x {len(FAULTS)} faults = {len(MATRIX)} cells "
        f"(NUMAMEM_FAULT_SEED={SEED})"
    )
    assert len(MATRIX) == len(cells()) * len(FAULTS) >= 200


# --- the daemon under test ------------------------------------------------------------


def res(memory: str) -> dict[str, str]:
    return {"cpu": "1", "memory": memory}


def pod(uid: str) -> mm.Pod:
    return mm.Pod(
        uid=uid,
        namespace="ns",
        name=f"name-{uid}",
        containers=[mm.Container(name="c", requests=res("256Mi"), limits=res("256Mi"))],
    )


def pod_level_pod(uid: str) -> mm.Pod:
    """A Guaranteed pod by its pod-level resources: ``own`` with memory of its own, ``shared``
    sharing the rest of the pod's 512Mi."""
    budget = res("512Mi")
    return mm.Pod(
        uid=uid,
        namespace="ns",
        name=f"name-{uid}",
        requests=budget,
        limits=budget,
        containers=[
            mm.Container(name="own", requests=res("128Mi"), limits=res("128Mi")),
            mm.Container(name="shared"),
        ],
    )


def info(pod_uid: str, cpu: float) -> mc.ContainerInfo:
    return mc.ContainerInfo(pod_uid=pod_uid, container_name="c", cpu_request=cpu)


@dataclass
class Harness:
    server: InProcessServer
    store: KubeletStateStore
    persister: JournalPersister
    pod_level: bool = False

    @property
    def client(self):  # type: ignore[no-untyped-def]
        return self.server.client

    def manager_memory(self) -> tuple[object, ...]:
        committed = self.server.component(MemoryManagerComponent).manager.committed()
        view = committed.view
        pods = view.pod_entries()
        return normalised(
            view.get_memory_assignments(),
            view.get_machine_state(),
            dict(committed.containers.as_dict()),
            dict(committed.names),
            {p: list(b) for p, b in pods.items()},
            {p: view.exclusive_containers(p) for p in pods if view.exclusive_containers(p)},
        )

    def manager_restart(self) -> tuple[object, ...]:
        snapshot = KubeletStateStore(self.store.dir, pod_level=self.pod_level).restore("Static")
        assert snapshot is not None
        return normalised(
            {p: {c: list(b) for c, b in ctrs.items()} for p, ctrs in snapshot.assignments.items()},
            dict(snapshot.machine_state),
            dict(snapshot.container_map),
            dict(snapshot.pod_names),
            {p: list(b) for p, b in snapshot.pod_entries.items()},
            dict(snapshot.exclusive),
        )

    def cache_memory(self) -> bytes:
        cache = self.server.component(MetaCacheComponent).cache
        return encode(cache.state())

    def cache_restart(self) -> bytes:
        restored = JournalPersister(self.persister.path.parent, background=False).load()
        return encode(restored or State())

    def same(self) -> bool:
        return (
            self.manager_memory() == self.manager_restart()
            and self.cache_memory() == self.cache_restart()
        )

    def state_dir_fds(self) -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(self.store.dir)):
                found.append(target)
        return sorted(found)


def normalised(
    assignments: dict[str, dict[str, list[object]]],
    machine: dict[int, object],
    container_map: dict[str, tuple[str, str]],
    names: dict[str, tuple[str, str]],
    pod_entries: dict[str, list[object]],
    exclusive: dict[str, frozenset[str]],
) -> tuple[object, ...]:
    """What a restart keeps: ids and names of containers and pods with state (the rest is
    inert by the container map's rules), the pod-level entries and which containers of
    those pods hold memory of their own."""
    live = {(p, c) for p, ctrs in assignments.items() for c in ctrs}
    return (
        assignments,
        machine,
        {cid: ref for cid, ref in container_map.items() if ref in live},
        [(uid, n) for uid, n in names.items() if uid in assignments],  # in order
        pod_entries,
        exclusive,
    )


@contextmanager
def harness(
    root: Path, pod_level: bool = False, state_commit: str = "replace"
) -> Iterator[Harness]:
    gates = (
        {
            "feature_gates": FeatureGates(True, True),
            # The pod scope allocates such a pod as a whole (policy none allocates container
            # by container, as the kubelet's none scope does).
            "topology_manager_policy": "best-effort",
            "topology_manager_scope": "pod",
        }
        if pod_level
        else {}
    )
    with serve_in_process(
        root=root, podresources_socket=str(root / "pr.sock"), state_commit=state_commit, **gates
    ) as server:
        memory = server.component(MemoryManagerComponent)
        cache = server.component(MetaCacheComponent)
        assert cache.persister is not None
        cache.persister.min_compact_bytes = 10**12  # compactions only when a cell asks
        yield Harness(server, memory.store, cache.persister, pod_level)


# --- one cell ----------------------------------------------------------------------------


@dataclass
class Outcome:
    acknowledged: bool
    code: grpc.StatusCode | None = None
    reason: str | None = None
    details: str = ""


def run(call: Callable[[], object]) -> Outcome:
    try:
        call()
    except grpc.RpcError as err:
        return Outcome(False, err.code(), error_reason(err), err.details() or "")
    return Outcome(True)


def injector(cell: Cell, fault: str) -> Callable[[str, Path], None]:
    stages = {cell.stage, *cell.also} - {SHORT}

    def hook(stage: str, target: Path) -> None:
        if stage in stages and target.name == cell.file:
            raise FAULTS[fault]()

    return hook


def swap_dirsync_unknown(h: Harness) -> None:
    """A compaction whose journal swap cannot sync the directory: health NOT_SERVING, and every
    later commit retries that sync ("dirsync-retry") until one succeeds."""

    def hook(stage: str, target: Path) -> None:
        if stage == "dirsync" and target.name == JOURNAL_FILE:
            raise OSError(errno.EIO, "injected")

    h.persister.faults = hook
    h.persister.compact()
    h.persister.faults = None
    assert h.client.check_health() == NOT_SERVING
    assert h.same()


def poison(h: Harness) -> None:
    """A write whose append and cut-off both fail: the journal is poisoned, the next write
    rewrites the snapshot and the journal."""

    def hook(stage: str, target: Path) -> None:
        if stage in ("append", "truncate") and target.name == JOURNAL_FILE:
            raise OSError(errno.EIO, "injected")

    h.persister.faults = hook
    outcome = run(lambda: h.client.set_container_info(info("m0", 7)))
    assert outcome.reason == "CHECKPOINT_WRITE_FAILED", outcome
    h.persister.faults = None
    assert h.same()


def the_step(h: Harness, cell: Cell) -> tuple[Callable[[], object], Callable[[], bool]]:
    """The faulted operation, and whether its change is in what a restart reads."""
    client = h.client
    if cell.step == "admit":
        return (
            lambda: client.admit(pod("new")),
            lambda: "new" in dict(h.manager_restart()[0]),  # type: ignore[call-overload]
        )
    if cell.step == "admit-reopen":  # the names file's descriptor closed (as after a failure)
        h.store.close()
        return (
            lambda: client.admit(pod("new")),
            lambda: "new" in dict(h.manager_restart()[0]),  # type: ignore[call-overload]
        )
    if cell.step == "revive":
        # A released pod admitted again without a name: its old name, inert in the names file,
        # must not come back, so the file is rewritten without it (a fold) ahead of the state.
        assert client.admit(pod("b")).admitted
        client.release_pod("b")
        nameless = pod("b")
        nameless.namespace = nameless.name = ""
        return (
            lambda: client.admit(nameless),
            lambda: "b" in dict(h.manager_restart()[0]),  # type: ignore[call-overload]
        )
    if cell.step == "admit-pod-level":
        return (
            lambda: client.admit(pod_level_pod("new")),
            lambda: "new" in h.manager_restart()[4],  # type: ignore[operator]
        )
    if cell.step == "release-pod-level":
        return (
            lambda: client.remove_container("cid-pl-shared"),
            lambda: "pl" not in h.manager_restart()[4],  # type: ignore[operator]
        )
    if cell.step == "add-id":
        return (
            lambda: client.add_container(pod("a"), "c", "cid-a2"),
            lambda: "cid-a2" in h.manager_restart()[2],  # type: ignore[operator]
        )
    if cell.step == "remove-id":
        return (
            lambda: client.remove_container("cid-a"),
            lambda: "a" not in dict(h.manager_restart()[0]),  # type: ignore[call-overload]
        )
    if cell.step == "compact":
        return (h.persister.compact, lambda: False)  # no logical change
    return (
        lambda: client.set_container_info(info("m0", 9)),
        lambda: b'"CPURequest":9.0' in h.cache_restart(),
    )


@pytest.mark.parametrize(("cell", "fault"), MATRIX, ids=[f"{c}-{f}" for c, f in MATRIX])
def test_a_fault_at_any_step_loses_nothing_and_wedges_nothing(
    tmp_path: Path, cell: Cell, fault: str
) -> None:
    with harness(tmp_path, cell.step in POD_LEVEL_STEPS) as h:
        client = h.client
        assert client.admit(pod("a")).admitted
        client.add_container(pod("a"), "c", "cid-a")
        if h.pod_level:
            assert client.admit(pod_level_pod("pl")).admitted
            for name in ("own", "shared"):
                client.add_container(pod_level_pod("pl"), name, f"cid-pl-{name}")
            assert client.remove_container("cid-pl-own")  # the pod keeps its budget
            assert "pl" in h.manager_restart()[4]  # type: ignore[operator]
        writes, compacted = history(cell, fault)
        if compacted:
            client.set_container_info(info("m0", 0))
            h.persister.compact()
        for i in range(writes):
            client.set_container_info(info(f"m{i % 3}", i))
        if cell.step == "rewrite":
            poison(h)
        before_fds = h.state_dir_fds()
        before_mm, before_cache = h.manager_restart(), h.cache_restart()
        call, present = the_step(h, cell)
        if cell.step == "swap-retry":
            swap_dirsync_unknown(h)
        hook = injector(cell, fault)
        h.store.faults = h.persister.faults = hook
        if cell.stage == SHORT:
            h.store.fs = h.persister.fs = ShortWrites(cell.file, FAULTS[fault])
        if cell.step == "compact":
            try:
                call()
                outcome = Outcome(True)
            except Exception as err:  # a compaction's failure is logged by its thread
                outcome = Outcome(False, details=str(err))
        else:
            outcome = run(call)

        # Reads answer while the fault persists.
        client.timeout = 2
        client.get_state()
        client.get_container_info("m0", "c")
        health = client.check_health()
        if outcome.reason == "DURABILITY_UNKNOWN":
            assert health == NOT_SERVING, (outcome, health)
        # Memory equals what a restart reads, whatever the outcome (unknown included).
        assert h.same(), outcome
        if outcome.code is not None and outcome.reason != "DURABILITY_UNKNOWN":
            assert outcome.code == grpc.StatusCode.UNAVAILABLE, outcome
            assert outcome.reason == "CHECKPOINT_WRITE_FAILED", outcome
            assert "not applied" in outcome.details, outcome
        # Nothing acknowledged is lost, nothing failed appears: what a restart reads is the
        # state before the call, or (acknowledged, or unknown and applied) with its change.
        restart_mm, restart_cache = h.manager_restart(), h.cache_restart()
        changed = present()
        if outcome.acknowledged and cell.step != "compact":  # a compaction changes no entry
            assert changed, outcome
        elif outcome.reason == "CHECKPOINT_WRITE_FAILED":
            assert not changed, outcome  # not applied, and not resurrected by a restart
        if not changed or cell.step not in MM_STEPS:
            assert restart_mm == before_mm, outcome
        if not changed or cell.step in MM_STEPS:
            assert restart_cache == before_cache, outcome

        # The fault goes: the next write of each component answers and is durable.
        h.store.faults = h.persister.faults = None
        h.store.fs = h.persister.fs = REAL
        assert client.admit(pod("after")).admitted
        client.set_container_info(info("m9", 1))
        assert h.same()
        assert client.check_health() == SERVING
        assert h.state_dir_fds() == before_fds
