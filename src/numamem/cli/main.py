"""``numamem`` command line: ``serve`` runs the daemon, the other commands are clients.

Exit codes of the client commands (``serve``'s are its own: 1 the start refused, 2 usage):

* 0: success (a release, sync, resize to the size it has: the state is what was asked);
* 1: the command failed or did nothing, said in one line on stderr: an RPC error, a
  manifest that cannot be read or is not a valid Pod (an unknown field included: the
  input, not the command line, is wrong), an id or pod that holds nothing (``release``),
  a resize of a container the memory manager does not pin;
* 2: usage error, the command line does not make sense: argparse's checks, a ``serve``
  flag value that does not parse or is out of range, flags that
  contradict each other, a flag naming what the manifest does not have (an unknown
  ``--container``, ``--container-id``), a missing ``--container`` where the pod has several;
* 3: a refusal as a normal answer: ``admit`` rejected the pod (``explain``: would reject
  it), ``resize`` was refused (``explain --resize``: would be).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from numamem.cli import UsageError

TYPE_CHECKING = False  # typing itself costs ~5 ms of CPU at start: --version does without it
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Command = Callable[[argparse.Namespace], int]


class Entry:
    """A command: the module (under ``numamem.cli``) and function that add its parser, the
    one-line help ``numamem --help`` lists (the same as the parser's own: a test checks),
    and whether it may log (then warnings and errors go to stderr until it configures
    logging itself; a command that never logs does not import structlog)."""

    __slots__ = ("adder", "help", "logs", "module")

    def __init__(self, module: str, adder: str, help: str, logs: bool = True) -> None:
        self.module = module
        self.adder = adder
        self.help = help
        self.logs = logs


COMMANDS: dict[str, Entry] = {
    "serve": Entry("serve", "add_parser", "run the daemon in the foreground"),
    "topology": Entry("topology", "add_parser", "show the NUMA topology the daemon discovered"),
    "state": Entry(
        "state",
        "add_parser",
        "show the memory manager state (live; or offline: show, verify against this machine, diff)",
    ),
    "plan-reservations": Entry(
        "plan", "add_parser", "print a reservedMemory that passes validation on this machine"
    ),
    "hints": Entry(
        "memory",
        "add_hints_parser",
        "show the memory manager's NUMA topology hints for a pod manifest",
    ),
    "explain": Entry(
        "explain",
        "add_parser",
        "explain what admitting a pod manifest would decide, and why (changes nothing)",
    ),
    "admit": Entry(
        "memory",
        "add_admit_parser",
        "admit a pod manifest (topology-manager admission, all-or-nothing)",
    ),
    "release": Entry(
        "memory",
        "add_release_parser",
        "release memory by container id (RemoveContainer) or a whole pod (--pod)",
    ),
    "sync": Entry(
        "memory",
        "add_sync_parser",
        "declare the live pods (SyncActivePods): release every container not in them",
    ),
    "resize": Entry(
        "resize",
        "add_parser",
        "resize a container's pinned memory in place (a numamem extension)",
    ),
    "cache": Entry(
        "cache",
        "add_parser",
        "list the metacache's containers, pools and regions (or export its files offline)",
    ),
    "residency": Entry(
        "residency",
        "add_parser",
        "show where pinned containers' memory is, per NUMA node, and their cpuset.mems",
    ),
    "nri": Entry(
        "nri",
        "add_parser",
        "run the NRI plugin: pin containers a runtime (containerd) creates, as the kubelet would",
    ),
    "nri-status": Entry(
        "nristatus",
        "add_parser",
        "check a running numamem nri (its --status-socket); exit 0 when registered with the runtime",
        logs=False,
    ),
    "health": Entry(
        "health", "add_parser", "check health (grpc.health.v1); exit 0 when SERVING", logs=False
    ),
}
"""Every command, in the order ``numamem --help`` lists them."""


class Formatter(argparse.HelpFormatter):
    """argparse's formatter with the terminal's width read as ``shutil.get_terminal_size``
    reads it, without importing shutil (and bz2, lzma, fnmatch with it: ~2.5 ms of CPU):
    argparse makes a formatter for every argument it adds, not only for ``--help``."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
        **kwargs: Any,  # what later Pythons add (3.14: color)
    ) -> None:
        if width is None:
            width = terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width, **kwargs)


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Parser(argparse.ArgumentParser):
    """The parser of every command: :class:`Formatter` unless the command chooses another."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(**kwargs)


PRELAUNCHED_ENV = "NRI_PLUGIN_SOCKET"
"""Set by the runtime for a pre-launched NRI plugin (``numamem.nri.plugin.ENV_SOCKET``)."""


class VersionAction(argparse.Action):
    """``--version``: :func:`numamem.version.describe` (the version and, where known, the
    commit), then exit 0. :mod:`numamem.version` is imported only here (standard library,
    a few small reads of ``.git`` or ``COMMIT``: make bench's ``cli`` phase measures it)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show numamem's version (and the commit it was built from) and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from numamem.version import describe

        print(describe())
        parser.exit()


ALL = "*"
"""``build_parser``'s default: every command's module imported and its parser built."""


def build_parser(only: str | None = ALL, *, listed: bool = True) -> argparse.ArgumentParser:
    """The ``numamem`` parser. ``only``: the one command whose module is imported and whose
    parser is built; with ``listed``, every other command is a stub that only lists it in
    ``--help`` (its module is not imported: ``numamem --version`` and ``numamem health``
    start fast); without, the other commands are left out (a command line that names its
    command and asks for no top-level help needs no list). None: stubs only (``--version``,
    ``--help``, an unknown command); :data:`ALL`: every command built (tests, documentation)."""
    parser = Parser(
        prog="numamem",
        description="Node-local NUMA memory manager and metadata cache (gRPC on a unix socket).",
        epilog="Exit codes: 0 success, 1 failure or nothing done (one line on stderr), 2 usage error (the command line; serve: also a flag value that does not parse or is out of range), 3 pod rejected (admit) or would be (explain), resize refused (resize, explain --resize).",
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    for name, entry in COMMANDS.items():
        if only in (ALL, name):
            module = importlib.import_module(f"numamem.cli.{entry.module}")
            getattr(module, entry.adder)(sub)
        elif listed:
            sub.add_parser(name, help=entry.help, add_help=False)
    return parser


def command_in(argv: Sequence[str]) -> tuple[str | None, bool]:
    """The command ``argv`` names (its first word that is not an option: the top level takes
    no option with a value, when it is a command), and whether the top level's options
    before it need the list of every command (``--help``, or no command)."""
    for i, word in enumerate(argv):
        if not word.startswith("-"):
            if word not in COMMANDS:
                return None, True
            return word, any(w in ("-h", "--help") for w in argv[:i])
    return None, True


def main(argv: Sequence[str] | None = None) -> int:
    # grpc core writes its own non-JSON lines to stderr unless told otherwise.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    words = list(sys.argv[1:] if argv is None else argv)
    if not words and PRELAUNCHED_ENV in os.environ:
        # containerd runs a pre-launched NRI plugin (plugin_path/IDX-NAME) with no arguments:
        # a symlink to numamem there is `numamem nri`.
        words = ["nri"]
    command, listed = command_in(words)
    parser = build_parser(command, listed=listed)
    args, extra = parser.parse_known_args(words)
    if extra:
        # The command's own usage, not the top-level one: a mistyped `serve` flag shows `serve`'s.
        command_parser: argparse.ArgumentParser = _subcommands(parser)[args.command]
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if COMMANDS[args.command].logs:
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
