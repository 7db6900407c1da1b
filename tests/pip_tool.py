"""The pip the tests install and resolve with (the dev venv has none of its own)."""

from __future__ import annotations

import functools
import subprocess
import sys


@functools.cache
def pip_command() -> tuple[str, ...]:
    """``python -m pip`` of this interpreter, or of its base interpreter, which is the pip
    `make install` used (``pip --python``); with ``--disable-pip-version-check``."""
    for python in (sys.executable, getattr(sys, "_base_executable", sys.executable)):
        probe = subprocess.run(
            [python, "-m", "pip", "--version"], capture_output=True, check=False, timeout=60
        )
        if probe.returncode == 0:
            return (python, "-m", "pip", "--disable-pip-version-check")
    raise AssertionError("no pip to install with: `make install` needs one too")
