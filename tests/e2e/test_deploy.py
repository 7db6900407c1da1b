"""deploy/ against the real daemon: the example configuration serves, and the DaemonSet's exec
probe command (`numamem health`) tells SERVING from NOT_SERVING and from a dead daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from numamem.testing.daemon import DaemonProcess
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.deploy_manifests import daemonset_docs, deploy_file, numamem_container, probe_command

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


def test_example_config_serves_and_the_probe_tracks_health(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    sysfs = write_sysfs(short_root / "sys", standard_nodes(2))
    daemon = DaemonProcess(
        short_root, ["--sysfs-root", str(sysfs), "--config", str(deploy_file("numamem.yaml"))]
    )
    daemon_factory.append(daemon)
    daemon.start()
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
