"""What the ``numamem`` command prints, as an operator sees it in a fresh process (structlog
unconfigured until a command configures it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import run_once
from tests.unit.test_kubelet_config_file import KUBELET_CONFIG

pytestmark = pytest.mark.e2e

IGNORED = "kubelet configuration fields numamem does not use"


def test_nothing_is_printed_before_logging_is_configured(short_root: Path) -> None:
    """Issue 26: reading a KubeletConfiguration printed a console-format debug line before
    logging was configured, whatever --log-level/--log-format said, and into the output of
    `state verify` and `plan-reservations`."""
    config = short_root / "kubelet.yaml"
    config.write_text(KUBELET_CONFIG)
    too_long = str(short_root / ("d" * 100) / "n.sock")  # refused after the config is read
    quiet = run_once(
        ["serve", "--config", str(config), "--log-level", "warning", "--log-format", "json",
         "--socket", too_long]
    )  # fmt: skip
    assert quiet.returncode == 1
    assert quiet.stdout == ""
    [line] = quiet.stderr.splitlines()
    assert line.startswith("numamem: --socket ") and "unix socket paths are limited" in line
    # At debug level the line is logged, as JSON like every other.
    loud = run_once(
        ["serve", "--config", str(config), "--log-level", "debug", "--log-format", "json",
         "--socket", too_long]
    )  # fmt: skip
    assert loud.returncode == 1 and loud.stdout == ""
    events = [json.loads(x) for x in loud.stderr.splitlines() if not x.startswith("numamem: ")]
    [ignored] = [e for e in events if e["event"] == IGNORED]
    assert ignored["level"] == "debug" and "authentication" in ignored["fields"]
    sysfs = str(write_sysfs(short_root / "sys", standard_nodes(2)))
    for command in (
        ["state", "verify", "--state-dir", str(short_root / "s")],
        ["plan-reservations"],
    ):
        out = run_once([*command, "--config", str(config), "--sysfs-root", sysfs])
        assert out.stdout or "cannot read" in out.stderr, out.stderr  # the config was read
        assert IGNORED not in out.stdout + out.stderr, command
