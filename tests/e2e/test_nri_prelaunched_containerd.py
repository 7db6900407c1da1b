"""``numamem nri`` pre-launched by the REAL containerd (1.7.24 and 2.1.9): containerd starts
``plugin_path/50-numamem`` itself, with only ``NRI_PLUGIN_NAME``, ``NRI_PLUGIN_IDX`` and
``NRI_PLUGIN_SOCKET`` in its environment (no PATH) and ``plugin_config_path/50-numamem.conf``
as its config; a Guaranteed pod created through the CRI gets its ``cpuset.mems`` from it,
and the plugin exits when containerd stops."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import Kubelet
from tests.daemon import STATIC_ARGS
from tests.e2e.test_nri_containerd import (
    MIB,
    Numamem,
    assert_pinned_to_node_0,
    guaranteed,
    wait_until,
)

pytestmark = [pytest.mark.containerd, pytest.mark.e2e]


@pytest.fixture
def daemon() -> Iterator[DaemonProcess]:
    root = short_tmpdir()
    args = [
        *STATIC_ARGS,
        "--sysfs-root", "/sys",
        "--cgroup-root", "/sys/fs/cgroup",
        # As the DaemonSet's daemon: pod names are kept for podresources (and state).
        "--podresources-socket", str(root / "podresources.sock"),
    ]  # fmt: skip
    d = DaemonProcess(root, args).start()
    try:
        yield d
    finally:
        d.kill()


def install_plugin(containerd: Containerd, daemon: DaemonProcess, log: Path, pidfile: Path) -> None:
    """What an operator installs: an executable ``50-numamem`` in plugin_path (containerd
    gives it no PATH: it names this environment's python by its absolute path) and its
    options in plugin_config_path (a YAML mapping of numamem nri's long flags)."""
    plugin = containerd.layout.plugin_path / "50-numamem"
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo $$ > {shlex.quote(str(pidfile))}\n"
        # Until Configure brings the config's log-file, the plugin logs to its default (the
        # host's syslog): the environment names the test's file from the first line.
        f"NUMAMEM_NRI_LOG_FILE={shlex.quote(str(log))} "
        f"exec {shlex.quote(sys.executable)} -m numamem nri\n"
    )
    plugin.chmod(0o755)
    # containerd gives the plugin /dev/null for stdio: its log goes to the file the config
    # names (never the host's syslog or /var/log from a test).
    (containerd.layout.plugin_config_path / "50-numamem.conf").write_text(
        f"socket: {daemon.socket}\nlog-level: debug\nlog-format: console\nlog-file: {log}\n"
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_containerd_launches_the_plugin_which_pins_a_pod_and_exits_with_containerd(
    containerd_factory: Callable[..., Containerd], daemon: DaemonProcess
) -> None:
    containerd = containerd_factory(start=False)
    log, pidfile = containerd.base / "plugin.log", containerd.base / "plugin.pid"
    install_plugin(containerd, daemon, log, pidfile)
    containerd.start()
    containerd.import_images()

    def plugin_log() -> str:
        return log.read_text(errors="replace") if log.exists() else ""

    wait_until(lambda: "NRI plugin registered" in plugin_log(), "the plugin's registration", 30)
    # Logged with the defaults (JSON) before containerd's Configure brings the config file.
    started = json.loads(next(ln for ln in plugin_log().splitlines() if "plugin starting" in ln))
    assert (started["mode"], started["plugin"]) == ("pre-launched", "50-numamem")
    assert "NRI plugin configuration from the runtime" in plugin_log()
    assert daemon.socket in plugin_log()  # the config file's socket: the daemon it reached
    pid = int(pidfile.read_text())
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    names = {e.split(b"=", 1)[0] for e in environ if e}
    # What containerd gave it (the wrapper's /bin/sh adds its PWD, the wrapper itself the
    # log file's variable): no PATH.
    assert names - {b"PWD", b"NUMAMEM_NRI_LOG_FILE"} == {
        b"NRI_PLUGIN_IDX",
        b"NRI_PLUGIN_NAME",
        b"NRI_PLUGIN_SOCKET",
    }

    kubelet = Kubelet(containerd)
    pod = guaranteed("web", 64 * MIB)
    running = kubelet.run_pod(pod)
    with NumamemClient(daemon.socket, timeout=10) as client:
        nm = Numamem(daemon.root, daemon, client, containerd.layout.nri_socket)
        assert_pinned_to_node_0(kubelet, nm, pod.uid, running.containers["app"])
        entry = client.get_state().entries[pod.uid]
        assert (entry.namespace, entry.name, set(entry.containers)) == ("default", "web", {"app"})
        assert kubelet.remove_pod(running) == []
        assert dict(client.get_state().entries) == {}

    containerd.stop()  # the runtime goes: the plugin's connection closes and it exits
    wait_until(lambda: not alive(pid), "the plugin's exit after containerd's", 30)
    assert "Traceback" not in plugin_log()
    assert "NRI plugin stopped" in plugin_log()
    assert not os.path.exists(f"/proc/{pid}/environ") or not alive(pid)
