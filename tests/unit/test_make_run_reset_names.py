"""``make run-reset`` removes exactly the paths it checked as numamem's: a name with a blank
or a glob character is neither split nor globbed again (review 40b: the names were kept in
one space-separated variable and removed unquoted, so

* a file in RUN_DIR/state named ``memory_manager_state.corrupt- *`` (numamem's pattern
  ``NAME.corrupt-*``) split, and its ``*`` removed every regular file in make's working
  directory, then ``rmdir state`` failed: a half reset;
* ``RUN_DIR=/x/run[1]`` removed ``/x/run1/state/memory_manager_state``, another
  directory's checkpoint, and kept its own).

The first test runs make from a scratch working directory (``-f``), never the checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.daemon import REPO
from tests.unit.test_make_run import make

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def test_a_blank_and_a_star_in_a_state_file_name_remove_nothing_outside_state(
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "checkout"  # stands for the checkout make -C runs the recipe in
    cwd.mkdir()
    for name in ("Makefile.local", "pyproject.toml", "thesis.tex"):
        (cwd / name).write_text("not numamem's\n")
    run_dir = tmp_path / "run"
    state = run_dir / "state"
    state.mkdir(parents=True)
    (state / "memory_manager_state").write_text("{}")
    (state / "memory_manager_state.corrupt- *").write_text("{")
    out = make("-f", str(REPO / "Makefile"), "run-reset", f"RUN_DIR={run_dir}", cwd=cwd)
    assert out.returncode == 0 and not state.exists() and not run_dir.exists(), (
        out.stdout + out.stderr
    )
    assert sorted(p.name for p in cwd.iterdir()) == [
        "Makefile.local",
        "pyproject.toml",
        "thesis.tex",
    ], out.stdout + out.stderr


def test_a_glob_character_in_run_dir_removes_no_other_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run[1]"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "state" / "memory_manager_state").write_text("{}")
    other = tmp_path / "run1" / "state" / "memory_manager_state"  # another make run's
    other.parent.mkdir(parents=True)
    other.write_text("another daemon's state\n")
    out = make("run-reset", f"RUN_DIR={run_dir}")
    assert other.exists(), out.stdout + out.stderr
    assert out.returncode == 0 and not run_dir.exists(), out.stdout + out.stderr
