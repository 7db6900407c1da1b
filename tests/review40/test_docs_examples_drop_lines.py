"""Review 40, finding: tests/docgen/examples.py ``examples()`` joins a line with an odd
number of single quotes to the next ones (to keep a multi-line ``-d '...'`` together) and
never flushes what is pending at the end of the block. A documented command whose comment
has an apostrophe (``# the pod's blocks``) therefore swallows itself and every later line of
its block: they are not returned, so tests/e2e/test_docs_examples.py never runs them and the
block passes whatever they would do (here ``false``, documented as exit 0). The joined lines
that do get returned run as one ``{ ... }`` group whose exit status is the last command's,
so a failing command in the middle passes too.

What should happen instead: quotes are counted in the command only (not in a ``  # ``
comment), and a block that ends with an unclosed quote is an AssertionError naming the page
and line (never silently dropped).
"""

from __future__ import annotations

from tests.docgen.examples import examples


def test_a_comment_with_an_apostrophe_does_not_hide_the_commands_after_it() -> None:
    block = (
        ".venv/bin/numamem state $S   # the pod's blocks\n"
        "false                        # documented as exit 0: must be run and fail\n"
    )
    commands = [e.command for e in examples(block)]
    assert commands == [".venv/bin/numamem state $S", "false"]


def test_a_block_ending_inside_a_quote_is_not_silently_empty() -> None:
    assert examples("echo 'unclosed\n") != []
