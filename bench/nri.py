"""``make bench`` phase ``nri``: what ``numamem nri`` costs the container runtime, side by side.

1. **The plugin's CreateContainer handling** as a runtime sees it: the scripted runtime
   (:mod:`numamem.testing.nri_runtime`, the plugin's own framing code with the roles swapped)
   sends CreateContainer for a new Guaranteed pod to the real ``numamem nri`` command, which
   admits it through the real daemon (a fake 2-node machine, durable checkpoints) and answers
   its ``cpuset.mems``. Beside it, sample by sample (so a busy machine slows them alike): the
   gRPC floor (``grpc.health.v1.Health/Check`` on the same daemon) and one ``Admit`` with the
   container's id made directly (the one durable write the plugin waits for). Reported:
   p50/p90 of each and the handling's p50 over the floor's.
2. **CRI CreateContainer+StartContainer through the real containerd 2.x**, with the plugin
   over without: three private containerd instances (:mod:`tests.containerd`) run at once,
   one with ``numamem nri`` (external) connected, one with a null plugin (answers at once:
   the cost of NRI itself) and one without; each round creates and removes one Guaranteed
   pod on each (each instance first in turn) the way the kubelet does, and each pod's
   CreateContainer+StartContainer is timed at the CRI client. Target: p50 ratio <= 1.05.
   The difference is broken down into NRI itself (the null plugin over none) and numamem's
   work (numamem nri over the null plugin), beside the plugin's own handling time per
   container (its debug log) and a direct Admit in the same rounds. Beside them, the CPU
   time per round of the daemon (the plugin's calls only), the plugin and the null plugin:
   on a small machine they take it from containerd, runc and the shims while a pod starts.
   Skipped, saying why, where the harness cannot run (not root, no cpuset cgroup controller,
   no Debian registry on a first download).

Standalone: ``python -m bench.nri [PODS]`` prints the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.harness import Daemon, daemon, pct, run_alone, shipped
from numamem.client import NumamemClient
from numamem.nri.handler import CallContext, Handler
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.daemon import STATIC_ARGS, DaemonProcess
from numamem.testing.nri_runtime import ScriptedRuntime
from numamem.v1 import memorymanager_pb2 as mm

TARGET = 1.05
"""CRI CreateContainer+StartContainer p50 with the plugin over without (issue 39)."""
WARMUP = 3
MIB = 1 << 20
REPO = Path(__file__).resolve().parent.parent
DIRECT = {"cpu": "250m", "memory": "64Mi"}
"""The requests and limits of the direct Admit's container: those of the plugin's."""


def plugin_command(nri_socket: Path, daemon_socket: str, level: str) -> list[str]:
    return [
        sys.executable, "-m", "numamem", "nri",
        "--nri-socket", str(nri_socket), "--socket", daemon_socket,
        "--log-level", level, "--log-format", "json",
    ]  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- 1. the plugin's handling against the gRPC floor -------------------------------------------


def _timed(into: list[float], call: Callable[[], object]) -> None:
    began = time.perf_counter()
    call()
    into.append(time.perf_counter() - began)


def scripted(root: Path, pods: int) -> dict[str, list[float]]:
    """Seconds per sample of ``floor``, ``admit`` and ``create`` (see the module docstring),
    on :func:`bench.harness.daemon`'s 2-node machine under ``root``."""
    with daemon(root, extra=shipped(root)) as d:
        return _scripted(d, root, pods)


