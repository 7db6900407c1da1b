"""README.md and docs/ stay true: the generated pages and blocks are current, grpcurl for every
RPC, real refusal messages, the metric tables, and every relative link resolves."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from bench import readme as bench_readme
from numamem.v1 import info_pb2, memorymanager_pb2, metacache_pb2, topology_pb2
from tests.docgen import DOCS, README, REPO, benchtable, flags, pages, protodoc, reasons, refusals
from tests.docgen.blocks import Block
from tests.docgen.examples import examples, fenced_blocks, section, shell_blocks
from tests.docgen.links import broken, links

SRC = Path(__file__).resolve().parents[2] / "src" / "numamem"


def test_flag_reference_is_current() -> None:
    assert flags.BLOCK.current() == flags.render(), (
        f"{flags.BLOCK.name}'s configuration reference is stale: run `make docs`"
    )


def test_refusal_examples_are_current() -> None:
    """The troubleshooting section shows refusals exactly as numamem prints them."""
    assert refusals.BLOCK.current() == refusals.render(), (
        f"{refusals.BLOCK.name}'s refusal examples are stale: run `make docs`"
    )


def test_the_reasons_table_is_current() -> None:
    """Every ErrorInfo reason numamem sends, with its status code and meaning, as
    numamem.api.status has them (no hand-kept copy)."""
    from numamem.api.status import REASONS

    table = reasons.BLOCK.current()
    assert table == reasons.render(), f"{reasons.BLOCK.name}'s reasons are stale: run `make docs`"
    assert all(f"| `{reason}` |" in table for reason in REASONS)


def test_the_grpc_reference_is_current() -> None:
    """docs/api-reference.md is what the .proto files and their comments make."""
    assert protodoc.PAGE.read_text() == protodoc.render(), (
        "docs/api-reference.md is stale: run `make docs`"
    )


def test_every_rpc_has_a_comment() -> None:
    """The reference says what each RPC does: none is left without a comment."""
    files = protodoc.descriptors()
    assert sum(len(s.method) for f in files for s in f.service) >= 43
    assert protodoc.undocumented_rpcs(files) == []


def test_every_rpc_has_a_grpcurl_example() -> None:
    [block] = shell_blocks(section(DOCS / "api.md", "A call of every RPC"))
    commands = " ".join(e.command for e in examples(block, "api.md"))
    for module in (info_pb2, topology_pb2, memorymanager_pb2, metacache_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                assert f"{service.full_name}/{method.name}" in commands, (
                    f"docs/api.md '## A call of every RPC' lacks a grpcurl call of {service.full_name}/{method.name}"
                )


@pytest.mark.parametrize(
    ("block", "commands"),
    [
        (  # review 40: the apostrophe opened a quote that swallowed the block
            ".venv/bin/numamem state $S   # the pod's blocks\nfalse  # must be run and fail\n",
            [(".venv/bin/numamem state $S", 0), ("false", 0)],
        ),
        (
            "echo 'a # b' \"it's\"  # c's\ntrue # exit 3: why\n",
            [("echo 'a # b' \"it's\"", 0), ("true", 3)],
        ),
        ("# a comment's line\n\necho \\'  # x\n", [("echo \\'", 0)]),
        (  # one command over three lines: a quote, then a backslash
            "grpcurl -d '{\n  \"a\": 1}' \\\n  $S x/Y  # exit 69: NOT_FOUND\nfalse  # exit 1\n",
            [("grpcurl -d '{\n  \"a\": 1}' \\\n  $S x/Y", 69), ("false", 1)],
        ),
    ],
    ids=["apostrophe-in-comment", "quotes-and-hash", "comment-lines", "multi-line"],
)
def test_a_shell_block_is_read_as_one_command_a_logical_line(
    block: str, commands: list[tuple[str, int]]
) -> None:
    assert [(e.command, e.expected_exit) for e in examples(block)] == commands


@pytest.mark.parametrize(
    ("block", "open_"),
    [
        ("true\necho 'unclosed\n", "a ' quote"),
        ('true\necho "a\nb\\\n', 'a " quote'),
        ("true\necho a \\\n", "a backslash continuation"),
    ],
)
def test_a_block_ending_inside_a_quote_names_the_page_and_line(block: str, open_: str) -> None:
    """Review 40: those lines were dropped silently, run by no test."""
    with pytest.raises(AssertionError, match=f"^x.md:11: the block ends inside {open_} begun"):
        examples(block, "x.md", 10)


@pytest.mark.parametrize(
    ("block", "syntax"),
    [
        ("true\ncat <<EOF\nhello world\nEOF\n", "a here-document"),
        ("true\necho $'it\\'s'\n", "ANSI-C quoting"),
    ],
)
def test_shell_syntax_the_runner_does_not_read_is_refused_by_name(block: str, syntax: str) -> None:
    """Review 40b: a here-document's body ran as commands of its own, and ``\\'`` closed a
    ``$'...'`` quote; the runner refuses both, naming the page and line."""
    with pytest.raises(AssertionError, match=f"^x.md:11: {re.escape(syntax)}"):
        examples(block, "x.md", 10)
    assert [e.command for e in examples("cat <<<'here string'\n")] == ["cat <<<'here string'"]


def _source_text() -> str:
    """All of src/numamem with adjacent string literals joined ("a " "b" -> "a b")."""
    text = "\n".join(p.read_text() for p in sorted(SRC.rglob("*.py")))
    return re.sub(r"\"\s*\n\s*f?\"", "", text)


def test_troubleshooting_quotes_messages_the_daemon_really_prints() -> None:
    rows = [
        line
        for line in section(DOCS / "troubleshooting.md", "Troubleshooting").splitlines()
        if line.startswith("| `")
    ]
    assert len(rows) >= 15
    source = _source_text()
    for row in rows:
        for fragment in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            assert fragment in source, f"Troubleshooting quotes {fragment!r}, which no code prints"


def _metric_names_of_the_daemon() -> set[str]:
    """Every metric family the daemon registers, as scraped names (counters with _total, infos
    with _info)."""
    from numamem.api.metrics import MetricsComponent
    from numamem.testing.daemon import short_tmpdir
    from numamem.testing.server import serve_in_process

    root = short_tmpdir()
    try:
        with serve_in_process(root=root, metrics_socket=str(root / "m.sock")) as server:
            families = list(server.component(MetricsComponent).metrics.registry.collect())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    suffix = {"counter": "_total", "info": "_info"}
    return {f.name + suffix.get(f.type, "") for f in families}


def _table_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("| `numamem_") or line.startswith("| ``numamem_"):
            names |= set(re.findall(r"`+(numamem_[a-z_]+)`+", line.split(" | ")[0]))
    return names


def test_the_metric_tables_are_the_metrics_the_daemon_serves() -> None:
    """docs/metrics.md's and metrics.py's tables list exactly the registered metrics (issue 26:
    numamem_memory_drift_bytes was missing)."""
    served = _metric_names_of_the_daemon()
    assert "numamem_memory_drift_bytes" in served
    assert _table_names(section(DOCS / "metrics.md", "Prometheus metrics")) == served
    from numamem.api import metrics

    assert _table_names(metrics.__doc__ or "") == served


def test_the_flag_table_is_the_flags_serve_takes() -> None:
    """Beside the generated reference being current: its rows are exactly serve's flags."""
    import argparse

    from numamem.config.flags.table import add_serve_arguments

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    taken = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    rows = flags.BLOCK.current().splitlines()[2:]
    documented = {row.split("`")[1].split()[0] for row in rows}
    assert documented == taken - {"--help"}


