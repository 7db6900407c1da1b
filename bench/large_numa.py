"""Admission on large NUMA machines (``make bench``, phase ``numa``), beside today's code.

Every figure is an in-process admission (``Manager.admit`` on an in-memory
store, so no disk) or a merge, timed as p50 over repetitions, and reported as a
ratio to the RPC floor of the same run. The same measurement runs on a
baseline revision (``--baseline``, default: the last commit before the large-
NUMA work) in a subprocess with that revision's ``src`` on ``sys.path``, with
a time limit: the baseline enumerates every mask and every permutation, so on
larger machines it does not finish.

Run alone: ``python -m bench.large_numa --case admit:16`` prints one JSON line
(used for the baseline subprocess).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GI = 1024**3
MI = 1024**2
CASES = (
    "admit:2",
    "admit:4",
    "admit:8",
    "admit:16",
    "admit:32",
    "admit:64",
    "providers:8",
    "gb200:restricted",
    "gb200:unrestricted",
    "hints:8",
    "hints:16",
    "hints:32",
    "hints:64",
)


def machine(cpu_nodes: int, memory_only: int = 0) -> Any:
    from numamem.topology.machine import HugePagePool, Machine, NUMANode

    count = cpu_nodes + memory_only
    nodes = []
    for i in range(count):
        cpu = i < cpu_nodes
        distances = tuple(
            10 if i == j else (20 if (i < cpu_nodes) == (j < cpu_nodes) else 40)
            for j in range(count)
        )
        nodes.append(
            NUMANode(
                i,
                (64 if cpu else 96) * GI + 1024 * 2 * MI,
                (HugePagePool(2048, 1024, 1024),),
                cpus=tuple(range(i * 4, i * 4 + 4)) if cpu else (),
                distances=distances,
            )
        )
    return Machine(tuple(nodes))


def pod(uid: str, containers: int = 3, memory: str = "2Gi") -> Any:
    from numamem.pod import Container, Pod
    from numamem.quantity import parse_quantity

    res = {
        "cpu": parse_quantity("1"),
        "memory": parse_quantity(memory),
        "hugepages-2Mi": parse_quantity("4Mi"),
    }
    return Pod(
        uid,
        "bench",
        uid,
        (),
        tuple(Container(f"c{i}", dict(res), dict(res)) for i in range(containers)),
    )


def flat_layout() -> tuple[Any, Any, Any]:
    """``Manager``, ``StaticPolicy`` and ``InMemoryStore`` where the baseline revision has them:
    memorymanager was one flat package of modules then (the names are built, so that moving
    a module never rewrites them)."""
    from importlib import import_module

    flat = "numamem.memorymanager."
    return (
        import_module(flat + "manager").Manager,
        import_module(flat + "policy_static").StaticPolicy,
        import_module(flat + "store").InMemoryStore,
    )


def layout() -> tuple[Any, Any, Any]:
    """``Manager``, ``StaticPolicy`` and ``InMemoryStore`` of the code under test: today's
    paths, or the flat layout in the baseline revision (:func:`run_baseline`)."""
    try:
        from numamem.memorymanager.manager.writes import Manager
        from numamem.memorymanager.policy.static import StaticPolicy
        from numamem.memorymanager.state.store import InMemoryStore
    except ImportError:
        return flat_layout()
    return Manager, StaticPolicy, InMemoryStore


def manager(m: Any, policy: str, options: dict[str, str]) -> Any:
    from numamem.topologymanager import policy as tm

    manager_class, static_class, store_class = layout()
    topology, _ = tm.new_policy(policy, m, options)
    info = topology.info
    restricted = getattr(topology.options, "restrict_to_cpu_numa_nodes", False)
    reserved = {0: {"memory": GI}}
    static = static_class(m, reserved, info.nodes) if restricted else static_class(m, reserved)
    mgr = manager_class(static, store_class(), topology, "container")
    mgr.start()
    return mgr


def p50(call: Callable[[int], object], reps: int, budget: float) -> tuple[float, int]:
    """The median seconds of ``call`` over ``reps`` runs (fewer when ``budget`` seconds pass)."""
    call(-1)  # warm caches (imports, first allocations)
    samples = []
    began = time.perf_counter()
    for i in range(reps):
        t = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - t)
        if time.perf_counter() - began > budget:
            break
    return statistics.median(samples), len(samples)


def run_case(case: str, reps: int) -> dict[str, Any]:
    kind, arg = case.split(":")
    options = {"max-allowable-numa-nodes": "64"}
    if kind == "admit":
        mgr = manager(machine(int(arg)), "restricted", options)
        for i in range(3):  # a few pods already pinned
            assert mgr.admit(pod(f"pinned-{i}")).result.admitted
        return _admit_loop(mgr, reps)
    if kind == "gb200":
        if arg == "restricted":
            options["restrict-to-cpu-numa-nodes"] = "true"
        mgr = manager(
            machine(2, 32), "restricted" if arg == "restricted" else "best-effort", options
        )
        for i in range(3):
            mgr.admit(pod(f"pinned-{i}"))
        return _admit_loop(mgr, reps)
    if kind == "providers":
        return _providers(int(arg), reps)
    if kind == "hints":
        mgr = manager(machine(int(arg)), "restricted", options)
        p = pod("hints", containers=1)
        seconds, n = p50(lambda _i: _listed(mgr.get_topology_hints(p, "c0")), reps, 20)
        return {"p50_ms": seconds * 1e3, "n": n}
    raise SystemExit(f"unknown case {case!r}")


def _listed(hints: Any) -> int:
    """What GetTopologyHints puts on the wire: the capped list (all of it in old code)."""
    total = 0
    seen: list[object] = []
    for lst in (hints or {}).values():
        if any(lst is other for other in seen):
            continue  # the same list for another type is copied, not listed again
        seen.append(lst)
        if hasattr(lst, "listed"):
            total += len(lst.listed(4096, 65536).hints)
        else:
            total += len(list(lst or ()))
    return total


def _admit_loop(mgr: Any, reps: int, others: Any = None) -> dict[str, Any]:
    """p50 of Admit alone; each admitted pod is released again (untimed)."""
    samples = []
    began = time.perf_counter()
    for i in range(-1, reps):
        p = pod(f"bench-{i}")
        t = time.perf_counter()
        outcome = mgr.admit(p) if others is None else mgr.admit(p, others)
        dt = time.perf_counter() - t
        assert outcome.result.admitted, outcome.result.message
        mgr.release_pod(p.uid)
        if i >= 0:
            samples.append(dt)
        if time.perf_counter() - began > 30:
            break
    return {"p50_ms": statistics.median(samples) * 1e3, "n": len(samples)}


def _providers(nodes: int, reps: int) -> dict[str, Any]:
    """4 other providers of 255 hints (every mask of 8 nodes) each, and the memory manager."""
    from numamem.topologymanager.policy import TopologyHint

    m = machine(nodes)
    mgr = manager(m, "restricted", {"max-allowable-numa-nodes": "64"})
    masks = [mask for mask in range(1, 1 << nodes)]
    hints = [TopologyHint(mask, mask.bit_count() == 1) for mask in masks]
    answers = [{f"res{k}": hints} for k in range(4)]
    try:
        from numamem.topologymanager.admission import GivenHints
    except ImportError:  # the baseline: no other providers in Admit; time its merge instead
        policy = mgr._topology_policy
        p = pod("providers")
        own = mgr.get_topology_hints(p, "c0")
        seconds, n = p50(lambda _i: policy.merge([own, *answers]), reps, 30)
        return {"p50_ms": seconds * 1e3, "n": n, "what": "merge only"}
    others = [GivenHints(f"p{k}", {f"c{i}": answers[k] for i in range(3)}) for k in range(4)]
    return {**_admit_loop(mgr, reps, others), "what": "admit, 3 containers"}


# --- the phase in make bench -------------------------------------------------------------

BASELINE = "fa170a2"
"""The last commit before the large-NUMA work (hints and merges by enumeration)."""
BASELINE_SECONDS = 30.0


def baseline_tree(rev: str, into: Path) -> Path | None:
    """A checkout of ``rev`` (git worktree) or None when git or the revision is unavailable."""
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(into), rev],
        capture_output=True,
        text=True,
        check=False,
    )
    return into if done.returncode == 0 else None


def drop_baseline(tree: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
        capture_output=True,
        check=False,
    )


def run_baseline(tree: Path, case: str, reps: int) -> str:
    """The baseline's p50 for ``case`` as text, or why there is none."""
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{repo}"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.large_numa", "--case", case, "--reps", str(reps)],
            capture_output=True,
            text=True,
            timeout=BASELINE_SECONDS,
            env=env,
            cwd=repo,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"did not finish in {BASELINE_SECONDS:.0f} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return f"refused: {last[:90]}"
    return f"{json.loads(done.stdout.splitlines()[-1])['p50_ms']:.3f} ms"


