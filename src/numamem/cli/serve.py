"""``numamem serve``: run the daemon in the foreground, or check a configuration (``--check``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from numamem.cli import UsageError
from numamem.config.flags.table import add_serve_arguments, describe
from numamem.errors import NumamemError

if TYPE_CHECKING:
    from numamem.config.checks import ValueChecks
    from numamem.config.model import Config
    from numamem.logging import HeldStream

EXIT_REFUSED = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the daemon in the foreground",
        description="Serve the numamem gRPC API on a unix socket until SIGTERM/SIGINT.",
        epilog=(
            "Exit codes: 0 after a clean shutdown (--check: the configuration passed); 1 the "
            "start is refused (the configuration file, a rule across values or the machine, "
            "the state dir, a held lock, a corrupt checkpoint, a socket in use), one line "
            "'numamem: <why>' on stderr; 2 usage error (an unknown flag, or a flag value that "
            "does not parse or is out of range, a policy option's included)."
        ),
    )
    add_serve_arguments(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="make every validation of a start (flags, --config, reservations, feature gates, "
        "policy options, topology discovery on --sysfs-root, the directories, the checkpoints "
        "in --state-dir, the socket paths) without binding, locking, creating or writing "
        "anything; exit 0 with a one-line summary on stdout, or as the start would: 1 with "
        "its refusal, 2 for a usage error (the systemd unit runs it as ExecStartPre=)",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean shutdown; 1 when the start is refused, with the refusal on stderr:
    one line ``numamem: <why>`` (a state mismatch adds indented lines: what differs, the
    containers concerned, the fix); a flag value that does not parse is a usage error
    (:class:`~numamem.cli.UsageError`: the command's usage, exit 2). ``--check`` exits the
    same way, or 0 with a summary line, having changed nothing.

    Log lines are held until the daemon serves (``--check``: until it passed; warnings
    only, unless ``--log-level debug``), so that a refused start prints only its refusal
    (with ``--log-level debug`` they are written at once).
    """
    from numamem import logging as nlog
    from numamem.config.load import check_flags, config_from_args
    from numamem.version import build_info

    checks = policy_option_checks()
    try:
        check_flags(args, checks)
    except NumamemError as err:
        raise UsageError(str(err)) from err
    try:
        cfg = config_from_args(args, checks)
    except NumamemError as err:
        print(f"numamem: {err}", file=sys.stderr)
        return EXIT_REFUSED
    held = None if cfg.log_level == "debug" else nlog.HeldStream(sys.stderr)
    # --check shows its warnings (a suspicious topology, auto without a bound), not info.
    level = "warning" if args.check and cfg.log_level == "info" else cfg.log_level
    nlog.configure(level, cfg.log_format, stream=held)
    log = nlog.get_logger("serve")
    log.info("checking" if args.check else "starting", **build_info(), **describe(cfg))
    if cfg.ignored_kubelet_fields:
        log.debug(
            "kubelet configuration fields numamem does not use",
            path=args.config,
            fields=list(cfg.ignored_kubelet_fields),
        )
    try:
        if args.check:
            summary = check(cfg)
        else:
            return serve(cfg, held)
    except NumamemError as err:
        if held is not None:
            held.discard()
        print(f"numamem: {err}", file=sys.stderr)
        return EXIT_REFUSED
    if held is not None:
        held.release()
    print(f"numamem: {summary}")
    return 0


def policy_option_checks() -> ValueChecks:
    """The policy options' values parsed as the daemon parses them (the configuration layer
    cannot import the parsers): a flag's bad value is then a usage error naming the flag, a
    file's a refusal naming the field."""
    from numamem.memorymanager.policy.options import parse_options
    from numamem.topologymanager.policy import parse_policy_options

    return {
        "memory_manager_policy_options": lambda value: parse_options(dict(value)),
        "topology_manager_policy_options": lambda value: parse_policy_options(dict(value)),
    }


def serve(cfg: Config, held: HeldStream | None) -> int:
    from numamem.api.app import build_components
    from numamem.api.sdnotify import Notifier
    from numamem.api.server import Daemon

    daemon = Daemon(
        cfg, build_components, on_serving=held.release if held else None, notifier=Notifier()
    )
    return daemon.run()


def check(cfg: Config) -> str:
    """``--check``: the start's validations (:mod:`numamem.api.precheck`); the summary line."""
    from numamem.api.app import build_components
    from numamem.api.precheck import READ_ONLY, check_start

    return check_start(cfg, lambda c: build_components(c, READ_ONLY)).summary()