def test_the_residency_example_shows_the_legend_as_printed() -> None:
    from numamem.cli.residency import LEGEND

    assert LEGEND in section(DOCS / "residency.md", "Residency: where pinned memory really is")
    assert "hugetlb" in LEGEND  # hugetlb pages are in the figures (review of issue 29, finding 4)


def test_the_residency_section_does_not_call_shared_memory_reclaimable() -> None:
    """Review of issue 29, finding 3: tmpfs, /dev/shm and shared anonymous memory are
    swap-backed (v1 counts them in anon, v2 in file and shmem): without swap they are never
    reclaimed, so they are not 'page cache, usually nothing to do'."""
    from numamem.cli.residency import LEGEND

    text = " ".join(
        section(DOCS / "residency.md", "Residency: where pinned memory really is").split()
    )
    assert "Outside file pages only: usually nothing to do" not in text
    assert "**v1**: shared memory is in `anon` (the swap-backed LRU), not in `file`" in text
    assert "the page cache on a node is `file` minus `shmem`" in text
    assert "Outside page cache only (v2: `file` minus `shmem`; v1: `file`): usually nothing" in text
    assert "only page cache is reclaimable, and v2's file includes shmem" in LEGEND


def test_performance_table_is_one_bench_run() -> None:
    """docs/performance.md's table is what bench/figures.json (one full run) renders."""
    figures = json.loads(bench_readme.FIGURES.read_text())
    assert not figures["machine"]["quick"], "bench/figures.json is a --quick run"
    assert benchtable.BLOCK.current() == benchtable.render(), (
        f"{benchtable.BLOCK.name}'s performance table is not bench/figures.json: run `make docs`"
    )