def phase(report: Any, root: Path, reps: int, baseline: str | None) -> None:
    """Every case in process, with the baseline beside it."""
    from numamem.logging import configure

    configure("warning")  # the in-process managers log every release at info
    print(
        f"large NUMA: admission, merge and hint listing (baseline {baseline or 'none'})", flush=True
    )
    tree = baseline_tree(baseline, root / "baseline") if baseline else None
    figures: dict[str, float] = {}
    try:
        for case in CASES:
            result = run_case(case, reps)
            figures[case] = result["p50_ms"]
            old = run_baseline(tree, case, max(reps // 10, 3)) if tree else "no baseline"
            report.value(
                f"numa_{case.replace(':', '_')}_ms",
                f"{case} in-process p50",
                result["p50_ms"],
                "ms",
                f"{result['p50_ms'] * 1e-3 / report.floor_p50:.2f}x floor; baseline {old}",
            )
    finally:
        if tree is not None:
            drop_baseline(tree)
    report.value(
        "numa_gb200_vs_2_nodes",
        "  GB200-like restricted / 2-node admit",
        figures["gb200:restricted"] / figures["admit:2"],
        "",
    )
    for n in (4, 16, 64):
        report.value(
            f"numa_admit_{n}_vs_2",
            f"  admit {n} nodes / admit 2 nodes",
            figures[f"admit:{n}"] / figures["admit:2"],
            "",
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=CASES)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    from numamem.logging import configure

    configure("warning")
    print(json.dumps(run_case(args.case, args.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
