"""A target's floor with numamem's own work taken out: ``numamem serve`` with Allocate and
Admit replayed, for ``make bench`` only.

``python -m bench.bounds serve ARGS`` is ``numamem serve ARGS`` except for two servicer
methods, by the environment variable ``NUMAMEM_BENCH_BOUND``:

* ``write``: the first Allocate and the first ``NUMAMEM_BENCH_BOUND_REAL_ADMITS`` Admits
  (default 1) run as usual; each later call of the same method writes the bytes the state
  file held after the last real one, with the same atomic write (temp file, fsync, rename,
  directory sync) to ``memory_manager_state.bound`` in the same directory, and returns
  that call's reply. What is left is the RPC with the method's own messages and one
  durable write of the real state's size (when the last real call is one like the timed
  ones: a loop that pins pods first makes those and its first timed call real): none of
  numamem's conversion, policy, merge or encoding.
* ``noop``: the same without the write: the RPC with the method's own messages.

A target below the ``write`` bound cannot be met on this machine by any implementation
that makes each change durable with one atomic write of the state file before it answers
(the kubelet's protocol, and the one ``memory_manager_state``'s readers need). The later
replayed calls change nothing: a loop that also calls other methods sees their real
effects on a state the replayed calls leave alone.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numamem.api.memorymanager import MemoryManagerServicer
from numamem.checkpoint.filestore import atomic_write_all
from numamem.checkpoint.mmstore import STATE_FILE
from numamem.cli.main import main

BOUNDS = ("noop", "write")
VARIABLE = "NUMAMEM_BENCH_BOUND"
REAL_ADMITS = "NUMAMEM_BENCH_BOUND_REAL_ADMITS"


def _replayed(method: Callable[..., Any], state: Path | None, real: int) -> Callable[..., Any]:
    """``method`` ``real`` times, then the last real reply again (after rewriting ``state``'s
    bytes after that call to a file beside it, when ``state`` is given)."""
    last: dict[str, Any] = {"calls": 0}

    @functools.wraps(method)
    def replay(self: MemoryManagerServicer, request: Any, context: Any) -> Any:
        if last["calls"] >= real:
            if state is not None:
                atomic_write_all([(last["path"], last["bytes"])])
            return last["reply"]
        reply = method(self, request, context)
        last["calls"] += 1
        if state is not None:
            last["path"], last["bytes"] = state.with_suffix(".bound"), state.read_bytes()
        last["reply"] = reply
        return reply

    return replay


def install(bound: str, state_dir: Path, real_admits: int = 1) -> None:
    """Replace MemoryManagerServicer.Allocate and .Admit for ``bound`` (one of BOUNDS); the
    first Allocate and the first ``real_admits`` Admits are real."""
    if bound not in BOUNDS:
        raise SystemExit(f"{VARIABLE}={bound!r}: use one of {', '.join(BOUNDS)}")
    if real_admits < 1:
        raise SystemExit(f"{REAL_ADMITS}={real_admits}: at least one Admit must be real")
    state = state_dir / STATE_FILE if bound == "write" else None
    for name, real in (("Allocate", 1), ("Admit", real_admits)):
        method = getattr(MemoryManagerServicer, name)
        setattr(MemoryManagerServicer, name, _replayed(method, state, real))


def _state_dir(argv: list[str]) -> Path:
    for i, arg in enumerate(argv):
        if arg == "--state-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--state-dir="):
            return Path(arg.split("=", 1)[1])
    raise SystemExit(
        "bench.bounds: give --state-dir (the replayed write goes beside its state file)"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    install(os.environ.get(VARIABLE, ""), _state_dir(args), int(os.environ.get(REAL_ADMITS, "1")))
    sys.exit(main(args))
