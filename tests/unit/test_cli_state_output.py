"""What ``numamem state`` and ``state verify`` print for an operator (issue 38): a refusal as
readable lines, and the shared pool of a pod allocated as a whole marked, with a legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from numamem.cli.main import main
from numamem.cli.state_table import LEGEND, POD_LEVEL, SHARED
from numamem.config.model import FeatureGates
from numamem.testing.server import serve_in_process
from tests.daemon import REPO
from tests.unit.test_cli_state import machine_flags, written_state


def test_a_refused_verify_prints_the_refusal_as_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: the migration pre-flight printed the daemon's multi-line refusal as one line
    with literal backslash-n (each line of it went through the one-line guard)."""
    state = tmp_path / "state"
    written_state(state)
    off = [
        *machine_flags(tmp_path, 8 * 1024 * 1024 + 640 * 1024),
        "--memory-manager-policy-options",
        "memory-drift-tolerance=off",
    ]
    assert main(["state", "verify", "--state-dir", str(state), *off]) == 1
    out = capsys.readouterr().out
    assert "\\n" not in out
    lines = out.splitlines()
    assert "[memorymanager] the expected machine state is different from the real one" in lines
    assert any(line.startswith("  node 0 memory TotalMemSize: stored 8Gi") for line in lines)
    assert any(line.startswith("  fix: --memory-manager-policy-options") for line in lines)


def test_a_non_printable_character_in_a_line_is_still_escaped() -> None:
    from numamem.cli.common import guarded_lines

    assert guarded_lines("a\nb\x1b[2J", indent="  ") == "  a\n  b\\x1b[2J"


def _blocks(out: str) -> list[list[str]]:
    """The rows of the blocks table (after its POD header), split on whitespace."""
    table = out.split("\nPOD ", 1)[1].splitlines()[1:]
    return [line.split() for line in table if line and line != LEGEND]


def test_state_marks_the_shared_pool_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: every container sharing the pod's pool showed the pool's size unmarked, so
    the SIZE column summed to more than RESERVED. The shared rows carry a mark, the rows of
    containers with memory of their own do not, and a legend line says what the marks mean;
    live (GetState's isolation) and offline (`state show`, the container map's record)."""
    manifest = str(REPO / "examples" / "pod-level.yaml")
    with serve_in_process(
        topology_manager_policy="best-effort",
        topology_manager_scope="pod",
        feature_gates=FeatureGates(True, True),
    ) as server:
        sock = ["--socket", server.socket]
        assert main(["admit", "-f", manifest, *sock]) == 0
        capsys.readouterr()
        assert main(["state", *sock]) == 0
        live = capsys.readouterr().out
        assert main(["state", "show", "--state-dir", str(server.state_dir)]) == 0
        offline = capsys.readouterr().out
    uid = "6f1c2a9e-0000-4000-8000-0000000005e5"
    for out in (live, offline):
        assert LEGEND in out.splitlines()
        rows = {row[1]: row[4:] for row in _blocks(out) if row[0] == uid}
        assert rows == {
            POD_LEVEL: ["8Gi"],
            "db": ["4Gi"],
            "log-agent": ["512Mi"],
            "exporter": ["3.50Gi", *SHARED.split()],
            "mesh": ["3.50Gi", *SHARED.split()],
        }, out


def test_no_legend_without_a_pod_allocated_as_a_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written_state(tmp_path)
    assert main(["state", "show", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert LEGEND not in out and SHARED not in out
    assert ["pod-1", "app", "memory", "0", "2Gi"] in _blocks(out)
