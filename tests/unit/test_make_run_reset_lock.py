"""``make run-reset`` holds RUN_DIR/state/numamem.lock (flock, or Python's fcntl) while it
removes the state, so no numamem starts on a half-removed state. The lock file goes last:
once it is unlinked, a numamem that starts (``make run`` again, a restart loop) creates a new
lock file and takes it (api/statedir.acquire_lock), and it must then find no checkpoint of
the old state (review 40b: in glob order the lock went second, and such a daemon restored
containers, names and a metacache whose memory_manager_state was gone).

The test puts an ``rm`` on PATH that, right after the real rm of numamem.lock, does what a
starting daemon does (acquire_lock) and records the checkpoints still there.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from numamem.api.precheck import CHECKPOINTS
from numamem.api.statedir import LOCK_FILE
from tests.daemon import REPO
from tests.unit.test_make_run import locker_env, make

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

PROBE = """
import sys
from pathlib import Path
from numamem.api.statedir import acquire_lock
from numamem.errors import StartupError
lock = Path(sys.argv[1])
try:
    fd, created = acquire_lock(lock)
except StartupError:
    print("held")
else:
    print("taken with", *sorted(p.name for p in lock.parent.iterdir() if p.name != lock.name))
    if created:  # a daemon that then stopped and left no lock file: the reset may go on
        lock.unlink()
"""


def install_rm_probe(bin_dir: Path, log: Path) -> None:
    """An ``rm`` in ``bin_dir`` that runs the real one, then, for a numamem.lock, the probe
    (it replaces the ``rm`` that locker_env links there for the Python fallback)."""
    real = shutil.which("rm") or "/bin/rm"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "probe.py").write_text(PROBE)
    (bin_dir / "rm").unlink(missing_ok=True)
    (bin_dir / "rm").write_text(
        "#!/bin/sh\n"
        f'{real} "$@" || exit $?\n'
        'for a do case "$a" in */numamem.lock)\n'
        f'  {sys.executable} {bin_dir / "probe.py"} "$a" >> {log};; esac; done\n'
    )
    (bin_dir / "rm").chmod(0o755)


@pytest.mark.parametrize("locker", ["flock", "python"])
def test_no_numamem_takes_the_lock_while_checkpoints_remain(tmp_path: Path, locker: str) -> None:
    bin_dir = tmp_path / "bin"
    env = locker_env(locker, bin_dir) or {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",  # flock from the system's PATH
    }
    log = tmp_path / "probe.log"
    install_rm_probe(bin_dir, log)
    env["PYTHONPATH"] = str(REPO / "src")
    state = tmp_path / "run" / "state"
    state.mkdir(parents=True)
    for name in CHECKPOINTS:
        (state / name).write_text("{}")
    (state / LOCK_FILE).write_text("")  # left by a stopped make run, not held
    out = make("run-reset", f"RUN_DIR={state.parent}", env=env)
    assert log.exists(), out.stdout + out.stderr  # the shim ran when numamem.lock was removed
    probed = log.read_text().splitlines()
    assert probed, out.stdout + out.stderr
    assert probed in (["held"], ["taken with"]), (probed, out.stderr)
    assert out.returncode == 0 and not state.exists(), out.stdout + out.stderr
