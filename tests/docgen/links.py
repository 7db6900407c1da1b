"""The relative links of a page and whether each resolves, with GitHub's anchor rules."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from tests.docgen.examples import headings

_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE = re.compile(r"(`+).*?\1", re.S)


def slug(title: str) -> str:
    """GitHub's anchor of a heading: the text (inline code and link targets dropped to their
    text), lower-cased, every character but letters, digits, ``_``, ``-`` and spaces removed,
    spaces made ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of ``path``; a repeated heading gets ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, _, title in headings(path.read_text()):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    """The targets of the markdown links of ``path`` outside fenced blocks and inline code."""
    prose, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose.append(line)
    text = _CODE.sub("", "\n".join(prose))
    return _LINK.findall(text)


def broken(path: Path) -> list[str]:
    """The relative links of ``path`` whose file or ``#anchor`` does not exist, each with why."""
    out = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            out.append(f"{path.name}: {target}: no file {dest}")
        elif anchor and (dest.is_dir() or dest.suffix != ".md"):
            out.append(f"{path.name}: {target}: an anchor into a file that is not a page")
        elif anchor and anchor not in anchors(dest):
            out.append(f"{path.name}: {target}: {dest.name} has no heading #{anchor}")
    return out
