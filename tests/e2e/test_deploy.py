"""deploy/ against the real daemon: the example configuration serves, and the DaemonSet's exec
probe command (`numamem health`) tells SERVING from NOT_SERVING and from a dead daemon; the
plugin container's command runs against the scripted runtime and its probe (`numamem
nri-status`) tells a registered plugin from one that is not, or is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from numamem.testing.daemon import DaemonProcess, fake_machine_args
from numamem.testing.nri_runtime import ScriptedRuntime
from numamem.testing.server import serve_in_process
from tests.deploy_manifests import (
    cli_args,
    daemonset_docs,
    deploy_file,
    exec_start_args,
    nri_container,
    numamem_container,
    probe_command,
    systemd_unit,
)

pytestmark = pytest.mark.e2e


def run_probe(command: list[str], socket: str) -> subprocess.CompletedProcess[str]:
    container_socket = "/run/numamem/numamem.sock"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return subprocess.run(
        [part.replace(container_socket, socket) for part in command],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def shipped_config_daemon(root: Path, factory: list[DaemonProcess]) -> DaemonProcess:
    """The daemon on deploy/numamem.yaml and the standard fake machine (two nodes), started."""
    daemon = DaemonProcess(root, ["--config", str(deploy_file("numamem.yaml"))])
    factory.append(daemon)
    return daemon.start()


def test_example_config_serves_and_the_probe_tracks_health(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    daemon = shipped_config_daemon(short_root, daemon_factory)
    container = numamem_container(daemonset_docs()["DaemonSet"])
    for probe in ("startupProbe", "livenessProbe"):
        result = run_probe(probe_command(container, probe), daemon.socket)
        assert result.returncode == 0, result.stderr
    assert daemon.stop() == 0
    result = run_probe(probe_command(container, "livenessProbe"), daemon.socket)
    assert result.returncode != 0  # no daemon: the probe fails


def test_the_probe_fails_on_not_serving_and_on_an_unknown_service() -> None:
    """`numamem health` exits 0 only for SERVING: NOT_SERVING (e.g. a checkpoint whose durability
    is unknown) and a service the daemon does not know fail the probe."""
    container = numamem_container(daemonset_docs()["DaemonSet"])
    command = probe_command(container, "livenessProbe")
    with serve_in_process() as server:
        ok = run_probe(command, server.socket)
        assert (ok.returncode, ok.stdout.strip()) == (0, "SERVING")
        server.daemon.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        down = run_probe(command, server.socket)
        assert (down.returncode, down.stdout.strip()) == (1, "NOT_SERVING")
        unknown = run_probe([*command, "--service=numamem.v1.Nothing"], server.socket)
        assert unknown.returncode == 1
        assert "numamem.v1.Nothing" in unknown.stderr


def unit_command(key: str, root: Path, config: Path) -> list[str]:
    """The unit's ``key`` (ExecStartPre, ExecStart) with this test's paths for the host's and
    the fake machine's (the unit's binary: this interpreter's numamem)."""
    argv = exec_start_args(systemd_unit(), key)
    paths = {
        "/etc/numamem/numamem.yaml": str(config),
        "/run/numamem/numamem.sock": str(root / "run" / "numamem.sock"),
        "/var/lib/numamem": str(root / "state"),
    }
    args = [paths.get(a, a) for a in argv[1:]]
    return [sys.executable, "-m", "numamem", *fake_machine_args(root / "machine", args)]


def test_the_units_exec_start_pre_passes_the_shipped_config_and_refuses_a_bad_one(
    short_root: Path,
) -> None:
    """ExecStartPre= as the unit has it: exit 0 on deploy/numamem.yaml, creating nothing;
    exit 1 with ExecStart's own refusal on a config whose reservations do not add up."""
    (short_root / "machine").mkdir()

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)

    good = run(unit_command("ExecStartPre", short_root, deploy_file("numamem.yaml")))
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("numamem: check passed: Static memory manager policy")
    assert sorted(p.name for p in short_root.iterdir()) == ["machine"]
    bad = short_root / "bad.yaml"
    bad.write_text(deploy_file("numamem.yaml").read_text().replace("1124Mi", "2Gi"))
    refused = run(unit_command("ExecStartPre", short_root, bad))
    assert refused.returncode == 1
    assert "determined by Node Allocatable feature" in refused.stderr
    started = run(unit_command("ExecStart", short_root, bad))
    assert (started.returncode, started.stderr) == (1, refused.stderr)


