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


def examples(block: str, where: str = "the block", first_line: int = 1) -> list[Example]:
    """The commands of a shell block, one a logical line: a command goes on over its next
    lines while a quote (``'`` or ``"``) is open or its line ends in a backslash, as the
    shell reads it; ``#`` at the start of a word outside quotes begins a comment, which is
    not part of the command (an apostrophe there opens nothing). A trailing ``# exit N``
    states the expected exit code (default 0). Comment-only and blank lines give nothing.

    Raises AssertionError naming ``where`` (the page) and the line (``first_line`` is the
    block's first line on it) when the block ends inside a quote or a continuation: those
    lines would otherwise be left out, run by no test.
    """
    out: list[Example] = []
    pending: list[str] = []
    start, quote, continued = 0, "", False
    for index, line in enumerate(block.splitlines()):
        if not pending:
            start = index
        try:
            command, comment, quote, continued = _scan(line, quote)
        except UnreadableError as what:
            raise AssertionError(
                f"{where}:{first_line + index}: {what} is not read by this runner (its lines "
                "would run as commands of their own): write the command without it, or mark "
                "the block not run, naming the test that covers it"
            ) from None
        pending.append(command)
        if quote or continued:
            continue
        joined = "\n".join(pending)
        pending = []
        if not joined.strip():
            continue
        match = re.match(r"exit (\d+)\b", comment)
        out.append(Example(joined, int(match.group(1)) if match else 0, comment))
    if pending:
        open_ = f"a {quote} quote" if quote else "a backslash continuation"
        raise AssertionError(
            f"{where}:{first_line + start}: the block ends inside {open_} begun on this "
            f"line ({pending[0][:60]!r}): close it, or its lines are never run"
        )
    return out


class UnreadableError(Exception):
    """Shell syntax :func:`examples` does not read (its reason is the syntax)."""


def _scan(line: str, quote: str) -> tuple[str, str, str, bool]:
    """One physical line read as bash reads it, with ``quote`` (``''``, ``"'"`` or ``'"'``)
    open from the lines before: (the command part, right-stripped when a comment follows;
    the comment, stripped; the quote open at its end; whether it ends in an unquoted
    backslash, a continuation). :class:`UnreadableError` for a here-document or ``$'...'``."""
    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = ""
        elif char == "\\":
            if index == len(line) - 1:
                return line, "", "", True
            index += 1
        elif char == "<" and line.startswith("<<<", index):
            index += 2  # a here-string: one line, read as any other word
        elif char == "<" and line.startswith("<<", index):
            raise UnreadableError("a here-document (<<)")
        elif char == "$" and line.startswith("$'", index):
            raise UnreadableError("ANSI-C quoting ($'...')")
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip(), line[index + 1 :].strip(), "", False
        index += 1
    return line, "", quote, False


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
