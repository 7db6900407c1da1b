"""``numamem`` command line: ``serve`` runs the daemon, the other commands are clients.

Exit codes: 0 success; 1 the command failed (daemon refused to start, RPC
error, bad input); 2 usage error (argparse, and a ``serve`` flag value that does not parse
or is out of range); 3 ``admit`` rejected the pod (``explain``: would reject it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from numamem import __version__
from numamem.cli import UsageError

Command = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    from numamem.cli import cache, health, memory, plan, residency, resize, serve, state, topology

    parser = argparse.ArgumentParser(
        prog="numamem",
        description="Node-local NUMA memory manager and metadata cache (gRPC on a unix socket).",
        epilog="Exit codes: 0 success, 1 failure (one line on stderr; serve: the start refused), 2 usage error (an unknown flag, a missing argument, a flag value that does not parse or is out of range), 3 pod rejected (admit) or would be (explain), resize refused (resize, explain --resize).",
    )
    parser.add_argument("--version", action="version", version=f"numamem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve.add_parser(sub)
    topology.add_parser(sub)
    state.add_parser(sub)
    plan.add_parser(sub)
    memory.add_parsers(sub)
    resize.add_parser(sub)
    cache.add_parser(sub)
    residency.add_parser(sub)
    health.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # grpc core writes its own non-JSON lines to stderr unless told otherwise.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # The command's own usage, not the top-level one: a mistyped `serve` flag shows `serve`'s.
        command_parser: argparse.ArgumentParser = _subcommands(parser)[args.command]
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    _quiet_logging()
    run: Command = args.run
    try:
        return run(args)
    except UsageError as err:
        _command_parser(parser, args).error(str(err))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


def _quiet_logging() -> None:
    """Until a command configures logging (``serve`` does, from its flags), only warnings and
    errors are logged, to stderr: structlog's unconfigured default would print every level
    to stdout, into the output of ``state verify`` and ``plan-reservations``."""
    import structlog

    from numamem import logging as nlog

    if not structlog.is_configured():
        nlog.configure("warning", "console", stream=sys.stderr, cache=False)


def _command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the command that ran (``state diff``'s, not ``state``'s)."""
    command = _subcommands(parser)[args.command]
    action = getattr(args, "action", None)
    return _subcommands(command).get(action, command) if action else command


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


if __name__ == "__main__":
    sys.exit(main())
