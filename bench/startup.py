"""Start-up with a large state (``make bench`` phase ``startup``): the time to SERVING and the
RSS, empty and with 2,000 pods in memory_manager_state and 10,000 metacache containers (a
snapshot and 50,000 journal records after it), written by :func:`write_large_state`.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.harness import (
    Report,
    Scale,
    daemon,
    guaranteed,
    latencies,
)
from numamem.checkpoint.mmstore import KubeletStateStore
from numamem.checkpoint.records import frame
from numamem.client import NumamemClient
from numamem.config.model import ReservedMemory
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.reserved import get_system_reserved_memory
from numamem.memorymanager.state.store import InMemoryStore
from numamem.metacache import journal
from numamem.metacache.cache import State
from numamem.metacache.persistence import STATE_FILE, encode
from numamem.metacache.types import ContainerInfo
from numamem.pod import Container, Pod
from numamem.quantity import parse_quantity
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topologymanager import policy as tm


def write_large_state(state_dir: Path, sysfs: Path, s: Scale) -> None:
    """2,000 three-container pods in memory_manager_state (with their container ids), 10,000
    containers in the sys_advisor_state snapshot and 50,000 journal records after it."""
    from numamem.topology.sysfs import discover

    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    machine = discover(str(sysfs))
    q = parse_quantity
    reserved = get_system_reserved_memory(
        machine, {"memory": q("1Gi")}, [ReservedMemory(0, (("memory", q("1Gi")),))]
    )
    policy = StaticPolicy(machine, reserved)
    memory_store = InMemoryStore()
    topology, _ = tm.new_policy("none", machine, {})
    manager = Manager(policy, memory_store, topology, "container")
    manager.start()
    res = {"cpu": q("1"), "memory": q("100Mi")}
    for i in range(s.large_pods):
        pod = Pod(
            f"pod-{i:05d}", containers=tuple(Container(f"c{j}", res, dict(res)) for j in range(3))
        )
        for j in range(3):
            manager.allocate(pod, f"c{j}")
            manager.add_container(pod, f"c{j}", f"cid-{i:05d}-{j}")
    assert memory_store.saved is not None
    KubeletStateStore(state_dir).save(memory_store.saved)
    pods: dict[str, dict[str, ContainerInfo]] = {}
    for i in range(s.large_containers // 5):
        uid = f"mc-{i:05d}"
        pods[uid] = {
            f"c{j}": ContainerInfo(pod_uid=uid, container_name=f"c{j}", qos_level="shared_cores", cpu_request=2,
                                   owner_pool_name="share", labels={"app": "bench"}, container_id=f"mcid-{i}-{j}")
            for j in range(5)
        }  # fmt: skip
    # The metacache as a daemon killed before compacting would leave it: a snapshot and a long
    # journal of one-container changes (the layout numamem.metacache.journal documents).
    (state_dir / STATE_FILE).write_bytes(encode(State(pods=pods), generation=0))
    records = [journal.header(0)]
    for seq in range(1, s.journal_records + 1):
        uid = f"mc-{seq * 7919 % len(pods):05d}"
        name = f"c{seq % 5}"
        info = pods[uid][name].clone()
        info.cpu_request = float(seq % 8 + 1)
        payload = f'{{"pods":{{"{uid}":{{"{name}":{info.fragment()}}}}},"seq":{seq}}}'
        records.append(frame(payload.encode()))
    (state_dir / journal.JOURNAL_FILE).write_bytes(b"".join(records))


def startup_phase(r: Report, root: Path, s: Scale) -> None:
    print(
        f"start-up and RSS: empty, and {s.large_containers} metacache containers (+ "
        f"{s.journal_records} journal records) + {s.large_pods} pods",
        flush=True,
    )
    with daemon(root / "startup-empty", memory_gib=2048) as d:
        r.value("startup_empty_s", "start-up to SERVING, empty state", d.startup_seconds, "s")
        r.value("rss_empty_mb", "RSS, empty state", d.rss_bytes() / 2**20, "MiB")
    big = root / "startup-large"
    big.mkdir()
    write_sysfs(big / "sys", standard_nodes(2, memory_gib=2048))
    write_large_state(big / "state", big / "sys", s)
    sizes = {p.name: p.stat().st_size for p in (big / "state").iterdir()}
    r.figures["large_state_file_bytes"] = sizes
    with daemon(big, memory_gib=2048, extra=["--metric-interval=3600"]) as d:
        r.value(
            "startup_large_s",
            "start-up to SERVING, large state",
            d.startup_seconds,
            "s",
            "(target <= 2 s)",
        )
        client = NumamemClient(d.socket, timeout=30)
        state = client.get_state()
        assert len(state.entries) == s.large_pods, len(state.entries)
        assert sum(1 for _ in client.list_containers()) == s.large_containers
        r.value(
            "rss_large_mb", "RSS, large state", d.rss_bytes() / 2**20, "MiB", "(target <= 150 MB)"
        )
        samples = latencies(lambda i: client.admit(guaranteed(f"late-{i}", containers=3)), 50, 5)
        r.latency("admit_large_state", f"Admit with {s.large_pods} pods in the state", samples)
        client.close()
