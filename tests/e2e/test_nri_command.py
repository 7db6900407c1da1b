"""The ``numamem nri`` command as a runtime runs it: pre-launched (the environment containerd
gives, no PATH, options from the config string) and external (SIGTERM ends it), against the
scripted runtime and the real daemon on a fake 2-node machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from numamem.testing import nri_objects as obj
from numamem.testing.daemon import DaemonProcess
from numamem.testing.nri_runtime import ScriptedRuntime, plugin_env
from tests.daemon import STATIC_ARGS

pytestmark = pytest.mark.e2e

GI = 1 << 30


@pytest.fixture
def daemon(short_root: Path, daemon_factory: list[DaemonProcess]) -> DaemonProcess:
    d = DaemonProcess(short_root, list(STATIC_ARGS))
    daemon_factory.append(d)
    return d.start()


def guaranteed(sandbox: object, name: str, memory: int) -> object:
    return obj.container(sandbox, name, memory_limit=memory, cpu_milli=1000)  # type: ignore[arg-type]


def test_prelaunched_with_the_runtimes_environment_and_config(
    short_root: Path, daemon: DaemonProcess
) -> None:
    runtime = ScriptedRuntime()
    peer, theirs = runtime.prelaunch()
    fd = theirs.fileno()
    os.set_inheritable(fd, True)
    log = short_root / "plugin.log"
    log_file = short_root / "from-config.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "numamem"],  # a symlink to numamem: no arguments
            # all of it (no PATH) but where to log: by default /dev/log or /var/log
            env={**plugin_env("numamem", "10", fd), "NUMAMEM_NRI_LOG_FILE": str(log)},
            pass_fds=(fd,),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    theirs.close()
    try:
        assert peer.wait_registered(30).plugin_name == "numamem"
        # A bad key is never refused (containerd 1.7 exits when a pre-launched plugin fails
        # to configure): logged, naming it, its value and the file, and left out.
        peer.configure(f"on-reject: maybe\nlog-file: {log_file}\nlog-format: console\n")
        peer.configure(
            f"socket: {daemon.socket}\non-reject: unpinned\nlog-level: debug\n"
            f"log-file: {log_file}\n"
        )
        assert peer.synchronize([], []) == []
        sandbox = obj.pod("pre", "uid-pre")
        reply = peer.create_container(sandbox, guaranteed(sandbox, "app", GI))  # type: ignore[arg-type]
        assert reply is not None and reply.adjust.linux.resources.cpu.mems == "0"
        reply = peer.create_container(sandbox, guaranteed(sandbox, "huge", 64 * GI))  # type: ignore[arg-type]
        assert reply is not None and not reply.adjust.HasField("linux")  # unpinned, from the config
        peer.close()  # the runtime goes: a pre-launched plugin exits
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_file.read_text()
    assert "NRI container starts unpinned" in text
    assert "[debug" in text  # log-level from the config string
    assert "on-reject: 'maybe' is not one of fail, unpinned" in text
    assert "plugin_config_path/10-numamem.conf or numamem.conf" in text
    assert "NRI plugin starting" in log.read_text()  # before the config's log-file


def test_external_plugin_serves_until_sigterm(short_root: Path, daemon: DaemonProcess) -> None:
    runtime = ScriptedRuntime(short_root / "nri.sock").start()
    log = short_root / "plugin.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "numamem", "nri",
                "--nri-socket", str(runtime.socket_path),
                "--socket", daemon.socket,
                "--plugin-idx", "07",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    try:
        peer = runtime.accept(30)
        assert (peer.registration.plugin_name, peer.registration.plugin_idx) == ("numamem", "07")  # type: ignore[union-attr]
        peer.configure()
        peer.synchronize([], [])
        sandbox = obj.pod("ext", "uid-ext")
        reply = peer.create_container(sandbox, guaranteed(sandbox, "app", GI))  # type: ignore[arg-type]
        assert reply is not None and reply.adjust.linux.resources.cpu.mems == "0"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        runtime.stop()
    text = log.read_text()
    assert '"event": "NRI plugin stopped"' in text and '"admitted": 1' in text