def test_the_performance_table_generator_renders_every_row() -> None:
    figures = {
        "machine": {"date": "D", "cpus": 2, "python": "3.11", "platform": "P", "quick": False},
        "bench_seconds": 12.4,
        "floor": {"p50_ms": 0.5},
        "rows": [["a | b", "1.000 ms", "2.000 ms", "2.00x"], ["v", "3 /s", "", "(target)"]],
    }
    marks = Block(DOCS / "performance.md", "<!-- BEGIN t -->", "<!-- END t -->")
    text = f"x\n{marks.begin}\nold\n{marks.end}\ny"
    rewritten = marks.rewrite(text, bench_readme.render(figures))
    block = marks.current(rewritten)
    assert "| a \\| b | 1.000 ms | 2.000 ms | 2.00x |" in block
    assert "| v | 3 /s |  | (target) |" in block
    assert "12 s; RPC floor p50 0.500 ms" in block
    assert rewritten.startswith("x\n") and rewritten.endswith("\ny")


def test_the_readme_is_a_front_door_that_links_every_page() -> None:
    """Issue 40: README.md is at most about 250 lines and leads to every page of docs/."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    targets = {t.partition("#")[0] for t in links(README)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in targets]
    assert missing == [], f"README.md links no docs/ page named {missing}"


def test_the_docs_index_links_every_page() -> None:
    index = DOCS / "README.md"
    targets = {t.partition("#")[0] for t in links(index)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages <= targets, f"docs/README.md lacks {sorted(pages - targets)}"


def test_every_relative_link_and_anchor_resolves() -> None:
    found = [target for page in pages() for target in links(page)]
    assert len(found) > 40  # the parser finds links at all
    problems = [problem for page in pages() for problem in broken(page)]
    assert problems == [], "\n".join(problems)


def test_the_link_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# B page\n\n## `make run`: the daemon\n")
    page.write_text(
        "# A\n\n[ok](b.md#make-run-the-daemon) [self](#a) [web](https://x.y/z)\n"
        "[gone](c.md) [bad anchor](b.md#nothing) `[code](c.md)`\n"
        "```sh\necho [fenced](c.md)\n```\n"
    )
    assert len(broken(page)) == 2
    assert "c.md: no file" in broken(page)[0] and "#nothing" in broken(page)[1]


def test_every_generated_block_is_one_make_docs_writes() -> None:
    """A page claiming a generated block has one the tests above compare with its generator."""
    known = {
        (b.path, b.begin) for b in (flags.BLOCK, refusals.BLOCK, benchtable.BLOCK, reasons.BLOCK)
    }
    claimed = {
        (page, line.strip())
        for page in pages()
        for line in page.read_text().splitlines()
        if line.startswith("<!-- BEGIN ") and "generated by `make docs`" in line
    }
    assert claimed == known


def test_every_module_that_documents_a_deviation_is_in_the_deviation_table() -> None:
    """Plan 3.4: docs/memory-manager.md's table lists every deliberate deviation; a module
    whose docstrings say "deviation" names one, so the table names the module."""
    table = section(DOCS / "memory-manager.md", "Deliberate deviations from the kubelet")
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) >= 20
    modules = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"\bdeviation", path.read_text(), flags=re.I)
    )
    assert len(modules) >= 10
    missing = [module for module in modules if f"`{module}`" not in table]
    assert missing == [], f"docs/memory-manager.md's deviation table does not name {missing}"


def test_every_test_the_deviation_table_cites_exists() -> None:
    table = section(DOCS / "memory-manager.md", "Deliberate deviations from the kubelet")
    tests = Path(__file__).resolve().parents[1]
    cited = re.findall(r"`(?:tests/e2e/)?(test_\w+\.py)(?:::(test_\w+))?", table)
    assert len(cited) >= 20
    for file, name in cited:
        paths = [p for p in (tests / "unit" / file, tests / "e2e" / file) if p.exists()]
        assert paths, f"the deviation table cites {file}, which does not exist"
        path = paths[0]
        assert not name or f"def {name}(" in path.read_text(), f"{file} has no {name}"


def test_every_command_block_says_whether_the_tests_run_it() -> None:
    """Plan 3.5: every sh, python and toml block of README.md and docs/ carries a marker;
    a block not run names the test file that covers it, and that file exists."""
    blocks = [(page, b) for page in pages() for b in fenced_blocks(page)]
    commands = [(page, b) for page, b in blocks if b.lang in ("sh", "python", "toml")]
    unmarked = [f"{p.name}:{b.line}" for p, b in commands if not b.marker]
    assert unmarked == [], f"blocks without a run/not run marker: {unmarked}"
    assert sum(b.run for _, b in commands) >= 10
    for page, block in commands:
        if block.run:
            continue
        assert block.marker.startswith("not run: "), f"{page.name}:{block.line}: {block.marker}"
        named = re.findall(r"tests/[\w/]+\.py", block.marker)
        assert named, f"{page.name}:{block.line}: 'not run' names no test file"
        for name in named:
            assert (REPO / name).exists(), f"{page.name}:{block.line}: {name} does not exist"


def test_every_program_a_block_names_under_the_install_venv_is_one_it_makes() -> None:
    """Review 40: the install block makes the venv at /opt/numamem (``python3 -m venv
    /opt/numamem``), the pre-launched plugin's wrapper execed /opt/numamem/venv/bin/python,
    a path no install makes (containerd 1.7 then exits: a pre-launched plugin that fails
    to register takes it down). Every path under the venv that a block of README.md or
    docs/ names is a program the venv has: its Python and pip, numamem's console scripts,
    grpcurl when the install block asks for the extra."""
    blocks = [(page, block) for page in pages() for block in fenced_blocks(page)]
    installs = [
        (match.group(1), block.body)
        for _, block in blocks
        if (match := re.search(r"^python3 -m venv (\S+)$", block.body, flags=re.M))
    ]
    assert [venv for venv, _ in installs] == ["/opt/numamem"], "one documented install venv"
    venv, install = installs[0]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    programs = {"python", "python3", "pip", "pip3", *scripts}
    programs |= {"grpcurl"} if "[grpcurl]" in install else set()
    made = {f"{venv}/bin/{program}" for program in programs}
    named = {
        (page.name, block.line, path)
        for page, block in blocks
        for path in re.findall(re.escape(venv) + r"/[\w./+-]*\w", block.body)
    }
    assert len(named) >= 3, named  # the install's own pip and numamem, the wrapper's python
    wrong = sorted(f"{page}:{line}: {path}" for page, line, path in named if path not in made)
    assert wrong == [], f"not made by 'python3 -m venv {venv}' and its pip install: {wrong}"


def test_the_counts_the_pages_state_are_the_suites() -> None:
    """The sizes docs/reliability.md names (the fuzzer's RPCs, both fault matrices) and the
    profiler operations docs/performance.md lists are what the code has, not hand-kept."""
    from bench.profile import OPERATIONS
    from tests.fuzz.catalogue import RPCS
    from tests.unit import test_fault_matrix as replace_matrix
    from tests.unit import test_mm_journal_faults as journal_matrix

    reliability = (DOCS / "reliability.md").read_text()
    assert f"all {len(RPCS)} RPCs" in reliability
    for matrix in (replace_matrix, journal_matrix):
        steps, faults = len(matrix.cells()), len(matrix.FAULTS)
        assert f"{steps} steps × {faults} faults = {len(matrix.MATRIX)} cells" in reliability
    performance = (DOCS / "performance.md").read_text()
    assert all(f"`{operation}`" in performance for operation in OPERATIONS)
