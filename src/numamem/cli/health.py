"""``numamem health``: a standard grpc.health.v1 check, for probes and people.

Exit code 0 when the service is SERVING; 1 otherwise (NOT_SERVING, unknown
service, no answer within ``--timeout``), with the status or the error on one
line. It needs nothing but numamem itself: no grpcurl binary, so it works on
every architecture the Python package installs on.

The DaemonSet runs it every 10 s, so it imports grpc and nothing heavy besides: not
:mod:`numamem.client` and the generated code, not the protobuf runtime (the two messages
are encoded by :mod:`numamem.cli.health_wire`), not structlog.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import grpc

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_client_args,
    fail,
    print_json,
    report_rpc_error,
)
from numamem.cli.health_wire import (
    METHOD,
    SERVING,
    STATUS_NAMES,
    decode_response,
    encode_request,
)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "health",
        help="check health (grpc.health.v1); exit 0 when SERVING",
        description=(
            "Check the daemon's health over its socket, or over --health-port with --address; "
            "exit code 0 when SERVING, 1 otherwise."
        ),
    )
    parser.add_argument(
        "--service",
        default="",
        metavar="NAME",
        help='service to check, e.g. numamem.v1.MemoryManager (default: "", the whole daemon)',
    )
    parser.add_argument(
        "--address",
        metavar="HOST:PORT",
        type=host_port,
        help="check --health-port at HOST:PORT (e.g. 127.0.0.1:9440, [::1]:9440) instead of the socket",
    )
    add_client_args(parser)
    parser.set_defaults(run=run)


def host_port(text: str) -> str:
    """``--address``: ``HOST:PORT`` with a port (gRPC would dial port 443 without one),
    ``[v6]:PORT`` for IPv6 literals."""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if not sep or not host or (":" in host and not bracketed):
        host, port = "", ""
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        from numamem.errors import quote

        raise argparse.ArgumentTypeError(
            f"{quote(text)}: expected HOST:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:9440, "
            "[::1]:9440): the --health-port of the daemon"
        )
    return text


def run(args: argparse.Namespace) -> int:
    try:
        request = encode_request(args.service)
    except UnicodeEncodeError as err:
        from numamem.errors import quote

        raise UsageError(f"--service {quote(args.service)}: not UTF-8 text") from err
    # The target as NumamemClient builds it.
    target = args.address or f"unix://{os.path.abspath(args.socket)}"
    with grpc.insecure_channel(target) as channel:
        check: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(METHOD)
        try:
            reply = check(
                request,
                timeout=args.timeout,
                metadata=(("x-request-id", os.urandom(8).hex()),),
            )
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                from numamem.errors import quote

                return fail(f"service {quote(args.service)} is not known to the daemon")
            return report_rpc_error(err, None if args.address else args.socket)
    try:
        status = decode_response(reply)
    except ValueError as err:
        return fail(f"{METHOD}: the reply does not decode: {err}")
    name = STATUS_NAMES.get(status, str(status))
    if args.json:
        print_json({"service": args.service, "status": name})
    else:
        print(name)
    return EXIT_OK if status == SERVING else EXIT_FAILED
