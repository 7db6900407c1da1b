"""Crash consistency: concurrent clients against the real daemon, SIGKILL at random points.

Each client owns its own pods (memory manager) or containers (metacache) and
keeps a model of what the daemon acknowledged. When the daemon is killed, at
most one operation per client is in flight (its outcome unknown). After every
restart the harness checks that

* the daemon starts (no refusal: the files on disk always restore);
* every acknowledged operation is in the state;
* an unacknowledged operation is either fully applied or not at all (an
  admission is all-or-nothing over the pod's containers);
* the memory manager invariants hold, and nothing unknown appears;
* every pod with memory state is listed by name on the podresources socket (names are
  written before the state);
* both checkpoints verify and equal what the daemon serves.

With ``pod_level`` the daemon runs with the pod-level feature gates in the pod scope and
the memory clients admit pods that set pod-level resources (KEP-5526) too: such a pod is
one allocation whose entry and containers are written together, so after a kill its
pod-level entry is there exactly when its containers are, and it goes with its last one.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from numamem.api.convert import pod_entries_from_proto, state_from_proto
from numamem.checkpoint import kubelet
from numamem.client import NumamemClient, error_reason
from numamem.memorymanager.state.invariants import violations
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from numamem.v1 import podresources_pb2 as pr
from numamem.v1 import podresources_pb2_grpc as pr_grpc
from tests.daemon import STATIC_ARGS, read_cache_files

MI = 1024**2


@dataclass
class Report:
    operations: int = 0
    resizes: int = 0
    """Resizes acknowledged (refusals included)."""
    kills: int = 0
    restarts: int = 0
    pod_level_seen: int = 0
    """Pod-level entries seen at restarts (pods allocated as a whole that survived a kill)."""
    lost: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"operations={self.operations} resizes={self.resizes} kills={self.kills} "
            f"restarts={self.restarts} pod_level_seen={self.pod_level_seen} "
            f"lost={len(self.lost)} violations={len(self.violations)}"
        )


RESIZE_REFUSALS = ("RESIZE_DEFERRED", "RESIZE_INFEASIBLE")


def _pod(uid: str, sizes: list[int]) -> mm.Pod:
    containers = []
    for i, size in enumerate(sizes):
        res = {"cpu": "1", "memory": f"{size}Mi"}
        containers.append(mm.Container(name=f"c{i}", requests=res, limits=res))
    return mm.Pod(uid=uid, namespace="crash", name=f"name-{uid}", containers=containers)


def _pod_level_pod(uid: str, rng: random.Random) -> mm.Pod:
    """A Guaranteed pod by its pod-level resources: a sidecar and app containers, each with
    memory of its own (requests == limits) or sharing the pod's pool (no requests)."""
    own = 0

    def container(name: str, restart: str = "") -> mm.Container:
        nonlocal own
        if rng.random() < 0.5:
            return mm.Container(name=name, restart_policy=restart)
        size = rng.choice([128, 256, 512])
        own += size
        res = {"cpu": "1", "memory": f"{size}Mi"}
        return mm.Container(name=name, requests=res, limits=res, restart_policy=restart)

    inits = [container("side", "Always")] if rng.random() < 0.5 else []
    apps = [container(f"c{i}") for i in range(rng.randint(1, 3))]
    budget = {"cpu": "8", "memory": f"{own + rng.choice([128, 512])}Mi"}
    return mm.Pod(
        uid=uid, namespace="crash", name=f"name-{uid}", init_containers=inits, containers=apps,
        requests=budget, limits=budget,
    )  # fmt: skip


def _names(pod: mm.Pod) -> set[str]:
    return {c.name for c in [*pod.init_containers, *pod.containers]}


