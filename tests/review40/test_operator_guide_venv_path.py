"""Review 40, finding (cosmetic, carried over from the old README into
docs/operator-guide.md): the install block makes the virtualenv at ``/opt/numamem``
(``python3 -m venv /opt/numamem``, its Python at ``/opt/numamem/bin/python``), but the
pre-launched plugin's wrapper script a few sections later execs
``/opt/numamem/venv/bin/python``, a path that install never creates: copied as written, the
wrapper fails (containerd 1.7 then exits: the page says a pre-launched plugin that fails to
register takes the runtime down). The block is ``not run``, so no test notices.

What should happen instead: the wrapper names the interpreter the documented install made,
``/opt/numamem/bin/python``.
"""

from __future__ import annotations

import re

from tests.docgen import REPO


def test_every_opt_numamem_program_is_one_the_documented_install_makes() -> None:
    text = (REPO / "docs" / "operator-guide.md").read_text()
    assert "python3 -m venv /opt/numamem\n" in text
    programs = set(re.findall(r"/opt/numamem/[\w/.-]*bin/\w+", text))
    assert programs, "the page names no program under /opt/numamem"
    wrong = sorted(p for p in programs if not p.startswith("/opt/numamem/bin/"))
    assert wrong == [], f"not made by 'python3 -m venv /opt/numamem': {wrong}"
