"""The NRI plugin's options: flags, the runtime's config string, and the command line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from numamem.cli import nri as cli_nri
from numamem.cli.main import PRELAUNCHED_ENV, main
from numamem.config.model import DEFAULT_SOCKET
from numamem.errors import ConfigError
from numamem.nri import plugin
from numamem.nri.logsink import PRELAUNCHED_FILE, SyslogStream, default_log_file
from numamem.nri.options import (
    DEFAULT_DAEMON_SOCKET,
    PluginOptions,
    apply_config,
    apply_config_leniently,
)
from numamem.testing.nri_runtime import plugin_env

BASE = PluginOptions()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", BASE),
        ("   \n", BASE),
        ("# nothing\n", BASE),
        ("socket: /run/n.sock\n", PluginOptions(socket="/run/n.sock")),
        (
            "on-reject: unpinned\nlog-level: debug\nlog-format: console\n",
            PluginOptions(on_reject="unpinned", log_level="debug", log_format="console"),
        ),
    ],
)
def test_the_config_string_applies_over_the_flags(text: str, expected: PluginOptions) -> None:
    assert apply_config(BASE, text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("on-reject: maybe\n", "on-reject: 'maybe' is not one of fail, unpinned"),
        ("socket: ''\n", "socket: the daemon's socket path must not be empty"),
        ("sockets: /x\n", "unknown key 'sockets'; the keys are socket, on-reject, log-level"),
        ("- socket\n", "expected a mapping of socket, on-reject"),
        ("log-level: 3\n", "log-level: 3 is a int, expected a string"),
        ("socket: [unclosed\n", "not valid YAML at line 2"),
    ],
)
def test_a_bad_config_string_is_refused_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_config(BASE, text)
    assert message in str(caught.value)
    assert str(caught.value).startswith("the runtime's config: ")


def test_the_command_and_the_library_agree_on_their_defaults() -> None:
    assert cli_nri.DEFAULT_NRI_SOCKET == plugin.DEFAULT_SOCKET
    assert PRELAUNCHED_ENV == plugin.ENV_SOCKET
    assert DEFAULT_DAEMON_SOCKET == DEFAULT_SOCKET


@pytest.mark.parametrize(
    "argv",
    [
        ["nri", "--plugin-idx", "5"],
        ["nri", "--plugin-name", "a/b"],
        ["nri", "--on-reject", "maybe"],
        ["nri", "--log-level", "loud"],
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "usage: numamem nri" in capsys.readouterr().err


def test_prelaunched_with_a_bad_socket_variable_exits_1_saying_which() -> None:
    env = {"NRI_PLUGIN_NAME": "numamem", "NRI_PLUGIN_IDX": "10", "NRI_PLUGIN_SOCKET": "three"}
    env["NUMAMEM_NRI_LOG_FILE"] = "-"  # stderr (pre-launched: syslog or /var/log by default)
    out = subprocess.run(
        [sys.executable, "-m", "numamem"],
        env=env,  # all containerd gives a pre-launched plugin: no PATH
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    assert "numamem: NRI_PLUGIN_SOCKET='three' is not a file descriptor" in out.stderr


def test_prelaunched_without_arguments_is_the_nri_command() -> None:
    """containerd runs plugin_path/IDX-NAME with no arguments: a symlink to numamem."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        fd = theirs.fileno()
        os.set_inheritable(fd, True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "numamem"],
            # a bad index: refused once it is read; logged to stderr, not the default file
            env={**plugin_env("numamem", "aa", fd), "NUMAMEM_NRI_LOG_FILE": "-"},
            pass_fds=(fd,),
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "NRI plugin index 'aa' must be two digits" in err


@pytest.mark.parametrize(
    ("text", "applied", "wrong"),
    [
        ("on-reject: sometimes\n", {}, ["on-reject: 'sometimes' is not one of fail, unpinned"]),
        (
            "on-reject: unpinned\nlog-level: loud\nsocket: /x.sock\n",
            {"on_reject": "unpinned", "socket": "/x.sock"},
            ["log-level: 'loud' is not one of"],
        ),
        (
            "colour: blue\nlog-file: /tmp/x.log\n",
            {"log_file": "/tmp/x.log"},
            ["unknown key 'colour'"],
        ),
        ("[not, a, mapping]\n", {}, ["expected a mapping"]),
        ("on-reject: [\n", {}, ["not valid YAML at line"]),
    ],
)
def test_a_config_is_never_refused_its_bad_keys_are_left_out_naming_them(
    text: str, applied: dict[str, str], wrong: list[str]
) -> None:
    """containerd 1.7 exits when a pre-launched plugin fails to configure: the plugin applies
    what is right and reports the rest (naming the key, the value and the file)."""
    base = PluginOptions(socket="/flag.sock")
    options, errors = apply_config_leniently(base, text, "plugin_config_path/50-numamem.conf")
    assert options == replace(base, **applied)
    assert len(errors) == len(wrong)
    for err, part in zip(errors, wrong, strict=True):
        assert part in str(err) and "plugin_config_path/50-numamem.conf" in str(err)


def test_the_default_log_of_a_prelaunched_plugin_reaches_someone(tmp_path: Path) -> None:
    """containerd gives a pre-launched plugin /dev/null for stdio: syslog where the host has
    /dev/log, else a file under /var/log; an external plugin logs to stderr."""
    assert default_log_file(False, {}) == "-"
    assert default_log_file(True, {}, dev_log=str(tmp_path / "none")) == PRELAUNCHED_FILE
    (tmp_path / "log").touch()
    assert default_log_file(True, {}, dev_log=str(tmp_path / "log")) == "syslog"
    assert default_log_file(True, {"NUMAMEM_NRI_LOG_FILE": "/a.log"}) == "/a.log"


def test_syslog_lines_are_datagrams_with_the_plugins_tag(tmp_path: Path) -> None:
    path = str(tmp_path / "dev-log")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    with server:
        stream = SyslogStream(path)
        stream.write('{"event": "one"}\n{"event": ')
        stream.write('"two"}\n')
        stream.close()
        got = [server.recv(9000).decode() for _ in range(2)]
    assert [g.split(": ", 1)[1] for g in got] == ['{"event": "one"}', '{"event": "two"}']
    assert all(g.startswith("<30>numamem-nri[") for g in got)


def test_a_signal_while_the_main_thread_holds_the_plugins_lock_stops_it() -> None:
    """The main thread holds ``Plugin._lock`` briefly in ``_session``; a SIGTERM handler that
    took it there (``Plugin.stop``) would deadlock. The handler only writes to a pipe; a
    thread of its own stops the plugin once the lock is free."""
    import threading

    import structlog

    lock, stopped = threading.Lock(), threading.Event()

    def stop() -> None:
        with lock:
            stopped.set()

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        cli_nri.stop_on_signal(stop, structlog.get_logger())
        with lock:  # as _session holds Plugin._lock
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # the handler runs in this thread, between bytecodes
                pass
            assert not stopped.is_set()
        assert stopped.wait(10)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