class MemoryClient(threading.Thread):
    """Admits pods, resizes and releases their containers; ``present`` and ``sizes`` are the
    acknowledged model."""

    def __init__(self, n: int, rng: random.Random, pod_level: bool = False) -> None:
        super().__init__(daemon=True)
        self.n = n
        self.rng = rng
        self.pod_level = pod_level
        self.present: dict[str, set[str]] = {}  # pod uid -> containers with memory, acknowledged
        self.pods: dict[str, mm.Pod] = {}
        self.sizes: dict[tuple[str, str], int] = {}  # acknowledged memory (Mi) per container
        self.resizing: int | None = None  # the size (Mi) of the resize in flight
        self.resized = 0  # resizes answered (done or refused)
        self.next_pod = 0
        self.in_flight: tuple[str, str, str] | None = None  # (kind, pod, container)
        self.ops = 0
        self.socket = ""
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with NumamemClient(self.socket, timeout=5) as client:
                while not self.stop.is_set():
                    self.step(client)
        except grpc.RpcError:
            pass  # the daemon died under us; in_flight stays set

    def step(self, client: NumamemClient) -> None:
        resizable = sorted(
            (uid, name) for uid, names in self.present.items() for name in names
            if (uid, name) in self.sizes
        )  # fmt: skip
        if resizable and self.rng.random() < 0.25:
            self.resize(client, *self.rng.choice(resizable))
        elif self.present and self.rng.random() < 0.45:
            uid = self.rng.choice(sorted(self.present))
            name = self.rng.choice(sorted(self.present[uid]))
            cid = f"{uid}/{name}"
            self.in_flight = ("add", uid, name)
            client.add_container(self.pods[uid], name, cid)
            self.in_flight = ("remove", uid, name)
            client.remove_container(cid)
            self.present[uid].discard(name)
            if not self.present[uid]:
                del self.present[uid]
        else:
            uid = f"m{self.n}-{self.next_pod}"
            self.next_pod += 1
            if self.pod_level and self.rng.random() < 0.5:
                pod = _pod_level_pod(uid, self.rng)
            else:
                pod = _pod(
                    uid,
                    [self.rng.choice([128, 256, 512, 1024]) for _ in range(self.rng.randint(1, 3))],
                )
            self.pods[uid] = pod
            self.in_flight = ("admit", uid, "")
            resp = client.admit(pod)
            if resp.admitted:
                self.present[uid] = _names(pod)
                if not pod.requests:  # resized: pods without pod-level resources
                    self.sizes.update(
                        ((uid, c.name), int(c.requests["memory"][:-2])) for c in pod.containers
                    )
        self.in_flight = None
        self.ops += 1

    def resize(self, client: NumamemClient, uid: str, name: str) -> None:
        """Resize one pinned container (grow, shrink, or to its size); a refusal changes nothing."""
        size = self.rng.choice([128, 256, 512, 1024, 2048, 4096, 12288])
        pod = mm.Pod()
        pod.CopyFrom(self.pods[uid])
        for c in pod.containers:
            if c.name == name:
                c.requests["memory"] = c.limits["memory"] = f"{size}Mi"
        self.in_flight, self.resizing = ("resize", uid, name), size
        try:
            client.resize(pod, name)
        except grpc.RpcError as err:
            if error_reason(err) not in RESIZE_REFUSALS:
                raise
        else:
            self.pods[uid] = pod
            self.sizes[(uid, name)] = size
        self.resized += 1


class CacheClient(threading.Thread):
    """Sets and deletes its own metacache containers; ``values`` is the acknowledged model."""

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.n = n
        self.rng = rng
        self.values: dict[str, float] = {}
        self.in_flight: tuple[str, float | None] | None = None
        self.counter = 0
        self.ops = 0
        self.socket = ""
        self.stop = threading.Event()

    @property
    def pod(self) -> str:
        return f"cache-{self.n}"

    def run(self) -> None:
        try:
            with NumamemClient(self.socket, timeout=5) as client:
                while not self.stop.is_set():
                    name = f"c{self.rng.randrange(5)}"
                    if name in self.values and self.rng.random() < 0.3:
                        self.in_flight = (name, None)
                        client.delete_container(self.pod, name)
                        del self.values[name]
                    else:
                        self.counter += 1
                        self.in_flight = (name, float(self.counter))
                        client.set_container_info(
                            mc.ContainerInfo(
                                pod_uid=self.pod, container_name=name, cpu_request=self.counter
                            )
                        )
                        self.values[name] = float(self.counter)
                    self.in_flight = None
                    self.ops += 1
        except grpc.RpcError:
            pass


