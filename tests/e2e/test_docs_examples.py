"""The commands of README.md and docs/, run against the real daemon as `make run` configures it (on a fake machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import REPO, STATIC_ARGS, grpcurl_bin
from tests.docgen import DOCS, README
from tests.docgen.examples import examples, quoted_output, section, shell_blocks

pytestmark = pytest.mark.e2e


def start(root: Path, factory: list[DaemonProcess]) -> DaemonProcess:
    sysfs = write_sysfs(root / "sys", standard_nodes(2))
    daemon = DaemonProcess(root, ["--sysfs-root", str(sysfs), *STATIC_ARGS])
    factory.append(daemon)
    return daemon.start()


def test_grpc_api_examples_run_with_the_documented_exit_codes(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    daemon = start(short_root, daemon_factory)
    [block] = shell_blocks(section(DOCS / "api.md", "A call of every RPC"))
    script = ["set -u"]
    expected = []
    for index, example in enumerate(examples(block)):
        command = example.command.replace(".venv/bin/grpcurl", grpcurl_bin())
        if command.startswith("S="):
            command = f"S={daemon.socket}"
        script.append(f'{{ {command}\n}} >"$OUT/{index}" 2>&1; echo "{index} $?"')
        expected.append(f"{index} {example.expected_exit}")
    out_dir = short_root / "out"
    out_dir.mkdir()
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        env={"OUT": str(out_dir), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        timeout=120,
        check=False,
    )
    got = result.stdout.split("\n")[:-1]
    assert len(got) == len(expected), f"the script stopped early: {result.stderr}"
    failures = [
        f"{line!r} expected {want!r}: {(out_dir / line.split()[0]).read_text()[-400:]}"
        for line, want in zip(got, expected, strict=True)
        if line != want
    ]
    assert not failures, "\n".join(failures)
    # What a comment says the output holds, it holds (issue 38: `"allocated": false`, which
    # grpcurl leaves out).
    said = []
    assert any(quoted_output(e.comment) != (False, []) for e in examples(block))  # not vacuous
    for index, example in enumerate(examples(block)):
        empty, members = quoted_output(example.comment)
        text = (out_dir / str(index)).read_text()
        flat = " ".join(text.split())
        if empty and json.loads(text) != {}:
            said.append(f"{example.command!r}: the comment says {{}}, the output is {text!r}")
        said += [
            f"{example.command!r}: the comment quotes {m}, the output is {text[:200]!r}"
            for m in members
            if m not in flat
        ]
    assert not said, "\n".join(said)
    assert daemon.stop() == 0


def test_the_readmes_explain_output_is_what_the_cli_prints(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    daemon = start(short_root, daemon_factory)
    walk = section(README, "Five minutes with it")
    documented = walk.split("```\ntopology manager:", 1)[1].split("```", 1)[0]
    argv = [sys.executable, "-m", "numamem", "explain", "-f", "examples/pod-too-big.yaml"]
    out = subprocess.run(
        [*argv, "--socket", daemon.socket],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 3, out.stderr
    assert out.stdout == "topology manager:" + documented
