"""A power cut at every file operation of a random workload of both components.

The daemon (in process, both components, the podresources names on, the metacache
compacting often) runs a seeded random workload through its servicers while
:class:`tests.powerloss.RecordingFileSystem` records every operation on the state
directory. Then, for every prefix of that log (every cut point), several states a power cut
there could leave (see :mod:`tests.powerloss`: only what was fsynced; everything, as a
crash; random prefixes of what was not, torn) are written to a fresh directory and restored
by the components' own start. Each must start (a refusal would need a cut that leaves no
valid state, which the atomic-write protocol never does) and hold, for each component,
the state after the last acknowledged operation before the cut, or that plus the one
operation in flight: nothing acknowledged is lost, nothing failed or unstarted appears.

``NUMAMEM_POWERLOSS_SEEDS`` (default ``1``) and ``NUMAMEM_POWERLOSS_OPS`` (default 40)
set the workloads; ``make soak`` runs more of them. A failure names its seed and cut.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import pytest

from numamem.api.app import build_components
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.server import Daemon
from numamem.checkpoint.mmjournal import JOURNAL_FILE as MM_JOURNAL
from numamem.client import NumamemClient, error_reason
from numamem.config.model import Config
from numamem.errors import PersistenceError
from numamem.metacache.cache import State
from numamem.metacache.journal import JOURNAL_FILE
from numamem.metacache.persistence import decode, encode
from numamem.metacache.types import ContainerInfo
from numamem.pod import Pod
from numamem.testing.server import daemon_component, default_config
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology.sysfs import discover
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.powerloss import Op, RecordingFileSystem, cut, materialize
from tests.unit.test_memorymanager import GI
from tests.unit.test_memorymanager import ctr as container

SEEDS = [int(s) for s in os.environ.get("NUMAMEM_POWERLOSS_SEEDS", "1").split(",")]
OPS = int(os.environ.get("NUMAMEM_POWERLOSS_OPS", "40"))
RANDOM_VARIANTS = 2


# --- the workload --------------------------------------------------------------------


def res(memory: str) -> dict[str, str]:
    return {"cpu": "1", "memory": memory}


def pod(uid: str, sizes: list[str], name: str | None = None) -> mm.Pod:
    name = f"web-{uid}" if name is None else name
    return mm.Pod(
        uid=uid,
        namespace="ns" if name else "",
        name=name,
        containers=[
            mm.Container(name=f"c{i}", requests=res(s), limits=res(s)) for i, s in enumerate(sizes)
        ],
    )


MM, MC, COMPACT = "memory manager", "metacache", "compaction"


def workload(
    rng: random.Random, client: NumamemClient, count: int, touched: list[tuple[str, str]]
) -> list[tuple[str, Callable[[], object]]]:
    """``count`` operations on both components (and which one each writes), chosen as they
    run (they see what exists). A metacache operation leaves the entries it may change in
    ``touched`` (("pod", uid), ("pool", name) or ("regions", ""))."""
    pods: dict[str, mm.Pod] = {}
    ids: dict[str, str] = {}
    entries: set[tuple[str, str]] = set()
    calls: list[tuple[str, Callable[[], object]]] = []

    def admit() -> object:
        uid = f"p{rng.randint(0, 9)}"
        # Mostly its own name; sometimes another (a rename: the names file is rewritten) or
        # none (a pod re-admitted without a name must not get its old one back).
        name = rng.choice([None, None, None, f"other-{uid}", ""])
        sizes = [rng.choice(["128Mi", "256Mi", "512Mi"]) for _ in range(rng.randint(1, 2))]
        p = pod(uid, sizes, name)
        pods[uid] = p
        return client.admit(p)

    def add_id() -> object:
        if not pods:
            return admit()
        uid = rng.choice(sorted(pods))
        cid = f"cid-{uid}-{rng.randint(0, 99)}"
        ids[cid] = uid
        return client.add_container(pods[uid], "c0", cid)

    def admit_with_id() -> object:
        """Admit with the runtime id (numamem nri's CreateContainer): both in one write."""
        uid = f"p{rng.randint(0, 9)}"
        p = pod(uid, [rng.choice(["128Mi", "256Mi"])], None)
        pods[uid] = p
        cid = f"cid-{uid}-{rng.randint(0, 99)}"
        ids[cid] = uid
        return client.admit(p, container_ids={"c0": cid})

    def remove_id() -> object:
        if not ids:
            return add_id()
        cid = rng.choice(sorted(ids))
        del ids[cid]
        return client.remove_container(cid)

    def release() -> object:
        uid = f"p{rng.randint(0, 9)}"
        pods.pop(uid, None)
        return client.release_pod(uid)

    def set_info() -> object:
        key = (f"m{rng.randint(0, 5)}", f"c{rng.randint(0, 2)}")
        entries.add(key)
        touched[:] = [("pod", key[0])]
        return client.set_container_info(
            mc.ContainerInfo(
                pod_uid=key[0],
                container_name=key[1],
                cpu_request=rng.randint(1, 64) / 4,
                labels={"k": "v" * rng.randint(0, 300)},
            )
        )

    def delete_info() -> object:
        if not entries:
            return set_info()
        key = rng.choice(sorted(entries))
        entries.discard(key)
        touched[:] = [("pod", key[0])]
        return client.delete_container(*key)

    def remove_cache_pod() -> object:
        uid = f"m{rng.randint(0, 5)}"
        entries.difference_update({k for k in entries if k[0] == uid})
        touched[:] = [("pod", uid)]
        return client.remove_pod(uid)

    def pool() -> object:
        name = f"pool{rng.randint(0, 3)}"
        touched[:] = [("pool", name)]
        return client.set_pool_info(
            mc.PoolInfo(pool_name=name, region_names=[f"r{rng.randint(0, 9)}"])
        )

    def regions() -> object:
        touched[:] = [("regions", "")]
        return client.set_region_entries(
            {f"r{i}": mc.RegionInfo(region_name=f"r{i}") for i in range(rng.randint(0, 3))}
        )

    choices = [(MM, admit), (MM, admit), (MM, add_id), (MM, admit_with_id), (MM, remove_id)]
    choices += [(MM, release)]
    choices += [(MC, set_info)] * 4
    choices += [(MC, delete_info), (MC, remove_cache_pod), (MC, pool), (MC, regions)]
    for _ in range(count):
        calls.append(rng.choice(choices))
    return calls


# --- what each component holds -----------------------------------------------------------


def manager_state(component: MemoryManagerComponent) -> tuple[object, ...]:
    """What the memory manager holds, as a restart keeps it (ids and names of containers and
    pods with state; the rest is inert by the container map's rules)."""
    committed = component.manager.committed()
    assignments = committed.view.get_memory_assignments()
    live = {(p, c) for p, ctrs in assignments.items() for c in ctrs}
    return (
        assignments,
        committed.view.get_machine_state(),
        {cid: ref for cid, ref in committed.containers.as_dict().items() if ref in live},
        [(uid, n) for uid, n in committed.names.items() if uid in assignments],  # in order
    )


def cache_state(component: MetaCacheComponent) -> bytes:
    return encode(component.cache.state())


@dataclass
class Run:
    seed: int
    initial: dict[str, bytes]
    log: list[Op]
    acks: list[int]
    """Per operation, the log length when it returned (acknowledged or refused)."""
    components: list[str]
    outcomes: list[str]
    """Per operation: acknowledged, failed (not applied), unknown (DURABILITY_UNKNOWN) or
    refused (answered without a write)."""
    manager: list[tuple[object, ...]]
    cache: list[bytes]
    """Per operation i, the states after it; index 0 is the state before the first."""
    config: Config
    faults: int = 0
    journal_appends: int = 0
    """The memory manager journal's appends and compactions in the workload (journal mode)."""
    journal_compactions: int = 0
    started: int = 0
    """The log length when the first operation was sent (the start's own writes before)."""
    touched: list[list[tuple[str, str]]] = field(default_factory=list)
    """Per metacache operation, the entries it may change (for an interrupted one)."""

    def allowed(self, component: str, done: int) -> range:
        """The state indices a restore of ``component`` may show once ``done`` operations
        were answered: after the last of them or the one in flight; since an unknown outcome
        of that component not yet followed by one of its acknowledged writes (which makes
        everything before it durable; an acknowledged operation that wrote nothing does not),
        anything from before that operation on."""
        low = done
        for i in range(done, 0, -1):
            if self.components[i - 1] != component:
                continue
            wrote = self.acks[i - 1] > (self.acks[i - 2] if i > 1 else self.started)
            if self.outcomes[i - 1] == "acknowledged" and wrote:
                break
            if self.outcomes[i - 1] == "unknown":
                low = i - 1
        return range(low, min(done + 1, len(self.acks)) + 1)


FAULT_KINDS: dict[str, Callable[[], Exception]] = {
    "EIO": lambda: OSError(errno.EIO, "injected"),
    "ENOSPC": lambda: OSError(errno.ENOSPC, "injected"),
    "EMFILE": lambda: OSError(errno.EMFILE, "injected"),
    "EBADF": lambda: OSError(errno.EBADF, "injected"),
    "not-OSError": lambda: RuntimeError("injected defect"),
}


STAGES = (
    "open", "write", "fsync", "close", "rename", "dirsync",
    "append", "append-fsync", "truncate", "reopen", "dirsync-retry",
)  # fmt: skip
"""Every stage a fault hook sees, but the cut-off's fsync (its failure leaves an outcome the
state list cannot name: "not applied" in memory, the record maybe back after a power cut;
the fault matrix covers it)."""


SHORT = "short-write"
SCHEDULED: tuple[tuple[str, str], ...] = (
    (MC, "append-fsync"), (MM, "dirsync"), (COMPACT, f"dirsync@{JOURNAL_FILE}"),
    (MC, "append-fsync+truncate"), (COMPACT, "dirsync"),
    (MM, "rename"), (MC, SHORT), (COMPACT, "rename"), (MC, "append"), (MM, "fsync"),
    (MC, "append+truncate"), (COMPACT, "reopen"), (MM, SHORT), (MC, "append-fsync"),
    (COMPACT, "fsync"), (MM, "write"),
)  # fmt: skip
"""The faults each faulty workload meets, in order, at the next operation of that component
(``+``: both stages fail; a compaction is an extra operation): every kind of failure at
least once whatever the seed."""


def stages_fail(stages: set[str], fault: Callable[[], Exception]) -> Callable[[str, Path], None]:
    """A fault hook that fails the first occurrence of each of ``stages`` (``stage@file``:
    that stage of that file only)."""
    left = set(stages)

    def hook(stage: str, target: Path) -> None:
        for key in (f"{stage}@{target.name}", stage):
            if key in left:
                left.discard(key)
                raise fault()

    return hook


def outcome_of(call: Callable[[], object]) -> str:
    try:
        call()
    except grpc.RpcError as err:
        reason = error_reason(err)
        if reason == "DURABILITY_UNKNOWN":
            return "unknown"
        if reason == "CHECKPOINT_WRITE_FAILED":
            return "failed"
        return "refused"
    return "acknowledged"


def record(
    root: Path,
    seed: int,
    count: int,
    *,
    faults: bool = False,
    background: bool = False,
    state_commit: str = "replace",
) -> Run:
    """Run the workload of ``seed`` on a recording daemon. With ``faults``, a fifth of the
    operations meet a fault (an errno, a short write, or an exception that is not an OSError)
    at a random stage; with ``background``, compactions run on the compactor thread."""
    sysfs = write_sysfs(root / "sys", standard_nodes(2))
    config = default_config(root, sysfs, podresources_socket=str(root / "pr.sock"))
    config = replace(config, metacache_compact_bytes=2048, state_commit=state_commit)
    state_dir = Path(config.state_dir)
    state_dir.mkdir(mode=0o700)
    fs = RecordingFileSystem(state_dir)

    def components(cfg: Config) -> list[object]:
        built = list(build_components(cfg, fs=fs))
        for component in built:
            if isinstance(component, MetaCacheComponent) and component.persister is not None:
                component.persister.background = background  # inline: in order, replayable
        return built

    daemon = Daemon(config, components, set_umask=False)  # type: ignore[arg-type]
    daemon.start()
    try:
        memory = daemon_component(daemon, MemoryManagerComponent)
        meta = daemon_component(daemon, MetaCacheComponent)
        assert meta.persister is not None
        memory.store.journal.compact_bytes = 2048  # journal mode: compactions in the workload
        run = Run(seed, fs.initial, fs.log, [], [], [], [], [], config, started=len(fs.log))
        run.manager.append(manager_state(memory))
        run.cache.append(cache_state(meta))
        rng = random.Random(seed)
        scheduled = list(SCHEDULED)
        touched: list[tuple[str, str]] = []

        def arm(stages: str) -> None:
            fault = FAULT_KINDS[rng.choice(sorted(FAULT_KINDS))]
            if stages == SHORT:
                fs.short_write(fault)
            else:
                chosen = set(stages.split("+"))
                memory.store.faults = meta.persister.faults = stages_fail(chosen, fault)
            run.faults += 1

        def disarm() -> None:
            memory.store.faults = meta.persister.faults = None
            fs.short_write(None)

        def compact() -> object:
            with contextlib.suppress(PersistenceError):  # the compactor logs its failures
                meta.persister.compact()  # type: ignore[union-attr]
            return None

        def answered(component: str, outcome: str) -> None:
            disarm()
            run.outcomes.append(outcome)
            run.acks.append(len(fs.log))
            run.components.append(component)
            run.touched.append(list(touched))
            run.manager.append(manager_state(memory))
            run.cache.append(cache_state(meta))

        with NumamemClient(config.socket, timeout=10) as client:
            for component, call in workload(rng, client, count, touched):
                touched.clear()
                if faults and scheduled and scheduled[0][0] == COMPACT:
                    arm(scheduled.pop(0)[1])
                    compact()
                    answered(MC, "refused")  # a compaction changes no entry
                    # A metacache write right after it, before any other directory sync: it
                    # stands on the new journal alone.
                    touched[:] = [("pod", "after-compaction")]
                    info = mc.ContainerInfo(pod_uid="after-compaction", container_name="c")
                    info.cpu_request = len(run.acks)
                    answered(MC, outcome_of(lambda info=info: client.set_container_info(info)))
                    touched.clear()
                if faults and scheduled and scheduled[0][0] == component:
                    arm(scheduled.pop(0)[1])
                elif faults and rng.random() < 0.1:
                    arm(rng.choice([SHORT, *STAGES]))
                answered(component, outcome_of(call))
        run.journal_appends = memory.store.journal.appends
        run.journal_compactions = memory.store.journal.compactions
    finally:
        daemon.shutdown()
    return run


def restore(
    run: Run, directory: Path, *, then_write: bool = False, switch: bool = False
) -> tuple[tuple[object, ...], bytes]:
    """Start both components on ``directory`` as the daemon does (load, then start). With
    ``then_write``, write to each afterwards and check that a second restore reads it. With
    ``switch``, the memory manager starts in the other ``--state-commit`` mode (a journal
    mode's journal folded by a replace-mode start, a replace mode's files journaled)."""
    config = replace(run.config, state_dir=str(directory))
    if switch:
        other = "replace" if config.state_commit == "journal" else "journal"
        config = replace(config, state_commit=other)
    machine = discover(config.sysfs_root)
    memory = MemoryManagerComponent(config, machine)
    meta = MetaCacheComponent(config)
    meta.collector.start = lambda: None  # type: ignore[method-assign]  # no metrics thread
    for component in (memory, meta):
        component.load()
    assert meta.persister is not None
    meta.persister.background = False  # no compactor thread
    for component in (memory, meta):
        component.start()
    try:
        restored = manager_state(memory), cache_state(meta)
        if then_write:
            meta.cache.set_container_info(
                "after", "c", ContainerInfo(pod_uid="after", container_name="c")
            )
            memory.manager.admit(
                Pod("after", "ns", "after", containers=(container("c", GI // 16),))
            )
            written = manager_state(memory), cache_state(meta)
            meta.persister.close()
            assert restore(run, directory) == written, "a write after the restore was not kept"
        return restored
    finally:
        meta.persister.close()


def interrupted_change(run: Run, done: int, cache: bytes) -> bool:
    """Whether ``cache`` is the state before the metacache operation in flight (which later
    failed or ended unknown: its change reached the file before the failure, and the cut
    came before it was answered) with only that operation's entries changed."""
    if done >= len(run.acks) or run.components[done] != MC:
        return False
    if run.outcomes[done] not in ("failed", "unknown"):
        return False
    before, after = decode(run.cache[done]), decode(cache)
    keys = run.touched[done]
    pods = {uid for kind, uid in keys if kind == "pod"}
    pools = {name for kind, name in keys if kind == "pool"}
    regions = ("regions", "") in keys

    def rest(state: State) -> tuple[object, ...]:
        return (
            {u: encode_pod(c) for u, c in state.pods.items() if u not in pods},
            {n: p.fragment() for n, p in state.pools.items() if n not in pools},
            None if regions else {n: r.fragment() for n, r in state.regions.items()},
        )

    return rest(before) == rest(after)


def encode_pod(containers: dict[str, ContainerInfo]) -> dict[str, str]:
    return {name: info.fragment() for name, info in containers.items()}


def check_every_cut(run: Run, tmp_path: Path, report: list[str], label: str) -> None:
    rng = random.Random(run.seed)
    restores = 0
    kinds = ["synced", "crash"] + ["random"] * RANDOM_VARIANTS
    for at in range(len(run.log) + 1):
        done = sum(1 for ack in run.acks if ack <= at)  # operations answered before the cut
        disk = cut(run.initial, run.log, at)
        # Right after a failed or unknown write, until its component's next acknowledged one,
        # what was not synced is what matters: more random cuts there.
        after_failure = any(
            len(run.allowed(c, done)) > 2 or run.outcomes[done - 1 : done] == ["failed"]
            for c in (MM, MC)
        )
        for n, kind in enumerate(kinds + ["random"] * (4 if after_failure else 0)):
            directory = materialize(disk.variant(kind, rng), tmp_path / f"cut{at}-{n}")
            where = f"{label} seed {run.seed}, cut after file operation {at} of {len(run.log)}, {kind} variant"
            try:
                manager, cache = restore(
                    run,
                    directory,
                    then_write=(at + n) % 7 == 0,
                    switch=run.config.state_commit == "journal" and (at + n) % 3 == 0,
                )
            except Exception as err:  # the daemon must start on every cut
                pytest.fail(f"{where}: the start was refused: {err}")
            assert any(manager == run.manager[i] for i in run.allowed(MM, done)), where
            assert any(cache == run.cache[i] for i in run.allowed(MC, done)) or (
                interrupted_change(run, done, cache)
            ), where
            restores += 1
            shutil.rmtree(directory)
    outcomes = {o: run.outcomes.count(o) for o in sorted(set(run.outcomes))}
    report.append(
        f"power-loss simulation ({label}): seed {run.seed}, {len(run.acks)} operations "
        f"{outcomes}, {run.faults} faults, {len(run.log)} file operations, "
        f"{len(run.log) + 1} cut points, {restores} restores"
    )


@pytest.mark.parametrize("state_commit", ["replace", "journal"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_cut_at_any_operation_keeps_everything_acknowledged(
    tmp_path: Path, seed: int, state_commit: str, report: list[str]
) -> None:
    """``journal`` (``--state-commit=journal``): the memory manager's changes as journal
    records, compacted every few changes (a low bound), restored in journal mode and, every
    third cut, by a replace-mode start that folds the journal into the files."""
    run = record(tmp_path / "live", seed, OPS, state_commit=state_commit)
    assert set(run.outcomes) <= {"acknowledged", "refused"}
    if state_commit == "replace":
        assert 0 < run.acks[-1] <= len(run.log)  # the graceful stop writes after the last answer
    else:
        swaps = [op for op in run.log if op.kind == "rename" and op.other == MM_JOURNAL]
        assert len(swaps) >= 3 and run.journal_compactions >= 2
        assert run.journal_appends >= OPS // 5
    check_every_cut(
        run, tmp_path, report, "no faults" if state_commit == "replace" else "journal mode"
    )


@pytest.mark.parametrize("state_commit", ["replace", "journal"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_cut_after_faults_never_resurrects_a_failed_change(
    tmp_path: Path, seed: int, state_commit: str, report: list[str]
) -> None:
    """Faults and power cuts together: a change reported not applied never comes back, an
    acknowledged one is never lost, and an unknown one is either there or not (``journal``:
    failed appends cut off, a poisoned journal settled by the next change, compactions that
    fail)."""
    count = max(OPS * 3 // 4, len(SCHEDULED) * 3)
    run = record(tmp_path / "live", seed, count, faults=True, state_commit=state_commit)
    assert run.faults >= len(SCHEDULED) and "failed" in run.outcomes
    label = "with faults" if state_commit == "replace" else "journal mode with faults"
    check_every_cut(run, tmp_path, report, label)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_cut_during_background_compactions(
    tmp_path: Path, seed: int, report: list[str]
) -> None:
    """The compactor thread copies the journal's tail while commits land; the log is one real
    order of both (the seed replays the workload, not the interleaving)."""
    run = record(tmp_path / "live", seed, max(OPS * 3 // 4, 1), background=True)
    check_every_cut(run, tmp_path, report, "background compaction")