class Harness:
    def __init__(
        self,
        root: Path,
        seed: int,
        memory_clients: int = 3,
        cache_clients: int = 8,
        *,
        pod_level: bool = False,
    ) -> None:
        self.root = root
        self.rng = random.Random(seed)
        write_sysfs(root / "sys", standard_nodes(2, memory_gib=8, hugepages={}))
        self.daemon = DaemonProcess(
            root,
            [
                "--sysfs-root",
                str(root / "sys"),
                *STATIC_ARGS,
                "--topology-manager-policy",
                "best-effort",
                "--log-level",
                "warning",
                "--metric-interval",
                "3600",
                # Compact every few dozen commits, so kills land during compactions too.
                "--metacache-compact-bytes",
                "4096",
                # Pod names are written before the state: every pod with state is named.
                "--podresources-socket",
                str(root / "run" / "podresources.sock"),
                *(
                    [
                        "--feature-gates",
                        "PodLevelResources=true,PodLevelResourceManagers=true",
                        "--topology-manager-scope",
                        "pod",
                    ]
                    if pod_level
                    else []
                ),
            ],
        )
        self.memory = [
            MemoryClient(n, random.Random(self.rng.random()), pod_level)
            for n in range(memory_clients)
        ]
        self.cache = [
            CacheClient(n, random.Random(self.rng.random())) for n in range(cache_clients)
        ]
        self.report = Report()

    def round(self, min_s: float = 0.2, max_s: float = 1.2) -> None:
        """Start, load, SIGKILL at a random point, restart, verify."""
        self.daemon.start()
        self.report.restarts += 1
        self.verify()
        threads: list[MemoryClient | CacheClient] = []
        for old in [*self.memory, *self.cache]:
            fresh = _restart_thread(old)
            fresh.socket = self.daemon.socket
            threads.append(fresh)
        self.memory = [t for t in threads if isinstance(t, MemoryClient)]
        self.cache = [t for t in threads if isinstance(t, CacheClient)]
        for t in threads:
            t.start()
        time.sleep(self.rng.uniform(min_s, max_s))
        self.daemon.stop(signal.SIGKILL)
        self.report.kills += 1
        for t in threads:
            t.stop.set()
            t.join(10)
        self.report.operations = sum(t.ops for t in threads)
        self.report.resizes = sum(t.resized for t in self.memory)

    def finish(self) -> Report:
        self.daemon.start()
        self.report.restarts += 1
        self.verify()
        self.daemon.stop()
        return self.report

    def verify(self) -> None:
        with NumamemClient(self.daemon.socket, timeout=10) as client:
            state = client.get_state()
            cache = {(i.pod_uid, i.container_name): i.cpu_request for i in client.list_containers()}
        with grpc.insecure_channel(f"unix://{self.root / 'run' / 'podresources.sock'}") as ch:
            listed = pr_grpc.PodResourcesListerStub(ch).List(
                pr.ListPodResourcesRequest(), timeout=10
            )
        named = {(p.namespace, p.name) for p in listed.pod_resources}
        for uid in state.entries:
            if ("crash", f"name-{uid}") not in named:
                self._problem("violation", f"pod {uid} has state but no name in podresources List")
        self._verify_memory(state)
        self._verify_cache(cache)

    def _problem(self, kind: str, text: str) -> None:
        (self.report.lost if kind == "lost" else self.report.violations).append(text)

    def _verify_memory(self, state: mm.GetStateResponse) -> None:
        served = {pod: set(entry.containers) for pod, entry in state.entries.items()}
        machine, entries = state_from_proto(state)
        pod_entries = pod_entries_from_proto(state)
        self.report.pod_level_seen += len(pod_entries)
        for problem in violations(machine, entries, pod_entries):
            self._problem("violation", f"invariant: {problem}")
        on_disk = kubelet.load((Path(self.daemon.state_dir) / "memory_manager_state").read_bytes())
        if {p: set(c) for p, c in on_disk.assignments.items()} != served:
            self._problem("violation", "memory_manager_state differs from what the daemon serves")
        if {p: list(b) for p, b in on_disk.pod_entries.items()} != pod_entries:
            self._problem("violation", "the pod-level entries on disk differ from the served ones")
        for client in self.memory:
            for uid in set(served) & set(client.pods):
                whole = bool(client.pods[uid].requests)
                if whole != (uid in pod_entries):
                    self._problem(
                        "violation",
                        f"pod {uid}: pod-level entry {uid in pod_entries}, expected {whole}",
                    )
        known: set[str] = set()
        for client in self.memory:
            known.update(client.pods)
            flight = client.in_flight
            for uid, containers in list(client.present.items()):
                got = served.get(uid, set())
                expected = set(containers)
                removed_in_flight = flight and flight[1] == uid and flight[0] == "remove"
                if removed_in_flight and got == expected - {flight[2]}:  # type: ignore[index]
                    expected = got  # the removal made it to disk before the kill
                if got != expected:
                    self._problem(
                        "lost",
                        f"pod {uid}: acknowledged containers {sorted(expected)}, served {sorted(got)}",
                    )
            if flight and flight[0] == "admit":
                uid = flight[1]
                got = served.get(uid, set())
                full = _names(client.pods[uid])
                if got and got != full:
                    self._problem(
                        "violation",
                        f"pod {uid}: half-applied admission {sorted(got)} of {sorted(full)}",
                    )
                if got == full:
                    client.present[uid] = full  # applied but not acknowledged: adopt it
            if flight and flight[0] == "remove" and flight[1] in client.present:
                uid, name = flight[1], flight[2]
                if name not in served.get(uid, set()):
                    client.present[uid].discard(name)
                    if not client.present[uid]:
                        del client.present[uid]
            self._verify_sizes(client, state)
            client.in_flight = None
        for uid in served:
            if uid not in known:
                self._problem("violation", f"unknown pod {uid} in the state")

    def _verify_sizes(self, client: MemoryClient, state: mm.GetStateResponse) -> None:
        """Every acknowledged container has its acknowledged size; a resize in flight at the
        kill is there in full or not at all."""
        flight = client.in_flight
        for (uid, name), acknowledged in list(client.sizes.items()):
            if name not in client.present.get(uid, set()):
                continue
            entry = state.entries.get(uid)
            blocks = entry.containers[name].blocks if entry and name in entry.containers else []
            served = [b.size // MI for b in blocks if b.type == "memory"]
            size = acknowledged
            in_flight = flight is not None and flight[0] == "resize" and flight[1:] == (uid, name)
            if in_flight and served == [client.resizing]:  # applied, not acknowledged: adopt it
                client.sizes[(uid, name)] = size = served[0]
                for c in client.pods[uid].containers:
                    if c.name == name:
                        c.requests["memory"] = c.limits["memory"] = f"{size}Mi"
            if served != [size]:
                self._problem(
                    "lost", f"pod {uid} container {name}: acknowledged {size}Mi, served {served}"
                )

    def _verify_cache(self, served: dict[tuple[str, str], float]) -> None:
        on_disk = read_cache_files(Path(self.daemon.state_dir))
        disk = {(p, c): i.cpu_request for p, ctrs in on_disk.pods.items() for c, i in ctrs.items()}
        if disk != served:
            self._problem("violation", "sys_advisor_state differs from what the daemon serves")
        for client in self.cache:
            mine = {c: v for (p, c), v in served.items() if p == client.pod}
            expected = dict(client.values)
            if client.in_flight is not None:
                name, value = client.in_flight
                alternative = dict(expected)
                if value is None:
                    alternative.pop(name, None)
                else:
                    alternative[name] = value
                if mine == alternative:
                    expected = alternative
            if mine != expected:
                self._problem("lost", f"{client.pod}: acknowledged {expected}, served {mine}")
            client.values = mine
            client.in_flight = None


def _restart_thread(old: MemoryClient | CacheClient) -> MemoryClient | CacheClient:
    """A thread can run once: carry the model over to a fresh one."""
    fresh: MemoryClient | CacheClient
    if isinstance(old, MemoryClient):
        fresh = MemoryClient(old.n, old.rng, old.pod_level)
        fresh.present, fresh.pods, fresh.next_pod, fresh.ops = (
            old.present,
            old.pods,
            old.next_pod,
            old.ops,
        )
        fresh.sizes, fresh.resized = old.sizes, old.resized
    else:
        fresh = CacheClient(old.n, old.rng)
        fresh.values, fresh.counter, fresh.ops = old.values, old.counter, old.ops
    return fresh


def run(root: Path, seed: int, rounds: int, *, pod_level: bool = False) -> Report:
    harness = Harness(root, seed, pod_level=pod_level)
    try:
        for _ in range(rounds):
            harness.round()
        return harness.finish()
    finally:
        harness.daemon.kill()
