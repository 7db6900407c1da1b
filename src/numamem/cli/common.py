"""Shared pieces of the client commands: connection flags, errors, output.

Imported by every command, ``health`` included, so it imports nothing but the standard
library at module level (no grpc, no protobuf, no :mod:`numamem.client`, not even
:mod:`numamem.errors`): the rest loads where used.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from numamem.cli import UsageError

if TYPE_CHECKING:
    import grpc
    from google.protobuf.message import Message

    from numamem.client import NumamemClient

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # argparse's, and UsageError's: the command line does not make sense
EXIT_REJECTED = 3  # `admit`: the pod was not admitted (a normal answer, not an error)
__all__ = ["UsageError"]

DEFAULT_SOCKET = "/run/numamem/numamem.sock"
"""``numamem.config.model.DEFAULT_SOCKET`` (a test checks they agree), without importing the
configuration model: ``numamem health`` runs every few seconds and imports only what it needs."""


MAX_TIMEOUT_S = 3600.0


def add_client_args(parser: argparse.ArgumentParser) -> None:
    """``--socket``, ``--timeout`` and ``--json``, the flags of every client command."""
    add_socket_argument(parser)
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=10.0,
        metavar="SECONDS",
        help=f"RPC deadline, more than 0 and at most {MAX_TIMEOUT_S:g} (default: %(default)s)",
    )
    add_json_flag(parser)


def add_socket_argument(parser: argparse.ArgumentParser) -> None:
    """``--socket``: the daemon's socket, from ``$NUMAMEM_SOCKET`` when set (every client
    command, and ``numamem nri``, which is a client of the daemon too)."""
    parser.add_argument(
        "--socket",
        default=os.environ.get("NUMAMEM_SOCKET", DEFAULT_SOCKET),
        metavar="PATH",
        help="the daemon's socket (default: $NUMAMEM_SOCKET or %(default)s)",
    )


def add_json_flag(
    parser: argparse.ArgumentParser,
    help_text: str = "print JSON (snake_case keys) instead of a table",
    *,
    inherit: bool = False,
) -> None:
    """``--json``. ``inherit``: a sub-action's flag that keeps its parent's value when not
    given, so ``state --json diff`` and ``state diff --json`` say the same."""
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if inherit else False,
        help=help_text,
    )


def timeout_seconds(text: str) -> float:
    """``--timeout``: seconds, more than 0 (a zero deadline expires before the call)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TIMEOUT_S:
        from numamem.errors import quote

        raise argparse.ArgumentTypeError(
            f"{quote(text)}: expected seconds, more than 0 and at most {MAX_TIMEOUT_S:g}"
        )
    return value


def client_command(
    func: Callable[[argparse.Namespace, NumamemClient], int],
) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: open a client from the flags; an RPC error is one line and exit 1."""

    def run(args: argparse.Namespace) -> int:
        import grpc

        from numamem.client import NumamemClient

        with NumamemClient(args.socket, timeout=args.timeout) as client:
            try:
                return func(args, client)
            except grpc.RpcError as err:
                return report_rpc_error(err, args.socket)

    return run


def report_rpc_error(err: grpc.RpcError, socket: str | None) -> int:
    """One line on stderr for a failed RPC (naming a missing socket); returns exit code 1."""
    import grpc

    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    if code == grpc.StatusCode.UNAVAILABLE and socket is not None and not os.path.exists(socket):
        details = f"no daemon socket at {socket} (is numamem running? --socket)"
    name = code.name if code is not None else "ERROR"
    print(f"numamem: {name}: {guarded(details or '')}", file=sys.stderr)
    return EXIT_FAILED


def plural(n: int, noun: str) -> str:
    """``1 pod``, ``2 pods``: a count and its noun (nouns here take an ``s``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fail(message: str) -> int:
    print(f"numamem: {message}", file=sys.stderr)
    return EXIT_FAILED


def message_to_dict(message: Message) -> dict[str, Any]:
    """Proto field names, every field present, 64-bit integers as JSON numbers (unlike proto3 JSON)."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {
                str(k): _scalar_or_message(value_field, v) for k, v in sorted(value.items())
            }
        elif field.is_repeated:
            out[field.name] = [_scalar_or_message(field, v) for v in value]
        elif field.message_type is not None:
            out[field.name] = message_to_dict(value) if message.HasField(field.name) else None
        else:
            out[field.name] = _scalar_or_message(field, value)
    return out


def _scalar_or_message(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        if field.message_type.full_name == "google.protobuf.Timestamp":
            return value.ToJsonString()
        return message_to_dict(value)
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    return value


def print_json(data: Any) -> None:
    import json

    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def shown(value: object) -> str:
    """A value a gRPC client (or a manifest) chose, for the terminal: as
    ``quote(style="bare")`` writes it (control and other non-printable characters and
    backslashes escaped, so an escape sequence in a pod name is shown, never run), but
    never shortened; a plain value unchanged."""
    text = str(value)
    if text.isprintable() and "\\" not in text:
        return text
    from numamem.errors import quote

    return quote(text, style="bare", limit=10 * len(text) + 10)  # \U0010ffff: 10 bytes


def guarded(text: str) -> str:
    """A message numamem made (the daemon's error text, a check's problem): it quotes the
    values in it already, so it is shown as it is unless it holds a non-printable
    character (then as :func:`shown`)."""
    return text if text.isprintable() else shown(text)


def guarded_lines(text: str, indent: str = "") -> str:
    """A message of several lines (a start-up refusal: the message, what differs, the fix)
    as lines: each line through :func:`guarded` (so a line break is a line break, and
    anything else non-printable is still escaped), each after ``indent``."""
    return "\n".join(indent + guarded(line) for line in text.split("\n"))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns separated by two spaces; every cell through :func:`shown`."""
    cells = [[str(h) for h in headers], *[[shown(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        sys.stdout.write(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def human_bytes(size: int) -> str:
    """:func:`numamem.quantity.format_bytes`: one formatter for every size numamem prints."""
    from numamem.quantity import format_bytes

    return format_bytes(size)
