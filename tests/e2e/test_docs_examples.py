"""The commands of README.md and docs/, run against the real daemon as `make run` configures it
(on a fake 2-node machine): every block marked ``<!-- run: make-run [FLAGS] -->``, a page's
blocks in order against one daemon of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import REPO, STATIC_ARGS, grpcurl_bin
from tests.docgen import README, pages
from tests.docgen.examples import Fenced, examples, fenced_blocks, quoted_output, section

pytestmark = pytest.mark.e2e

RUN_PAGES = [p for p in pages() if any(b.run for b in fenced_blocks(p))]


def start(root: Path, factory: list[DaemonProcess], flags: Sequence[str] = ()) -> DaemonProcess:
    sysfs = write_sysfs(root / "sys", standard_nodes(2))
    daemon = DaemonProcess(root, ["--sysfs-root", str(sysfs), *STATIC_ARGS, *flags])
    factory.append(daemon)
    return daemon.start()


def localize(text: str, daemon: DaemonProcess, files: Path) -> str:
    """A documented command as the test runs it: the daemon's socket for make run's, its
    files for the rest of ``.numamem/``, the venv's programs by this interpreter."""
    text = text.replace(".numamem/numamem.sock", daemon.socket)
    text = text.replace(
        "curl -s localhost:9441/", f"curl -s --unix-socket {files}/metrics.sock http://localhost/"
    )
    text = text.replace(".numamem/", f"{files}/")
    text = text.replace(".venv/bin/grpcurl", grpcurl_bin())
    return text.replace(".venv/bin/numamem", f"{sys.executable} -m numamem")


def run_shell(
    page: Path, block: Fenced, daemon: DaemonProcess, files: Path, out_dir: Path
) -> list[str]:
    """Run each command of ``block`` (one a logical line: :func:`examples`), each with its
    own exit status checked; what went other than documented."""
    steps = examples(block.body, page.name, block.line + 1)
    if not steps:
        return [f"line {block.line}: a run block with no command"]
    script = ["set -u"]
    for index, example in enumerate(steps):
        command = localize(example.command, daemon, files)
        script.append(f'{{ {command}\n}} >"$OUT/{index}" 2>&1; echo "{index} $?"')
    out_dir.mkdir()
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        env={"OUT": str(out_dir), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        timeout=180,
        check=False,
    )
    got = result.stdout.split("\n")[:-1]
    if len(got) != len(steps):
        return [f"line {block.line}: the script stopped early: {result.stderr}"]
    problems = []
    for index, (line, example) in enumerate(zip(got, steps, strict=True)):
        text = (out_dir / str(index)).read_text()
        if line != f"{index} {example.expected_exit}":
            problems.append(f"{example.command!r}: exit {line.split()[1]}: {text[-400:]}")
            continue
        # What a comment says the output holds, it holds (issue 38: `"allocated": false`).
        empty, members = quoted_output(example.comment)
        flat = " ".join(text.split())
        if empty and json.loads(text) != {}:
            problems.append(f"{example.command!r}: the comment says {{}}, the output is {text!r}")
        problems += [
            f"{example.command!r}: the comment quotes {m}, the output is {text[:200]!r}"
            for m in members
            if m not in flat
        ]
    return problems


def run_python(block: Fenced, where: Path) -> list[str]:
    """A python block is a test module using numamem's pytest fixtures: run it."""
    module = where / "test_documented_example.py"
    module.write_text(block.body)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "numamem.testing.fixtures",
            "-p",
            "no:cacheprovider",
            str(module),
        ],
        capture_output=True,
        text=True,
        cwd=where,
        timeout=120,
        check=False,
    )
    return [] if result.returncode == 0 and " passed" in result.stdout else [result.stdout[-1500:]]


def test_the_run_blocks_cover_the_pages_that_give_commands() -> None:
    names = {p.name for p in RUN_PAGES}
    assert {"README.md", "api.md", "cli.md", "resize.md", "podresources.md"} <= names


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.name)
def test_the_documented_commands_run_with_the_documented_exit_codes(
    page: Path, short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    blocks = [b for b in fenced_blocks(page) if b.run]
    files = short_root / "f"
    files.mkdir()
    flags = [flag.replace(".numamem/", f"{files}/") for b in blocks for flag in b.flags]
    daemon = start(short_root, daemon_factory, flags)
    problems = []
    for number, block in enumerate(blocks):
        if block.lang == "python":
            where = short_root / f"py{number}"
            where.mkdir()
            problems += [f"{page.name}:{block.line}: {p}" for p in run_python(block, where)]
        else:
            out_dir = short_root / f"out{number}"
            problems += [
                f"{page.name}:{block.line}: {p}"
                for p in run_shell(page, block, daemon, files, out_dir)
            ]
    assert not problems, "\n".join(problems)
    assert daemon.stop() == 0


def test_each_command_of_a_block_is_run_and_its_exit_status_checked(tmp_path: Path) -> None:
    """Review 40: an apostrophe in a comment joined the rest of the block to it and the
    block ended inside that "quote": nothing was run, so a ``false`` documented as exit 0
    passed; lines that were joined ran as one group, only the last status checked."""
    block = Fenced("sh", "true   # the pod's blocks\nfalse  # one more's\ntrue\n", 7, "")
    daemon = DaemonProcess(tmp_path)  # not started: the block does not call it
    problems = run_shell(Path("x.md"), block, daemon, tmp_path, tmp_path / "out")
    assert problems == ["'false': exit 1: "]
    with pytest.raises(AssertionError, match=r"^x\.md:9: the block ends inside a ' quote"):
        run_shell(
            Path("x.md"), Fenced("sh", "true\necho 'open\n", 7, ""), daemon, tmp_path, tmp_path
        )


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
