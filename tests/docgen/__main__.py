"""``python -m tests.docgen --write`` (``make docs``): regenerate every generated block and page."""

from __future__ import annotations

import sys

from tests.docgen import REPO, benchtable, flags, protodoc, reasons, refusals


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        sys.exit("usage: python -m tests.docgen --write")
    for name, block, body in (
        ("flag reference", flags.BLOCK, flags.render()),
        ("refusal examples", refusals.BLOCK, refusals.render()),
        ("performance table", benchtable.BLOCK, benchtable.render()),
        ("ErrorInfo reasons", reasons.BLOCK, reasons.render()),
    ):
        changed = block.write(body)
        print(f"{block.name}: {name} {'regenerated' if changed else 'unchanged'}")
    page = protodoc.render()
    changed = not protodoc.PAGE.exists() or protodoc.PAGE.read_text() != page
    if changed:
        protodoc.PAGE.parent.mkdir(exist_ok=True)
        protodoc.PAGE.write_text(page)
    name = protodoc.PAGE.relative_to(REPO)
    print(f"{name}: gRPC reference {'regenerated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
