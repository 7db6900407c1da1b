"""tests/daemon.run_together fails when a thread is still running after its timeout: its
callers assert on what the workers recorded (``errors == []``), which says nothing while a
worker is stuck. (A worker's exception is seen anyway: pytest's unhandled-thread-exception
warning is an error under filterwarnings = error.)
"""

from __future__ import annotations

import threading

import pytest

from tests.daemon import run_together


def test_a_thread_still_running_after_the_timeout_fails() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="stuck", daemon=True)
    try:
        with pytest.raises(AssertionError, match="stuck"):
            run_together([stuck], timeout=0.05)
    finally:
        release.set()
        stuck.join()
