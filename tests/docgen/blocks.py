"""A generated block of a page: the text between a BEGIN and an END marker comment.

One implementation for every generated block (the flag reference, the refusal examples,
the bench table, ...): :meth:`Block.current` reads it, :meth:`Block.rewrite` replaces it in
a text, :meth:`Block.write` in the file. The markers stay; only what is between them changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.docgen import REPO


@dataclass(frozen=True)
class Block:
    path: Path
    begin: str
    end: str

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO))

    def current(self, text: str | None = None) -> str:
        """The block's body in ``text`` (default: the file), without the surrounding blank
        lines; AssertionError naming the file when a marker is missing."""
        text = self.path.read_text() if text is None else text
        if self.begin not in text or self.end not in text:
            raise AssertionError(f"{self.name} lacks the markers {self.begin!r} ... {self.end!r}")
        return text.split(self.begin, 1)[1].split(self.end, 1)[0].strip()

    def rewrite(self, text: str, body: str) -> str:
        """``text`` with the block's body replaced by ``body``."""
        self.current(text)
        head, rest = text.split(self.begin, 1)
        _, tail = rest.split(self.end, 1)
        return f"{head}{self.begin}\n{body}\n{self.end}{tail}"

    def write(self, body: str) -> bool:
        """Replace the body in the file; whether the file changed."""
        text = self.path.read_text()
        new = self.rewrite(text, body)
        if new != text:
            self.path.write_text(new)
        return new != text


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table of ``rows`` (cells as given, ``|`` escaped so a cell stays one cell)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines)
