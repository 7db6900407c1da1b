"""The documentation's generated parts and its commands: ``python -m tests.docgen --write``
(``make docs``) regenerates every generated block and page; the tests check they are current
and run the commands the pages give.

* :mod:`.blocks`: a block between two marker comments of a page, read and rewritten;
* :mod:`.flags`: the ``numamem serve`` flag reference, from ``numamem.config.flags``;
* :mod:`.refusals`: start-up refusals as the memory manager prints them;
* :mod:`.examples`: a page's sections and fenced blocks, and the commands in them.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"


def pages() -> list[Path]:
    """README.md and every page of docs/, in a fixed order."""
    return [README, *sorted(DOCS.glob("*.md"))]
