"""Review 40, finding: ``make run-reset`` still ends in ``rm -rf $(RUN_DIR)/state``, whatever
that directory holds. Review 38b's fix stopped it removing RUN_DIR itself (``make run-reset
RUN_DIR=$HOME``) but ``$HOME/state`` (or ``/tmp/state``, a checkout's ``state/``) is removed
with everything in it although make run never made it: no ``numamem.lock``, no
``memory_manager_state``, nothing numamem writes. The Makefile's comment says "It removes
what make run makes there (numamem.sock, state/)".

Reproduce: ``mkdir -p /tmp/x/state && echo data > /tmp/x/state/notes.txt && make run-reset
RUN_DIR=/tmp/x`` prints ``rm -rf /tmp/x/state ...`` and notes.txt is gone.

What should happen instead: run-reset removes only the files numamem writes in state/ (the
kubelet state file, the metacache snapshot and journal, the lock, the names file, their
``.corrupt``/temporary siblings) and state/ itself only when that left it empty; or it
refuses, naming the path, when state/ holds a file numamem does not write.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.daemon import REPO


def test_run_reset_keeps_a_state_directory_make_run_did_not_make(tmp_path: Path) -> None:
    run_dir = tmp_path / "home"
    (run_dir / "state").mkdir(parents=True)
    notes = run_dir / "state" / "notes.txt"
    notes.write_text("not numamem's\n")
    done = subprocess.run(
        [
            shutil.which("make") or "make",
            "--no-print-directory",
            "-C",
            str(REPO),
            "run-reset",
            f"RUN_DIR={run_dir}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert notes.exists(), f"make run-reset removed {notes}: {done.stdout}{done.stderr}"