def _scripted(d: Daemon, root: Path, pods: int) -> dict[str, list[float]]:
    runtime = ScriptedRuntime(root / "nri.sock", runtime_name="bench").start()
    with (root / "plugin.log").open("wb") as log:
        plugin = subprocess.Popen(
            plugin_command(runtime.socket_path, d.socket, "warning"),  # type: ignore[arg-type]
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    samples: dict[str, list[float]] = {"floor": [], "admit": [], "create": []}
    try:
        peer = runtime.accept(60)
        peer.configure()
        peer.synchronize([], [])
        with (
            NumamemClient(d.socket, timeout=10) as client,
            grpc.insecure_channel(f"unix://{d.socket}") as channel,
        ):
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest()
            for i in range(-WARMUP, pods):
                keep = samples if i >= 0 else {k: [] for k in samples}
                _timed(keep["floor"], lambda: health.Check(check, timeout=10))
                _direct_admit(client, i, keep["admit"])
                sandbox = obj.pod(f"p{i}", f"uid-{i}")
                container = obj.container(sandbox, "app", memory_limit=64 * MIB, cpu_milli=250)
                _timed(keep["create"], lambda: peer.create_container(sandbox, container))  # noqa: B023
                peer.remove_container(sandbox, container)
                peer.remove_pod_sandbox(sandbox)
    finally:
        _stop(plugin)
        runtime.stop()
    return samples


def _direct_admit(client: NumamemClient, i: int, into: list[float]) -> None:
    """The plugin's one daemon write, made directly: an Admit of round ``i``'s pod (what the
    plugin's container asks) with the container's id, its seconds appended to ``into``;
    then the pod released (untimed), so every round admits on the same state."""
    pod = mm.Pod(
        uid=f"direct-{i}", namespace="bench", name=f"direct-{i}",
        containers=[mm.Container(name="app", requests=DIRECT, limits=DIRECT)],
    )  # fmt: skip
    _timed(into, lambda: client.admit(pod, container_ids={"app": f"d-{i}"}))
    client.release_pod(pod.uid)


# --- 2. the real containerd, with and without the plugin ----------------------------------------


def through_containerd(root: Path, pods: int) -> dict[str, Any]:
    """CRI CreateContainer+StartContainer seconds on containerd ``with`` numamem nri, with a
    ``null`` plugin (answers every CreateContainer at once with the same ``cpuset.mems``: the
    cost of NRI itself) and ``without`` a plugin; the plugin's own handling seconds
    (``handling``), a direct Admit per round (``admit``) and the build; or ``skipped``."""
    from tests.containerd.available import build
    from tests.containerd.instance import Containerd
    from tests.containerd.kubelet import Kubelet, PodSpec, QOSClass

    dist = build("2.x")
    if isinstance(dist, str):
        return {"skipped": dist}
    root.mkdir(parents=True, exist_ok=True)
    served = DaemonProcess(
        root,
        [*STATIC_ARGS, *shipped(root), "--sysfs-root", "/sys", "--cgroup-root", "/sys/fs/cgroup",
         "--log-level", "warning"],
    ).start(timeout=60)  # fmt: skip
    names = ("with", "null", "without")
    instances = {name: Containerd(dist) for name in names}
    log = root / "plugin.log"
    plugins: list[subprocess.Popen[bytes]] = []
    samples: dict[str, Any] = {name: [] for name in (*names, "admit")}
    samples["build"] = dist.describe()
    try:
        for inst in instances.values():
            inst.start()
            inst.import_images()
        with log.open("wb") as err, (root / "null.log").open("wb") as null_err:
            nri_socket = instances["with"].layout.nri_socket
            plugins.append(
                subprocess.Popen(
                    plugin_command(nri_socket, served.socket, "debug"),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
            null = ["-m", "bench.nri", "--null-plugin", str(instances["null"].layout.nri_socket)]
            plugins.append(
                subprocess.Popen(
                    [sys.executable, *null], stdout=subprocess.DEVNULL, stderr=null_err, cwd=REPO
                )
            )
        for path in (log, root / "null.log"):
            _wait_registered(path, plugins)
        kubelets = {name: Kubelet(inst) for name, inst in instances.items()}
        assert served.proc is not None
        cpu = CpuMeter(
            {"daemon": served.proc.pid, "plugin": plugins[0].pid, "null": plugins[1].pid}
        )
        with NumamemClient(served.socket, timeout=10) as client:
            for i in range(-WARMUP, pods):
                if i == 0:
                    cpu.start()
                for k in range(len(names)):  # each instance first in turn
                    name = names[(i + k) % len(names)]
                    spec = PodSpec.of(QOSClass.GUARANTEED, f"bench-{name}-{i + WARMUP}", 64 * MIB)
                    running = kubelets[name].run_pod(spec)
                    if i >= 0:
                        samples[name].append(running.seconds["app"])
                    kubelets[name].remove_pod(running)
                with cpu.excluding("daemon"):  # the bench's own calls, not the plugin's
                    _direct_admit(client, i, samples["admit"] if i >= 0 else [])  # same round
        samples["cpu_ms_per_pod"] = cpu.per(pods)
    finally:
        for plugin in plugins:
            _stop(plugin)
        for inst in instances.values():
            inst.cleanup()
        served.stop(timeout=30)
    handled = [
        float(line["seconds"])
        for line in _json_lines(log)
        if line.get("event") == "NRI CreateContainer handled"
    ]
    samples["handling"] = handled[WARMUP:]
    return samples


class CpuMeter:
    """CPU seconds (user + system) the named processes use between :meth:`start` and
    :meth:`per`, but for what they do inside :meth:`excluding` (the kernel counts in ticks of
    10 ms: :data:`TICK_MS` over the rounds is the resolution)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.started: dict[str, float] = {}
        self.excluded = dict.fromkeys(pids, 0.0)

    def _cpu(self, name: str) -> float:
        return float(sum(self.procs[name].cpu_times()[:2]))

    def start(self) -> None:
        self.started = {name: self._cpu(name) for name in self.procs}

    @contextmanager
    def excluding(self, name: str) -> Iterator[None]:
        """What ``name`` uses inside the block is not counted (the bench's own calls)."""
        before = self._cpu(name)
        try:
            yield
        finally:
            self.excluded[name] += self._cpu(name) - before

    def per(self, rounds: int) -> dict[str, float]:
        """Milliseconds per round of each process since :meth:`start`."""
        return {
            name: (self._cpu(name) - self.started[name] - self.excluded[name]) * 1e3 / rounds
            for name in self.procs
        }


TICK_MS = 10.0
"""The CPU time counter's step (USER_HZ 100)."""


def _wait_registered(log: Path, plugins: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while "NRI plugin registered" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline or any(p.poll() is not None for p in plugins):
            raise RuntimeError(f"an NRI plugin did not register:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)


class NullHandler(Handler):
    """The null plugin: answers CreateContainer at once with ``cpuset.mems`` "0" (what
    numamem answers on a one-node machine), so containerd does the same work but numamem's."""

    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        response = api.CreateContainerResponse()
        response.adjust.linux.resources.cpu.mems = "0"
        return response


def null_plugin(nri_socket: str) -> int:
    """``python -m bench.nri --null-plugin SOCKET``: the null plugin until SIGTERM."""
    import signal

    from numamem import logging as nlog

    nlog.configure("info", "json", stream=sys.stderr, cache=False)
    plugin = Plugin(NullHandler(), name="null", idx="50", socket_path=nri_socket)
    signal.signal(signal.SIGTERM, lambda *_: plugin.stop())
    plugin.run()
    return 0


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


# --- the phase ---------------------------------------------------------------------------------


def breakdown(cri: dict[str, Any]) -> dict[str, float]:
    """Where the p50 difference with the plugin goes, in seconds: NRI itself (the null
    plugin over no plugin: containerd's call, the ttrpc round trip, a Python plugin's
    framing, applying the adjustment) and numamem's own work (numamem nri over the null
    plugin), beside the plugin's own handling (its log) and a direct Admit (same rounds)."""
    p50 = {name: pct(cri[name], 0.5) for name in ("with", "null", "without")}
    paired = [w - wo for w, wo in zip(cri["with"], cri["without"], strict=True)]
    return {
        "delta": p50["with"] - p50["without"],
        "paired": pct(paired, 0.5),
        "nri": p50["null"] - p50["without"],
        "numamem": p50["with"] - p50["null"],
        "handling": pct(cri["handling"], 0.5) if cri["handling"] else 0.0,
        "admit": pct(cri["admit"], 0.5),
    }


def phase(r: Any, root: Path, pods: int) -> None:
    """The figures into ``r`` (bench.harness's Report)."""
    print(f"nri: numamem nri's CreateContainer, {pods} pods per figure", flush=True)
    got = scripted(root / "nri-scripted", pods)
    floor = pct(got["floor"], 0.5)
    for key, label in (
        ("floor", "  floor of this phase: Health/Check on its daemon"),
        ("admit", "  Admit with the container's id (one durable write), direct"),
        ("create", "  CreateContainer through numamem nri (scripted runtime)"),
    ):
        p50, p90 = pct(got[key], 0.5), pct(got[key], 0.9)
        r.value(f"nri_{key}_p50_ms", f"{label}, p50", p50 * 1e3, "ms", f"p90 {p90 * 1e3:.3f} ms")
    r.value(
        "nri_create_vs_floor",
        "  numamem nri CreateContainer handling p50 / gRPC floor p50",
        pct(got["create"], 0.5) / floor,
        "",
    )
    cri = through_containerd(root / "nri-cri", pods)
    if "skipped" in cri:
        r.figures["nri_cri_skipped"] = cri["skipped"]
        print(f"  CRI through the real containerd: skipped: {cri['skipped']}", flush=True)
        return
    print(f"  {cri['build']}", flush=True)
    for name, label in (
        ("without", "without a plugin"),
        ("null", "with a plugin that does nothing"),
        ("with", "with numamem nri"),
    ):
        p50, p90 = pct(cri[name], 0.5), pct(cri[name], 0.9)
        r.value(f"nri_cri_{name}_p50_ms",
                f"  CRI CreateContainer+StartContainer, containerd 2.x {label}, p50",
                p50 * 1e3, "ms", f"p90 {p90 * 1e3:.3f} ms")  # fmt: skip
    for q, name in ((0.5, "p50"), (0.9, "p90")):
        ratio = pct(cri["with"], q) / pct(cri["without"], q)
        note = f"(target <= {TARGET:g})" if name == "p50" else ""
        r.value(f"nri_cri_ratio_{name}", f"  CRI with numamem nri / without, {name}", ratio, "",
                note)  # fmt: skip
    r.value("nri_cri_null_ratio_p50", "  CRI with a plugin that does nothing / without, p50",
            pct(cri["null"], 0.5) / pct(cri["without"], 0.5), "")  # fmt: skip
    parts = breakdown(cri)
    r.figures["nri_cri_breakdown_ms"] = {k: v * 1e3 for k, v in parts.items()}
    for key, label in (
        ("delta", "p50 difference with numamem nri"),
        ("paired", "median of the rounds' differences (the same round's pods)"),
        ("nri", "NRI itself: a plugin that does nothing over none"),
        ("numamem", "numamem's work: numamem nri over the null plugin"),
        ("handling", "  numamem nri's own handling (its log, p50)"),
        ("admit", "  the daemon's Admit with the id, direct, same rounds (p50)"),
    ):
        r.value(f"nri_cri_{key}_ms", f"    {label}", parts[key] * 1e3, "ms")
    for name, label in (
        ("daemon", "the daemon (the plugin's Admit, RemoveContainer and ReleasePod)"),
        (
            "plugin",
            "numamem nri, debug logging (CreateContainer, StopContainer, "
            "RemoveContainer, RemovePodSandbox)",
        ),
        ("null", "the plugin that does nothing (CreateContainer)"),
    ):
        r.value(
            f"nri_cri_cpu_{name}_ms",
            f"  CPU per round (one pod each): {label}",
            cri["cpu_ms_per_pod"][name],
            "ms",
            f"resolution {TICK_MS / pods:.2f} ms",
        )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--null-plugin"]:
        return null_plugin(argv[1])
    return run_alone(phase, int(argv[0]) if argv else 40, "nmnri-")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
