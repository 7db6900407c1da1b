"""``numamem health``: a standard grpc.health.v1 check, for probes and people.

Exit code 0 when the service is SERVING; 1 otherwise (NOT_SERVING, unknown
service, no answer within ``--timeout``), with the status or the error on one
line. It needs nothing but numamem itself: no grpcurl binary, so it works on
every architecture the Python package installs on.
"""

from __future__ import annotations

import argparse
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_client_args,
    client_command,
    fail,
    print_json,
    report_rpc_error,
)
from numamem.client import NumamemClient


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
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected HOST:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:9440, "
            "[::1]:9440): the --health-port of the daemon"
        )
    return text


def run(args: argparse.Namespace) -> int:
    if not args.address:
        return client_command(_check)(args)
    with NumamemClient(channel=grpc.insecure_channel(args.address), timeout=args.timeout) as client:
        try:
            return _check(args, client)
        except grpc.RpcError as err:
            return report_rpc_error(err, None)


def _check(args: argparse.Namespace, client: NumamemClient) -> int:
    try:
        status = client.check_health(args.service)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            return fail(f"service {args.service!r} is not known to the daemon")
        raise
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    if args.json:
        print_json({"service": args.service, "status": name})
    else:
        print(name)
    return EXIT_OK if status == health_pb2.HealthCheckResponse.SERVING else EXIT_FAILED
