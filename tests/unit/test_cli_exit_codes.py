"""One exit code per kind of outcome in every client command (issue 38; numamem.cli.main's
docstring): 2 for a command line that does not make sense, 1 for a failure or a request
that did nothing, 3 for a refusal as a normal answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from numamem.cli.main import main
from numamem.testing.server import InProcessServer
from tests.daemon import REPO

ONE = str(REPO / "examples" / "pod-resize.yaml")  # one container, db, 4Gi
TWO = str(REPO / "examples" / "pod-guaranteed.yaml")  # setup; app, sidecar-log

USAGE = [
    # A flag that names what the manifest does not have, or contradicts another: 2.
    (["hints", "-f", TWO, "--container", "nope"], "--container 'nope' is not in the pod (containers: setup, app, sidecar-log)"),
    (["hints", "-f", TWO, "--container", "app", "--pod-scope"], "--container and --pod-scope"),
    (["resize", "-f", ONE, "--container", "nope"], "--container 'nope' is not in the pod (containers: db)"),
    (["resize", "-f", ONE, "--container", "nope", "--memory", "1Gi"], "--container 'nope' is not in the pod"),
    (["resize", "-f", TWO], "the pod has 3 containers (setup, app, sidecar-log); give --container"),
    (["resize", "-f", TWO, "--memory", "1Gi"], "give --container"),
    (["resize", "-f", ONE, "--memory", "lots"], "--memory 'lots': "),
    (["explain", "--resize", "-f", ONE, "--container", "nope"], "--container 'nope' is not in the pod"),
    (["explain", "-f", ONE, "--container", "db"], "--container and --memory go with --resize"),
    (["release"], "give container ids, or --pod UID"),
    (["cache", "pools", "--pod", "u1"], "--pod selects containers; pools belong to no pod"),
    (["cache", "export", "--pod", "u1"], "--pod selects containers; export compacts"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "fragment"), USAGE, ids=[" ".join(a).replace(str(REPO) + "/", "") for a, _ in USAGE]
)
def test_usage_errors_exit_2_with_the_commands_usage(
    numamem_server: InProcessServer,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fragment: str,
) -> None:
    """Before: an unknown --container was 1 for hints and 2 for resize."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--socket", numamem_server.socket])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: numamem {argv[0]}")
    assert fragment in err


def test_a_resize_that_did_nothing_exits_1(
    numamem_server: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `resize` of a container the memory manager does not pin printed "not pinned"
    and exited 0, as if it had resized it."""
    sock = ["--socket", numamem_server.socket]
    assert main(["resize", "-f", ONE, "--memory", "6Gi", *sock]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("not pinned")
    assert captured.err.startswith("numamem: nothing resized: the memory manager holds no memory")
    assert main(["resize", "-f", ONE, "--memory", "6Gi", "--json", *sock]) == 1
    assert '"action": "RESIZE_NOT_PINNED"' in capsys.readouterr().out
    assert main(["explain", "--resize", "-f", ONE, "--memory", "6Gi", *sock]) == 1
    assert "not pinned" in capsys.readouterr().out
    # Pinned, then resized to the size it has: the state is what was asked, exit 0.
    assert main(["admit", "-f", ONE, *sock]) == 0
    capsys.readouterr()
    assert main(["resize", "-f", ONE, *sock]) == 0
    assert capsys.readouterr().out.startswith("unchanged")
    assert main(["explain", "--resize", "-f", ONE, "--memory", "6Gi", *sock]) == 0


def test_an_unreadable_manifest_exits_1_in_every_command(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input that is not a valid Pod is the input's fault, not the command line's: 1 with one
    line, alike in every command (resize said 2)."""
    missing = str(tmp_path / "missing.yaml")
    for argv in (
        ["hints", "-f", missing],
        ["explain", "-f", missing],
        ["explain", "--resize", "-f", missing],
        ["admit", "-f", missing],
        ["resize", "-f", missing],
        ["sync", "-f", missing],
    ):
        assert main([*argv, "--socket", numamem_server.socket]) == 1, argv
        assert (
            capsys.readouterr().err
            == f"numamem: {missing}: cannot read: No such file or directory\n"
        )
