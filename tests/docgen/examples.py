"""A page's sections and fenced blocks, and the commands in them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Example:
    command: str
    expected_exit: int
    comment: str = ""
    """What follows ``  # `` (after ``exit N``, if any): it may quote the output (see
    :func:`quoted_output`)."""


def quoted_output(comment: str) -> tuple[bool, list[str]]:
    """What an example's comment says its output holds: whether it is the empty message
    (the comment starts with ``{}``), and each JSON member it quotes (``"allocated": true``)."""
    members = re.findall(r'"\w+": (?:true|false|null|-?\d+|"[^"]*")', comment)
    return comment.lstrip().startswith("{}"), members


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of every markdown heading, fenced blocks left out."""
    out = []
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{1,6}) (.+?)\s*$", line)):
            out.append((index, len(match.group(1)), match.group(2)))
    return out


def section(path: Path, heading: str) -> str:
    """The text under the heading ``heading`` (of any level) of the page ``path``, up to the
    next heading of the same or a higher level; AssertionError naming the page without it."""
    text = path.read_text()
    lines = text.splitlines()
    found = headings(text)
    for position, (index, level, title) in enumerate(found):
        if title == heading:
            end = next((i for i, lv, _ in found[position + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[index + 1 : end]) + "\n"
    raise AssertionError(f"{path.name} has no heading {heading!r}")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def examples(block: str) -> list[Example]:
    """Logical lines (backslash continuations and open single quotes joined).

    A trailing ``  # exit N`` states the expected exit code (default 0).
    """
    logical: list[str] = []
    pending = ""
    for line in block.splitlines():
        if line.endswith("\\"):
            pending += line + "\n"
            continue
        if (pending + line).count("'") % 2 == 1:
            pending += line + "\n"
            continue
        logical.append(pending + line)
        pending = ""
    out = []
    for line in logical:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        expected = 0
        match = re.search(r"\s# exit (\d+)\b.*$", line)
        command, comment = line, ""
        if match:
            expected = int(match.group(1))
            command, comment = line[: match.start()], match.group(0).split("# ", 1)[1]
        elif "  # " in line:
            command, comment = line.rsplit("  # ", 1)
        out.append(Example(command.rstrip(), expected, comment.strip()))
    return out


@dataclass
class Fenced:
    """A fenced block of a page with the marker comment on the line before it (if any):
    ``<!-- run: make-run [FLAGS] -->`` (the tests run it against a daemon configured as
    ``make run``, with FLAGS added; ``.numamem/`` is the test daemon's directory) or
    ``<!-- not run: WHY, naming the test that covers it -->``."""

    lang: str
    body: str
    line: int
    marker: str

    @property
    def run(self) -> bool:
        return self.marker.startswith("run: make-run")

    @property
    def flags(self) -> list[str]:
        return self.marker.removeprefix("run: make-run").split() if self.run else []


def fenced_blocks(path: Path) -> list[Fenced]:
    """Every fenced block of ``path`` with a language, in order."""
    out: list[Fenced] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = re.match(r"```(\w+)\s*$", lines[index])
        if match:
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            marker = re.fullmatch(r"<!-- (.*?) -->", before.strip())
            body = "\n".join(lines[index + 1 : end]) + "\n"
            out.append(Fenced(match.group(1), body, index + 1, marker.group(1) if marker else ""))
            index = end
        index += 1
    return out
