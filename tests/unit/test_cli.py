"""The ``numamem`` command line as a whole: every command is listed, documented and consistent."""

from __future__ import annotations

import argparse

import pytest

from numamem.cli.main import build_parser, main

CLIENT_COMMANDS = ["topology", "state", "hints", "explain", "admit", "release", "cache"]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_help_lists_every_command_with_a_one_line_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ["serve", *CLIENT_COMMANDS]:
        assert any(
            line.split()[:1] == [name] and len(line.split()) > 1 for line in out.splitlines()
        ), name
    assert "Exit codes: 0 success, 1 failure" in out
    assert set(_subparsers()) == {"serve", *CLIENT_COMMANDS}


@pytest.mark.parametrize("name", CLIENT_COMMANDS)
def test_every_client_command_has_socket_timeout_and_json(name: str) -> None:
    options = {opt for a in _subparsers()[name]._actions for opt in a.option_strings}
    assert {"--socket", "--timeout", "--json"} <= options


def test_usage_error_is_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain"])  # -f is required
    assert exit_info.value.code == 2
    assert "the following arguments are required: -f/--file" in capsys.readouterr().err


def test_unreachable_daemon_is_one_line_and_exit_code_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["topology", "--socket", "/nonexistent/numamem.sock", "--timeout", "2"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "numamem: UNAVAILABLE: no daemon socket at /nonexistent/numamem.sock (is numamem running? --socket)"
    ]
