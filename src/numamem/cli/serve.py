"""``numamem serve``: run the daemon in the foreground."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from numamem.config.flags import add_serve_arguments, describe
from numamem.config.load import config_from_args
from numamem.errors import NumamemError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "serve",
        help="run the daemon in the foreground",
        description="Serve the numamem gRPC API on a unix socket until SIGTERM/SIGINT.",
    )
    add_serve_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from numamem import logging as nlog
    from numamem.api.app import build_components
    from numamem.api.server import Daemon

    try:
        cfg = config_from_args(args)
    except NumamemError as err:
        print(f"numamem: {err}", file=sys.stderr)
        return 1
    nlog.configure(cfg.log_level, cfg.log_format)
    nlog.get_logger("serve").info("starting", **describe(cfg))
    daemon = Daemon(cfg, build_components)
    try:
        return daemon.run()
    except NumamemError as err:
        print(f"numamem: {err}", file=sys.stderr)
        return 1
