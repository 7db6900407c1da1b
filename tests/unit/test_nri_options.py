"""The NRI plugin's options: flags, the runtime's config string, and the command line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from numamem.cli import nri as cli_nri
from numamem.cli.main import PRELAUNCHED_ENV, main
from numamem.config.model import DEFAULT_SOCKET
from numamem.errors import ConfigError
from numamem.nri import plugin
from numamem.nri.options import DEFAULT_DAEMON_SOCKET, PluginOptions, apply_config
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
            env=plugin_env("numamem", "aa", fd),  # a bad index: refused once it is read
            pass_fds=(fd,),
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "NRI plugin index 'aa' must be two digits" in err
