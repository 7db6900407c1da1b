"""Admission off the easy path (``make bench``, phase ``hard``), as ratios to the RPC floor.

The ``numa`` phase admits 2Gi pods, which always fit one node: the merge then
takes the memory manager's first preferred hint. Here every pod needs 2, 4 or
8 nodes (memory of that many nodes less half of one, plus 2Mi hugepages: two
resource lists from the memory manager) on machines of 16, 32 and 64 nodes
whose distances are a real machine's shape (sockets of 4 nodes at 12, boards
of 16 at 20, 32 further). Each figure is the p50 of an in-process admission
(``Manager.admit`` on an in-memory store, no disk), for every combination of

* best-effort or restricted, with or without ``prefer-closest-numa-nodes``;
* no other provider, or 4 others: each offers every node as a non-preferred
  hint and, as preferred hints, aligned blocks of the needed size, each
  provider shifted by one node, so that no preferred mask is common to all
  and the merge searches the non-preferred ANDs (restricted then rejects the
  pod: the figure is that rejection).

Then, over gRPC on the real daemon: ReleasePod p50 idle, and while another
client keeps admitting an expensive pod (the 40-node prefer-closest pod of
issue 25, which needs 10 of 40 nodes and the branch and bound), and while
another keeps sending 1,024 hint lists of one hint (refused by validation).
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import daemon, guaranteed

GI = 1024**3
MI = 1024**2
MACHINES = (16, 32, 64)
NEEDS = (2, 4, 8)
COMBOS = tuple(
    (policy, closest, others)
    for others in (0, 4)
    for policy in ("best-effort", "restricted")
    for closest in (False, True)
)


def distance(a: int, b: int) -> int:
    if a == b:
        return 10
    if a // 4 == b // 4:
        return 12
    return 20 if a // 16 == b // 16 else 32


def machine(count: int) -> Any:
    from numamem.topology.machine import HugePagePool, Machine, NUMANode

    return Machine(
        tuple(
            NUMANode(
                i,
                64 * GI + 1024 * 2 * MI,
                (HugePagePool(2048, 1024, 1024),),
                cpus=tuple(range(i * 4, i * 4 + 4)),
                distances=tuple(distance(i, j) for j in range(count)),
            )
            for i in range(count)
        )
    )


def manager(m: Any, policy: str, closest: bool) -> Any:
    from numamem.memorymanager.manager.writes import Manager
    from numamem.memorymanager.policy.static import StaticPolicy
    from numamem.memorymanager.state.store import InMemoryStore
    from numamem.topologymanager import policy as tm

    options = {"max-allowable-numa-nodes": "64", "prefer-closest-numa-nodes": str(closest).lower()}
    topology, _ = tm.new_policy(policy, m, options)
    mgr = Manager(StaticPolicy(m, {0: {"memory": GI}}), InMemoryStore(), topology, "container")
    mgr.start()
    return mgr


def pod(uid: str, need: int) -> Any:
    from numamem.pod import Container, Pod
    from numamem.quantity import parse_quantity

    res = {
        "cpu": parse_quantity("1"),
        "memory": parse_quantity(f"{(need - 1) * 64 + 32}Gi"),
        "hugepages-2Mi": parse_quantity("4Mi"),
    }
    return Pod(uid, "bench", uid, (), (Container("c0", dict(res), dict(res)),))


def others(nodes: int, need: int) -> list[Any]:
    from numamem.topologymanager.admission import GivenHints
    from numamem.topologymanager.policy import TopologyHint

    every = (1 << nodes) - 1
    out = []
    for p in range(4):
        hints = [TopologyHint(every, False)]
        for start in range(p, nodes - need + 1, need):
            hints.append(TopologyHint(((1 << need) - 1) << start, True))
        out.append(GivenHints(f"device{p}", {"c0": {f"res{p}": hints}}))
    return out


def admit_p50(
    nodes: int, need: int, policy: str, closest: bool, n_others: int, reps: int
) -> dict[str, Any]:
    mgr = manager(machine(nodes), policy, closest)
    given = others(nodes, need) if n_others else []
    samples = []
    steps = 0
    admitted = False
    began = time.perf_counter()
    for i in range(-1, reps):
        p = pod(f"hard-{i}", need)
        t = time.perf_counter()
        outcome = mgr.admit(p, given)
        dt = time.perf_counter() - t
        admitted = outcome.result.admitted
        steps = outcome.steps
        if admitted:
            mgr.release_pod(p.uid)
        if i >= 0:
            samples.append(dt)
        if time.perf_counter() - began > 10:
            break
    return {
        "p50_ms": statistics.median(samples) * 1e3,
        "n": len(samples),
        "steps": steps,
        "admitted": admitted,
    }


def phase(report: Any, root: Path, reps: int) -> None:
    from numamem.logging import configure

    configure("warning")
    print("hard paths: admission of pods that need 2, 4 and 8 nodes (in process)", flush=True)
    floor = report.floor_p50
    table: dict[str, Any] = {}
    for nodes in MACHINES:
        for need in NEEDS:
            cells = []
            for policy, closest, n_others in COMBOS:
                result = admit_p50(nodes, need, policy, closest, n_others, reps)
                key = f"{nodes}:{need}:{policy}:{'closest' if closest else 'narrowest'}:{n_others}"
                table[key] = {**result, "ratio_to_floor": result["p50_ms"] * 1e-3 / floor}
                cells.append(
                    f"{result['p50_ms'] * 1e-3 / floor:6.2f}{'' if result['admitted'] else 'r'}"
                )
            print(f"  {nodes:2d} nodes, needs {need}: " + " ".join(cells), flush=True)
    report.figures["hard_admit"] = table
    header = " ".join(f"{p[:4]}/{'cl' if c else 'nw'}/{o}" for p, c, o in COMBOS)
    report.rows.append(("hard paths (x floor; r = rejected): " + header, "", "", ""))
    for nodes in MACHINES:
        for need in NEEDS:
            cells = []
            for policy, closest, n_others in COMBOS:
                key = f"{nodes}:{need}:{policy}:{'closest' if closest else 'narrowest'}:{n_others}"
                v = table[key]
                cells.append(f"{v['ratio_to_floor']:.2f}{'' if v['admitted'] else 'r'}")
            report.rows.append((f"  {nodes} nodes, needs {need}", " ".join(cells), "", ""))
    release_phase(report, root)


def forty_nodes() -> list[Any]:
    from numamem.testing.sysfs import FakeNode

    def d(a: int, b: int) -> int:
        if a == b:
            return 10
        return 11 if 12 <= a <= 21 and 12 <= b <= 21 else 40

    return [
        FakeNode(
            i,
            4 * 1024 * 1024 + (1024 * 1024 if i == 0 else 0),
            str(i),
            {},
            [d(i, j) for j in range(40)],
        )
        for i in range(40)
    ]


def random_forty_nodes() -> list[Any]:
    """40 nodes at random distances: the closest 10 of them is a long search."""
    import random

    from numamem.testing.sysfs import FakeNode

    rnd = random.Random(3)
    table: dict[tuple[int, int], int] = {}
    for a in range(40):
        for b in range(a + 1, 40):
            table[a, b] = rnd.choice([11, 12, 20, 21, 32])

    def d(a: int, b: int) -> int:
        return 10 if a == b else table[min(a, b), max(a, b)]

    return [FakeNode(i, 4 * 1024 * 1024 + (1024 * 1024 if i == 0 else 0), str(i), {}, [d(i, j) for j in range(40)]) for i in range(40)]  # fmt: skip


def _during(
    report: Any, root: Path, tag: str, nodes: list[Any], scenarios: list[tuple[str, str, Any]]
) -> None:
    """ReleasePod p50 on a durable daemon on ``nodes``, idle and while each scenario's Admit
    runs in a loop from another client."""
    from numamem.client import NumamemClient
    from numamem.testing.sysfs import write_sysfs

    base = root / f"release-{tag}"
    base.mkdir(parents=True)
    write_sysfs(base / "sys", nodes)
    extra = [
        "--topology-manager-policy=best-effort",
        "--topology-manager-policy-options=max-allowable-numa-nodes=64,prefer-closest-numa-nodes=true",
    ]
    with daemon(base, extra=extra) as d:
        client = NumamemClient(d.socket, timeout=30)

        def releases(n: int) -> list[float]:
            out = []
            for i in range(n):
                p = guaranteed(f"small-{i % 8}", memory="256Mi")
                client.admit(p)
                t = time.perf_counter()
                client.release_pod(p.uid)
                out.append(time.perf_counter() - t)
            return out

        releases(50)
        idle = releases(300)
        report.latency(f"release_idle_{tag}", f"ReleasePod, idle ({tag}, durable)", idle)
        for name, label, run in scenarios:
            stop = threading.Event()
            counts = {"admitted": 0, "refused": 0}
            durations: list[float] = []

            def load(
                run: Any = run,
                stop: threading.Event = stop,
                counts: dict[str, int] = counts,
                durations: list[float] = durations,
            ) -> None:
                with NumamemClient(d.socket, timeout=30) as c:
                    while not stop.is_set():
                        t = time.perf_counter()
                        try:
                            if run(c).admitted:
                                c.release_pod("big")
                            counts["admitted"] += 1
                        except Exception:
                            counts["refused"] += 1
                        durations.append(time.perf_counter() - t)

            worker = threading.Thread(target=load)
            worker.start()
            time.sleep(0.2)
            busy = releases(300)
            stop.set()
            worker.join(30)
            report.latency(f"release_busy_{name}", f"ReleasePod while {label}", busy)
            ratio = statistics.median(busy) / statistics.median(idle)
            report.value(f"release_busy_{name}_vs_idle", "  busy / idle ReleasePod p50", ratio, "",
                         f"{'(a control)' if name.startswith('control') else '(target <= 2)'}; "
                         f"{counts['admitted']} admitted, {counts['refused']} refused, "
                         f"Admit p50 {statistics.median(durations) * 1e3:.1f} ms")  # fmt: skip
        client.close()


def release_phase(report: Any, root: Path) -> None:
    """ReleasePod p50 idle and while another client keeps admitting an expensive pod: the
    40-node pod of issue 25 (admitted: its writes too), 1,024 hint lists (refused by
    validation), and on random distances a search that runs into the budget (no writes)."""
    from numamem.v1 import memorymanager_pb2 as mm

    print("ReleasePod while an expensive admission runs (gRPC, 40 nodes, durable)", flush=True)

    def hints(*masks: list[int]) -> mm.ProviderHints:
        return mm.ProviderHints(provider="cpu", containers={"app": mm.ResourceHints(resources={
            "cpu": mm.TopologyHints(hints=[mm.TopologyHint(numa_nodes=m, preferred=False) for m in masks]),
        })})  # fmt: skip

    def big(memory: str) -> mm.Pod:
        res = {"cpu": "1", "memory": memory}
        return mm.Pod(uid="big", namespace="bench", name="big", containers=[mm.Container(name="app", requests=res, limits=res)])  # fmt: skip

    lists = [
        mm.ProviderHints(provider=f"p{p}", containers={"app": mm.ResourceHints(resources={
            f"r{r}": mm.TopologyHints(hints=[mm.TopologyHint(numa_nodes=[3])]) for r in range(64)
        })})
        for p in range(16)
    ]  # fmt: skip
    closest = [hints([0, 1], list(range(22)))]

    class _Read:
        admitted = False  # nothing to release

    # The controls: the same other client with no search at all, writing (a 1Gi pod admitted
    # and released: the closest loop's writes without its search) or only reading. What
    # the expensive admissions add is their ratio over these; the controls' own ratio is
    # what any concurrent client costs ReleasePod on this machine.
    _during(report, root, "40", forty_nodes(), [
        ("closest", "the 40-node prefer-closest pod is admitted in a loop",
         lambda c: c.admit(big("38Gi"), other_providers=closest)),
        ("lists", "1,024 hint lists are sent in a loop",
         lambda c: c.admit(big("38Gi"), other_providers=lists)),
        ("control_writes", "control: a 1Gi pod admitted and released in a loop (no search)",
         lambda c: c.admit(big("1Gi"))),
        ("control_reads", "control: GetState in a loop (no search, no writes)",
         lambda c: (c.get_state(), _Read())[1]),
    ])  # fmt: skip
    search = [hints(list(range(40)), list(range(10)))]
    _during(report, root, "40-random", random_forty_nodes(), [
        ("search", "a search runs into the budget in a loop (no writes)",
         lambda c: c.admit(big("37Gi"), other_providers=search)),
    ])  # fmt: skip
    # In process: the 40-node pod, and 1,024 one-hint lists (which Admit's validation refuses)
    # merged by the manager itself.
    inprocess_phase(report)


def cluster_distance(a: int, b: int) -> int:
    """Issue 25's 40-node machine: nodes 12-21 mutually at 11, every other pair at 40."""
    if a == b:
        return 10
    return 11 if 12 <= a <= 21 and 12 <= b <= 21 else 40


