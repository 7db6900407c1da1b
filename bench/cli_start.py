"""``make bench`` phase ``cli``: what one ``numamem --version`` and one ``numamem health`` cost.

The DaemonSet's liveness probe runs ``numamem health`` every 10 s against a ``cpu: 50m``
request, so the figure is CPU time, not wall time: user + system time of the child process
(``os.wait4``'s resource usage), the median of ``runs`` runs. The floor is the same
interpreter's ``-c pass`` (its start and exit), measured in the same rounds: each round runs
the floor, ``import grpc`` (what any gRPC client pays, for context), ``numamem --version``
and ``numamem health`` against a live daemon (on a fake machine) in turn, so a busy machine
slows them alike. Targets (issue 38): ``--version`` at most 3x the floor, ``health`` at most
10x (``import grpc`` alone is about 8x).

Standalone: ``python -m bench.cli_start [RUNS]`` prints the figures.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs

TARGETS = {"version": 3.0, "health": 10.0}


def console_script() -> list[str]:
    """The ``numamem`` command of this interpreter's environment (what a probe runs), or
    ``python -m numamem`` where it has none."""
    script = Path(sys.executable).with_name("numamem")
    return [str(script)] if script.exists() else [sys.executable, "-m", "numamem"]


def child_cpu_seconds(argv: list[str], expect: int = 0) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output discarded); raises when
    it exits with another code than ``expect`` (a failing command measures nothing)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != expect:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {err.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def measure(socket: str, runs: int) -> dict[str, list[float]]:
    """CPU seconds per run of each command, the commands interleaved round by round."""
    numamem = console_script()
    commands = {
        "floor": [sys.executable, "-c", "pass"],
        "grpc": [sys.executable, "-c", "import grpc"],
        "version": [*numamem, "--version"],
        "health": [*numamem, "health", "--socket", socket],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(child_cpu_seconds(argv))
    return samples


def figures(samples: dict[str, list[float]]) -> dict[str, float]:
    """Median CPU ms of each command, and each one's ratio to the floor's median."""
    medians = {name: statistics.median(values) for name, values in samples.items()}
    out = {f"{name}_cpu_ms": value * 1e3 for name, value in medians.items()}
    for name in ("grpc", "version", "health"):
        out[f"{name}_vs_floor"] = medians[name] / medians["floor"]
    return out


def serving(root: Path) -> DaemonProcess:
    sysfs = write_sysfs(root / "sys", standard_nodes(2))
    cgroup = root / "no-cgroups"  # never sample this machine's cgroups
    cgroup.mkdir(parents=True, exist_ok=True)
    return DaemonProcess(
        root, ["--sysfs-root", str(sysfs), "--cgroup-root", str(cgroup), "--log-level", "warning"]
    ).start(timeout=60)


def phase(r: Any, root: Path, runs: int) -> None:
    """The figures into ``r`` (bench.harness's Report): floor, then each command and its ratio."""
    print(f"cli: CPU time of numamem --version and numamem health, {runs} runs", flush=True)
    daemon = serving(root / "cli")
    try:
        got = figures(measure(daemon.socket, runs))
    finally:
        daemon.stop(timeout=30)
    r.value("cli_floor_cpu_ms", "floor: python -c pass, CPU (user+sys, median)",
            got["floor_cpu_ms"], "ms")  # fmt: skip
    r.value("cli_grpc_cpu_ms", "  python -c 'import grpc', CPU", got["grpc_cpu_ms"], "ms",
            f"({got['grpc_vs_floor']:.1f}x floor: any gRPC client's start)")  # fmt: skip
    for name, label in (("version", "numamem --version"), ("health", "numamem health")):
        r.value(f"cli_{name}_cpu_ms", f"  {label}, CPU", got[f"{name}_cpu_ms"], "ms")
        r.value(f"cli_{name}_vs_floor", f"  {label} / floor", got[f"{name}_vs_floor"], "",
                f"(target <= {TARGETS[name]:g})")  # fmt: skip


class _Printed:
    """A stand-in for bench.harness's Report that prints (``python -m bench.cli_start``)."""

    def value(self, key: str, label: str, value: float, unit: str, note: str = "") -> None:
        print(f"  {label}: {value:.3f} {unit} {note}")


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 30
    with tempfile.TemporaryDirectory(prefix="nmcli-", dir="/tmp") as root:
        phase(_Printed(), Path(root), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
