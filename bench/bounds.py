"""A target's floor with numamem's own work taken out: ``numamem serve`` with Allocate and
Admit replayed, for ``make bench`` only.

``python -m bench.bounds serve ARGS`` is ``numamem serve ARGS`` except for two servicer
methods, by the environment variable ``NUMAMEM_BENCH_BOUND``:

* ``write``: the first Allocate and the first Admit run as usual; each later call of the
  same method writes the bytes the state file held after its first call, with the same
  atomic write (temp file, fsync, rename, directory sync) to ``memory_manager_state.bound``
  in the same directory, and returns the first call's reply. What is left is the RPC with
  the method's own messages and one durable write of the real state's size: none of
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


def _replayed(method: Callable[..., Any], state: Path | None) -> Callable[..., Any]:
    """``method`` once, then its first reply again (after rewriting ``state``'s bytes of
    that moment to a file beside it, when ``state`` is given)."""
    first: dict[str, Any] = {}

    @functools.wraps(method)
    def replay(self: MemoryManagerServicer, request: Any, context: Any) -> Any:
        if "reply" in first:
            if state is not None:
                atomic_write_all([(first["path"], first["bytes"])])
            return first["reply"]
        reply = method(self, request, context)
        if state is not None:
            first["path"], first["bytes"] = state.with_suffix(".bound"), state.read_bytes()
        first["reply"] = reply
        return reply

    return replay


def install(bound: str, state_dir: Path) -> None:
    """Replace MemoryManagerServicer.Allocate and .Admit for ``bound`` (one of BOUNDS)."""
    if bound not in BOUNDS:
        raise SystemExit(f"{VARIABLE}={bound!r}: use one of {', '.join(BOUNDS)}")
    state = state_dir / STATE_FILE if bound == "write" else None
    for name in ("Allocate", "Admit"):
        setattr(MemoryManagerServicer, name, _replayed(getattr(MemoryManagerServicer, name), state))


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
    install(os.environ.get(VARIABLE, ""), _state_dir(args))
    sys.exit(main(args))
