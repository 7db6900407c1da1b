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

import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from numamem.api.app import build_components
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.server import Daemon
from numamem.client import NumamemClient
from numamem.config.model import Config
from numamem.metacache.persistence import encode
from numamem.testing.server import default_config
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology.sysfs import discover
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.powerloss import Op, RecordingFileSystem, cut, materialize

SEEDS = [int(s) for s in os.environ.get("NUMAMEM_POWERLOSS_SEEDS", "1").split(",")]
OPS = int(os.environ.get("NUMAMEM_POWERLOSS_OPS", "40"))
RANDOM_VARIANTS = 2


# --- the workload --------------------------------------------------------------------


def res(memory: str) -> dict[str, str]:
    return {"cpu": "1", "memory": memory}


def pod(uid: str, sizes: list[str]) -> mm.Pod:
    return mm.Pod(
        uid=uid,
        namespace="ns",
        name=f"web-{uid}",
        containers=[
            mm.Container(name=f"c{i}", requests=res(s), limits=res(s)) for i, s in enumerate(sizes)
        ],
    )


def workload(rng: random.Random, client: NumamemClient, count: int) -> list[Callable[[], object]]:
    """``count`` operations on both components, chosen as they run (they see what exists)."""
    pods: dict[str, mm.Pod] = {}
    ids: dict[str, str] = {}
    entries: set[tuple[str, str]] = set()
    calls: list[Callable[[], object]] = []

    def admit() -> object:
        uid = f"p{rng.randint(0, 9)}"
        p = pod(uid, [rng.choice(["128Mi", "256Mi", "512Mi"]) for _ in range(rng.randint(1, 2))])
        pods[uid] = p
        return client.admit(p)

    def add_id() -> object:
        if not pods:
            return admit()
        uid = rng.choice(sorted(pods))
        cid = f"cid-{uid}-{rng.randint(0, 99)}"
        ids[cid] = uid
        return client.add_container(pods[uid], "c0", cid)

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
        return client.delete_container(*key)

    def remove_cache_pod() -> object:
        uid = f"m{rng.randint(0, 5)}"
        entries.difference_update({k for k in entries if k[0] == uid})
        return client.remove_pod(uid)

    def pool() -> object:
        return client.set_pool_info(
            mc.PoolInfo(
                pool_name=f"pool{rng.randint(0, 3)}", region_names=[f"r{rng.randint(0, 9)}"]
            )
        )

    def regions() -> object:
        return client.set_region_entries(
            {f"r{i}": mc.RegionInfo(region_name=f"r{i}") for i in range(rng.randint(0, 3))}
        )

    choices = [admit, admit, add_id, remove_id, release] + [set_info] * 4
    choices += [delete_info, remove_cache_pod, pool, regions]
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
        {uid: n for uid, n in committed.names.items() if uid in assignments},
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
    manager: list[tuple[object, ...]]
    cache: list[bytes]
    """Per operation i, the states after it; index 0 is the state before the first."""
    config: Config


def record(root: Path, seed: int, count: int) -> Run:
    sysfs = write_sysfs(root / "sys", standard_nodes(2))
    config = default_config(root, sysfs, podresources_socket=str(root / "pr.sock"))
    config = replace(config, metacache_compact_bytes=2048)
    state_dir = Path(config.state_dir)
    state_dir.mkdir(mode=0o700)
    fs = RecordingFileSystem(state_dir)

    def components(cfg: Config) -> list[object]:
        built = list(build_components(cfg, fs=fs))
        for component in built:
            if isinstance(component, MetaCacheComponent) and component.persister is not None:
                component.persister.background = False  # compactions in order, replayable
        return built

    daemon = Daemon(config, components, set_umask=False)  # type: ignore[arg-type]
    daemon.start()
    try:
        memory = next(c for c in daemon._components if isinstance(c, MemoryManagerComponent))
        meta = next(c for c in daemon._components if isinstance(c, MetaCacheComponent))
        run = Run(seed, fs.initial, fs.log, [], [], [], config)
        run.manager.append(manager_state(memory))
        run.cache.append(cache_state(meta))
        rng = random.Random(seed)
        with NumamemClient(config.socket, timeout=10) as client:
            for call in workload(rng, client, count):
                call()  # every call is answered: acknowledged or refused (nothing fails here)
                run.acks.append(len(fs.log))
                run.manager.append(manager_state(memory))
                run.cache.append(cache_state(meta))
    finally:
        daemon.shutdown()
    return run


def restore(run: Run, directory: Path) -> tuple[tuple[object, ...], bytes]:
    """Start both components on ``directory`` as the daemon does (load, then start)."""
    config = replace(run.config, state_dir=str(directory))
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
        return manager_state(memory), cache_state(meta)
    finally:
        meta.persister.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_cut_at_any_operation_keeps_everything_acknowledged(
    tmp_path: Path, seed: int, report: list[str]
) -> None:
    run = record(tmp_path / "live", seed, OPS)
    assert 0 < run.acks[-1] <= len(run.log)  # the graceful stop writes after the last answer
    rng = random.Random(seed)
    restores = 0
    kinds = ["synced", "crash"] + ["random"] * RANDOM_VARIANTS
    for at in range(len(run.log) + 1):
        done = sum(1 for ack in run.acks if ack <= at)  # operations answered before the cut
        disk = cut(run.initial, run.log, at)
        for n, kind in enumerate(kinds):
            directory = materialize(disk.variant(kind, rng), tmp_path / f"cut{at}-{n}")
            where = f"seed {seed}, cut after operation {at} of {len(run.log)}, {kind} variant"
            try:
                manager, cache = restore(run, directory)
            except Exception as err:  # the daemon must start on every cut
                pytest.fail(f"{where}: the start was refused: {err}")
            allowed = {done, min(done + 1, len(run.acks))}
            assert any(manager == run.manager[i] for i in allowed), where
            assert any(cache == run.cache[i] for i in allowed), where
            restores += 1
            shutil.rmtree(directory)
    report.append(
        f"power-loss simulation: seed {seed}, {len(run.acks)} operations, {len(run.log)} file "
        f"operations, {len(run.log) + 1} cut points, {restores} restores"
    )
