"""``numamem nri-status``: ask a running ``numamem nri`` (``--status-socket``) how it is.

Prints the plugin's status line (JSON: ``registered``, ``sessions``, ``last_error``, the
runtime, whether the daemon answers, the counts) and exits 0 when the plugin is registered
with the runtime now; 1 otherwise (not registered: the reason on stderr; no answer within
``--timeout``; no plugin on the socket). The DaemonSet's startup and liveness probes run it,
so it imports the standard library only.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

from numamem.cli.common import EXIT_FAILED, EXIT_OK, fail, timeout_seconds

DEFAULT_STATUS_SOCKET = "/run/numamem/nri-status.sock"
HELP = "check a running numamem nri (its --status-socket); exit 0 when registered with the runtime"
MAX_LINE = 1 << 16


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "nri-status",
        help=HELP,
        description=(
            "Print the status of the numamem nri plugin serving on --status-socket (one JSON "
            "line) and exit 0 when it is registered with the container runtime, 1 otherwise."
        ),
    )
    parser.add_argument(
        "--status-socket",
        default=DEFAULT_STATUS_SOCKET,
        metavar="PATH",
        help="the plugin's --status-socket (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=2.0,
        metavar="SECONDS",
        help="more than 0 (default: %(default)s)",
    )
    parser.set_defaults(run=run)


def read_status(path: str, timeout: float) -> dict[str, Any]:
    """The plugin's status line, parsed. ``OSError`` when nothing answers in time;
    ``ValueError`` when what answered is not a status line."""
    data = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        while not data.endswith(b"\n") and len(data) < MAX_LINE:
            chunk = sock.recv(MAX_LINE)
            if not chunk:
                break
            data += chunk
    status = json.loads(data.decode())
    if not isinstance(status, dict) or "registered" not in status:
        raise ValueError(f"not a numamem nri status line: {data[:120]!r}")
    return status


def run(args: argparse.Namespace) -> int:
    path: str = args.status_socket
    try:
        status = read_status(path, args.timeout)
    except (OSError, ValueError) as err:
        return fail(
            f"no numamem nri status on {path}: {err}; is numamem nri running with "
            f"--status-socket {path}?"
        )
    print(json.dumps(status, sort_keys=True))
    if status["registered"] is True:
        return EXIT_OK
    why = status.get("last_error") or "not registered yet"
    print(
        f"numamem: numamem nri {status.get('plugin', '')} is not registered with the runtime "
        f"(on {status.get('nri_socket')}): {why}",
        file=sys.stderr,
    )
    return EXIT_FAILED
