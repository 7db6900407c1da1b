"""The three figures of issue 27 (``make bench``, phase ``targets``), each a ratio in one run.

* **Allocate / Health**: Allocate p50 over Health/Check p50 on the same channel of one
  daemon whose state directory is on tmpfs (``/dev/shm``: no disk, so the figure is
  numamem's own work), 2,000 interleaved iterations, each a Health/Check and an Allocate
  timed, then AddContainer and RemoveContainer untimed (they free the memory again).
  Beside it, its bounds: the same loop on the daemon with Allocate replayed
  (:mod:`bench.bounds`), once with only the call's atomic write and once with nothing.
* **AddContainer during / after compaction**: a MetaWriter AddContainer p50 with 10,000
  containers in the cache while a compaction of their 4-6 MB snapshot runs (right after
  16 writers pushed the journal past the snapshot's size), over the p50 of the same call
  once the compaction finished; several compactions, their samples together.
* **Admit, names on / off**: Admit of a new 3-container pod on a daemon with
  ``--podresources-socket`` (which keeps each pod's name beside its state) over the same
  on a daemon without, the two daemons admitting in turn on the same disk; beside them a
  third daemon with names on and ``--state-commit=journal`` (the DaemonSet's), and its
  Admit p50 over the replace mode's.

Each figure is printed with its floor and the issue's target.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2

from bench.harness import daemon, guaranteed, pct, shipped
from numamem.client import NumamemClient
from numamem.v1 import metacache_pb2 as mc
from tests.daemon import run_together

TMPFS = Path("/dev/shm")


def phase(r: Any, root: Path, iterations: int, compactions: int) -> None:
    print(
        "targets: Allocate / Health on tmpfs; AddContainer during compaction; Admit names",
        flush=True,
    )
    fast = Path(tempfile.mkdtemp(prefix="nmt-", dir=TMPFS if TMPFS.is_dir() else root))
    ratios = {}
    for bound in (None, "write", "noop"):
        with daemon(fast / f"alloc-{bound or 'real'}", bound=bound) as d:
            health, alloc = allocate_samples(d.socket, iterations)
        ratios[bound] = pct(alloc, 0.5) / pct(health, 0.5)
        if bound is None:
            r.latency(
                "target_health_tmpfs", "floor: Health/Check, same channel (tmpfs state)", health
            )
            r.latency("target_allocate_tmpfs", "Allocate, state on tmpfs (interleaved)", alloc)
    r.value("target_allocate_ratio", "  Allocate / Health p50, same channel, tmpfs",
            ratios[None], "", "(target <= 1.3)")  # fmt: skip
    r.value("target_allocate_bound_write", "  bound: Allocate replayed, only its atomic write (bench.bounds)",
            ratios["write"], "", "(no numamem work: a target below this cannot be met here)")  # fmt: skip
    r.value("target_allocate_bound_noop", "  bound: Allocate replayed, no write (bench.bounds)",
            ratios["noop"], "", "(the RPC with Allocate's messages)")  # fmt: skip

    during, after, snapshot = compaction_samples(root / "compaction", compactions)
    r.latency("target_add_during_compaction", f"AddContainer, 10,000 containers, during a compaction ({snapshot / 1e6:.1f} MB snapshot)", during)  # fmt: skip
    r.latency("target_add_after_compaction", "AddContainer, 10,000 containers, after it", after)
    r.value("target_compaction_ratio", "  AddContainer p50 during / after compaction",
            pct(during, 0.5) / pct(after, 0.5), "", "(target <= 1.5)")  # fmt: skip

    off, on, journal = admit_with_names(root, iterations // 4)
    r.latency("target_admit_names_off", "Admit, 3 containers, --podresources-socket off", off)
    r.latency("target_admit_names_on", "Admit, 3 containers, --podresources-socket on", on)
    r.value("target_admit_names_ratio", "  Admit p50, names on / off (interleaved)",
            pct(on, 0.5) / pct(off, 0.5), "", "(target <= 1.15)")  # fmt: skip
    r.latency("target_admit_journal", "Admit, 3 containers, names on, --state-commit=journal",
              journal)  # fmt: skip
    r.value("target_admit_journal_ratio", "  Admit p50, journal / replace (names on, interleaved)",
            pct(journal, 0.5) / pct(on, 0.5), "", "(one fsync for the state instead of three)")  # fmt: skip


def allocate_samples(socket: str, iterations: int) -> tuple[list[float], list[float]]:
    """(Health/Check, Allocate) latencies, interleaved on one channel: each iteration times a
    Check and an Allocate, then adds and removes the container untimed (which frees its
    memory again); 100 untimed iterations first."""
    client = NumamemClient(socket, timeout=30)
    health: list[float] = []
    alloc: list[float] = []
    for i in range(-100, iterations):
        pod = guaranteed("a0")
        t0 = time.perf_counter()
        client.health.Check(health_pb2.HealthCheckRequest(), timeout=30)
        t1 = time.perf_counter()
        client.allocate(pod, "c0")
        t2 = time.perf_counter()
        client.add_container(pod, "c0", f"id-{i}")
        client.remove_container(f"id-{i}")
        if i >= 0:
            health.append(t1 - t0)
            alloc.append(t2 - t1)
    client.close()
    return health, alloc


def _info(i: int, cpu: float) -> mc.ContainerInfo:
    return mc.ContainerInfo(
        pod_uid=f"fill-{i // 3}", container_name=f"c{i % 3}", qos_level="shared_cores",
        cpu_request=cpu, owner_pool_name="share", labels={"app": "bench"},
        annotations={"a": "x" * 200},
    )  # fmt: skip


def compaction_samples(root: Path, rounds: int) -> tuple[list[float], list[float], int]:
    """AddContainer latencies while compactions run, and after them (see the module)."""
    with daemon(root) as d:

        def fill(t: int, cpu: float) -> None:
            with NumamemClient(d.socket, timeout=60) as c:
                for i in range(t, 10_000, 16):
                    c.add_container_info(_info(i, cpu))

        run_together([threading.Thread(target=fill, args=(t, 2.0)) for t in range(16)])
        snap = Path(d.state_dir) / "sys_advisor_state"
        log = Path(d.state_dir) / "sys_advisor_state.journal"
        time.sleep(1)
        client = NumamemClient(d.socket, timeout=30)
        during: list[float] = []
        after: list[float] = []
        for rnd in range(rounds):
            stop = threading.Event()

            def burst(t: int, rnd: int = rnd, stop: threading.Event = stop) -> None:
                with NumamemClient(d.socket, timeout=60) as c:
                    k = t
                    while not stop.is_set():
                        c.add_container_info(_info(k % 10_000, 3.0 + rnd + k // 10_000))
                        k += 16

            threads = [threading.Thread(target=burst, args=(t,)) for t in range(16)]
            for t in threads:
                t.start()
            inode = log.stat().st_ino
            while log.stat().st_size <= snap.stat().st_size:  # the compactor wakes past it
                time.sleep(0.002)
            stop.set()
            for t in threads:
                t.join()
            n = 0
            while log.stat().st_ino == inode and n < 5000:  # until the journal is swapped
                t0 = time.perf_counter()
                client.add_container_info(
                    mc.ContainerInfo(pod_uid="probe", container_name=f"d{n % 50}", cpu_request=n % 7 + 1.0)
                )  # fmt: skip
                during.append(time.perf_counter() - t0)
                n += 1
            time.sleep(1.5)
            for i in range(100):
                t0 = time.perf_counter()
                client.add_container_info(
                    mc.ContainerInfo(pod_uid="probe", container_name=f"a{i % 50}", cpu_request=i % 7 + 1.0)
                )  # fmt: skip
                after.append(time.perf_counter() - t0)
        client.close()
        return during, after, snap.stat().st_size


def admit_with_names(root: Path, n: int) -> tuple[list[float], list[float], list[float]]:
    """Admit latencies of new 3-container pods, names off, names on, and names on with
    ``--state-commit=journal``, the three daemons in turn on the same disk."""
    pr_sock = str(root / "pr" / "pr.sock")
    with (
        daemon(root / "names-off", memory_gib=2048) as off,
        daemon(root / "names-on", memory_gib=2048, extra=["--podresources-socket", pr_sock]) as on,
        daemon(root / "journal", memory_gib=2048, extra=shipped(root / "journal")) as journal,
    ):  # fmt: skip
        clients = tuple(NumamemClient(d.socket, timeout=30) for d in (off, on, journal))
        samples: tuple[list[float], list[float], list[float]] = ([], [], [])
        for i in range(-20, n):
            for side, client in enumerate(clients):
                pod = guaranteed(f"n{side}-{i}", containers=3)
                t0 = time.perf_counter()
                client.admit(pod)
                if i >= 0:
                    samples[side].append(time.perf_counter() - t0)
        for client in clients:
            client.close()
        return samples
