"""``numamem serve``: run the daemon in the foreground."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from numamem.config.flags import add_serve_arguments, describe
from numamem.config.load import config_from_args
from numamem.errors import NumamemError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the daemon in the foreground",
        description="Serve the numamem gRPC API on a unix socket until SIGTERM/SIGINT.",
    )
    add_serve_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean shutdown; 1 when the start is refused, with the refusal on stderr:
    one line ``numamem: <why>`` (a state mismatch adds indented lines: what differs, the
    containers concerned, the fix).

    Log lines are held until the daemon serves, so that a refused start prints
    only its refusal (with ``--log-level debug`` they are written at once).
    """
    from numamem import logging as nlog
    from numamem.api.app import build_components
    from numamem.api.sdnotify import Notifier
    from numamem.api.server import Daemon
    from numamem.version import build_info

    try:
        cfg = config_from_args(args)
    except NumamemError as err:
        print(f"numamem: {err}", file=sys.stderr)
        return 1
    held = None if cfg.log_level == "debug" else nlog.HeldStream(sys.stderr)
    nlog.configure(cfg.log_level, cfg.log_format, stream=held)
    log = nlog.get_logger("serve")
    log.info("starting", **build_info(), **describe(cfg))
    if cfg.ignored_kubelet_fields:
        log.debug(
            "kubelet configuration fields numamem does not use",
            path=args.config,
            fields=list(cfg.ignored_kubelet_fields),
        )
    daemon = Daemon(
        cfg, build_components, on_serving=held.release if held else None, notifier=Notifier()
    )
    try:
        return daemon.run()
    except NumamemError as err:
        if held is not None:
            held.discard()
        print(f"numamem: {err}", file=sys.stderr)
        return 1