# --- the NRI plugin's container ----------------------------------------------------------------


def test_the_nri_containers_command_and_probes_against_a_real_plugin(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """The DaemonSet's `numamem nri` command line (its paths this test's), connected to the
    scripted runtime: the probe fails while the runtime is not there (saying why), passes
    once the plugin registered, fails when the runtime dropped it, passes again after its
    reconnection, and fails once the plugin is gone (its status socket removed)."""
    daemon = shipped_config_daemon(short_root, daemon_factory)
    plugin_container = nri_container(daemonset_docs()["DaemonSet"])
    args = cli_args(plugin_container["args"])
    status_socket = short_root / "nri-status.sock"
    runtime = ScriptedRuntime(short_root / "nri.sock", runtime_name="containerd")
    paths = {
        args.socket: daemon.socket,
        args.nri_socket: str(runtime.socket_path),
        args.status_socket: str(status_socket),
    }
    argv = [
        next((a.replace(k, v) for k, v in paths.items() if a.endswith("=" + k)), a)
        for a in plugin_container["args"]
    ]
    assert len(set(argv) - set(plugin_container["args"])) == 3  # each path replaced
    log = short_root / "nri.log"
    with log.open("wb") as err:
        plugin = subprocess.Popen(
            [sys.executable, "-m", "numamem", *argv], stdout=subprocess.DEVNULL, stderr=err
        )

    def probe(name: str = "livenessProbe") -> subprocess.CompletedProcess[str]:
        command = probe_command(plugin_container, name)
        return run_probe([c.replace(args.status_socket, str(status_socket)) for c in command], "")

    def wait_probe(returncode: int) -> subprocess.CompletedProcess[str]:
        """The probe until it exits ``returncode`` (a bound against hanging, 30 s)."""
        deadline = time.monotonic() + 30
        while (result := probe()).returncode != returncode:
            assert time.monotonic() < deadline, (result, log.read_text())
            time.sleep(0.1)
        return result

    try:
        down = wait_probe(1)  # nothing listens yet
        # Until the plugin serves its status "no numamem nri status on", then "not registered
        # yet" until its first connection attempt fails, then the plugin's own answer: why.
        deadline = time.monotonic() + 30
        while "NRI runtime not reachable on" not in (down := probe()).stderr:
            assert down.returncode == 1, down
            assert time.monotonic() < deadline, (down, log.read_text())
            time.sleep(0.1)
        assert json.loads(down.stdout)["registered"] is False

        runtime.start()
        runtime.accept().configure()
        for name in ("startupProbe", "livenessProbe"):
            up = probe(name)
            assert up.returncode == 0, up
            status = json.loads(up.stdout)
            assert (status["registered"], status["sessions"]) == (True, 1)
            assert status["runtime"] == "containerd v0"
            assert status["daemon_socket"] == daemon.socket

        runtime.stop()  # containerd restarts: external plugins are dropped ...
        dropped = wait_probe(1)
        assert "the runtime closed the connection" in dropped.stderr
        runtime.start()
        runtime.accept().configure()  # ... and it reconnects
        assert json.loads(wait_probe(0).stdout)["sessions"] == 2

        plugin.send_signal(signal.SIGTERM)
        assert plugin.wait(30) == 0
        gone = probe()
        assert gone.returncode == 1 and "no numamem nri status on" in gone.stderr
        assert not status_socket.exists()
    finally:
        if plugin.poll() is None:
            plugin.kill()
            plugin.wait()
        runtime.stop()
