"""deploy/ against the real daemon: the example configuration serves, and the DaemonSet's exec
probe command tells SERVING from a dead daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import DaemonProcess
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


def test_probe_fails_on_not_serving() -> None:
    """grpcurl exits 0 for a NOT_SERVING answer; the probe's status check must catch it."""
    container = numamem_container(daemonset_docs()["DaemonSet"])
    command = probe_command(container, "livenessProbe")
    script = command[-1]
    assert "|" in script, "the probe must check the status grpcurl prints"
    check = script.split("|", 1)[1]
    for answer, expected in (("SERVING", 0), ("NOT_SERVING", 1), ("SERVICE_UNKNOWN", 1)):
        grpcurl_output = f'{{\n  "status": "{answer}"\n}}'
        result = subprocess.run(
            [*command[:-1], f"printf '%s\\n' '{grpcurl_output}' |{check}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == expected, answer