def _p50_admit(mgr: Any, res: dict[str, Any], given: list[Any], tag: str) -> tuple[float, Any]:
    from numamem.pod import Container, Pod

    samples = []
    out = None
    for i in range(30):
        p = Pod(f"{tag}{i}", "ns", f"{tag}{i}", (), (Container("app", res, dict(res)),))
        t = time.perf_counter()
        out = mgr.admit(p, given)
        samples.append(time.perf_counter() - t)
        mgr.release_pod(p.uid)
    return statistics.median(samples), out


def inprocess_phase(report: Any) -> None:
    from numamem.memorymanager.manager.writes import Manager
    from numamem.memorymanager.policy.static import StaticPolicy
    from numamem.memorymanager.state.store import InMemoryStore
    from numamem.quantity import parse_quantity
    from numamem.topology.machine import Machine, NUMANode
    from numamem.topologymanager import policy as tm
    from numamem.topologymanager.admission import GivenHints
    from numamem.topologymanager.policy import TopologyHint

    def manager_on(m: Any, reserved: int, options: dict[str, str]) -> Any:
        mgr = Manager(StaticPolicy(m, {0: {"memory": reserved}}), InMemoryStore(), tm.new_policy("best-effort", m, options)[0])  # fmt: skip
        mgr.start()
        return mgr

    m40 = Machine(tuple(NUMANode(i, 4 * GI + (GI // 4 if i == 0 else 0), cpus=(i,), distances=tuple(cluster_distance(i, j) for j in range(40))) for i in range(40)))  # fmt: skip
    mgr = manager_on(m40, GI // 4, {"max-allowable-numa-nodes": "64", "prefer-closest-numa-nodes": "true"})  # fmt: skip
    res = {"cpu": parse_quantity("1"), "memory": parse_quantity("38Gi")}
    other = [GivenHints("cpu", {"app": {"cpu": [TopologyHint(0b11, False), TopologyHint((1 << 22) - 1, False)]}})]  # fmt: skip
    seconds, out = _p50_admit(mgr, res, other, "b")
    assert out.result.merged["app"].affinity == ((1 << 22) - 1) & ~((1 << 12) - 1)  # 12-21
    report.value("closest_40_inprocess_ms", "40-node prefer-closest pod, in process (target 25 ms)",
                 seconds * 1e3, "ms", f"{out.steps} search steps")  # fmt: skip
    m16 = Machine(tuple(NUMANode(i, 8 * GI, cpus=(i,), distances=tuple(10 if i == j else 20 for j in range(16))) for i in range(16)))  # fmt: skip
    mgr = manager_on(m16, GI, {"max-allowable-numa-nodes": "16"})
    small = {"cpu": parse_quantity("1"), "memory": parse_quantity("2Gi")}
    given = [
        GivenHints(f"p{p}", {"app": {f"r{r}": [TopologyHint(1 << 3 | (r * 2654435761 + p) & 0xFFFF, False)] for r in range(64)}})
        for p in range(16)
    ]  # fmt: skip
    seconds, out = _p50_admit(mgr, small, given, "l")
    report.value("lists_1024_inprocess_ms", "1,024 one-hint lists on 16 nodes, in process (target 100 ms)",
                 seconds * 1e3, "ms", f"{out.steps} search steps")  # fmt: skip
