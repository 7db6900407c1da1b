"""``numamem nri``: the NRI plugin (containerd's Node Resource Interface), a client of the daemon.

External (the default): connects to the runtime's NRI socket, reconnects with backoff when
the runtime restarts. Pre-launched: when ``NRI_PLUGIN_SOCKET`` is set, the runtime started
this process as ``plugin_path/IDX-NAME`` with its connection on that fd (name and index from
``NRI_PLUGIN_NAME``/``NRI_PLUGIN_IDX``, options from the runtime's config string: see
:mod:`numamem.nri.options`); ``numamem`` run with no arguments in that environment is this
command, so the plugin file can be a symlink to the ``numamem`` executable.

With ``--status-socket``, its status is served there for ``numamem nri-status`` (the
DaemonSet's probes; :mod:`numamem.nri.statusserver`).

Exit codes: 0 after SIGTERM/SIGINT (external) or when the runtime closes the connection
(pre-launched); 1 when the plugin cannot start (a bad ``NRI_PLUGIN_*`` variable, a status
socket it cannot serve on); 2 usage (the command line).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from numamem.cli.common import EXIT_FAILED, EXIT_OK, UsageError, add_socket_argument

DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"
"""``numamem.nri.plugin.DEFAULT_SOCKET`` (a test checks they agree), without its imports."""
HELP = "run the NRI plugin: pin containers a runtime (containerd) creates, as the kubelet would"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "nri",
        help=HELP,
        description=(
            "Serve as an NRI plugin of the container runtime until SIGTERM/SIGINT: admit each "
            "container of a Guaranteed pod through the daemon as the kubelet's memory manager "
            "(container scope) would, set its cpuset.mems, resize, release and reconcile. "
            "Pre-launched by the runtime (NRI_PLUGIN_SOCKET set), the name and index come from "
            "the environment and the options also from the runtime's config string (YAML: "
            "socket, on-reject, log-level, log-format, log-file)."
        ),
    )
    parser.add_argument(
        "--nri-socket",
        default=DEFAULT_NRI_SOCKET,
        metavar="PATH",
        help="the runtime's NRI socket (external plugin; default: %(default)s)",
    )
    add_socket_argument(parser)
    parser.add_argument(
        "--plugin-name", default="numamem", help="the plugin's name (default: %(default)s)"
    )
    parser.add_argument(
        "--plugin-idx",
        default="50",
        metavar="IDX",
        help="two digits: the runtime calls plugins in ascending order (default: %(default)s)",
    )
    parser.add_argument(
        "--on-reject",
        choices=("fail", "unpinned"),
        default="fail",
        help="a container numamem does not admit, or cannot reach the daemon for: fail its "
        "creation with the reason, or start it unpinned, logged and counted (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    parser.add_argument("--log-format", choices=("json", "console"), default="json")
    parser.add_argument(
        "--status-socket",
        metavar="PATH",
        help="serve the plugin's status (one JSON line per connection: registered with the "
        "runtime or not, and why) on this unix socket, for `numamem nri-status` probes "
        "(default: none)",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="where the log goes: - (stderr), syslog (/dev/log), or a file appended to "
        "(default: $NUMAMEM_NRI_LOG_FILE, else stderr; pre-launched, whose stderr the runtime "
        "makes /dev/null: syslog where /dev/log exists, else /var/log/numamem-nri.log)",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from numamem import logging as nlog
    from numamem.errors import ConfigError, StartupError
    from numamem.nri.logsink import default_log_file, open_log, point_stdio_at
    from numamem.nri.memoryplugin import MemoryPlugin
    from numamem.nri.options import PluginOptions
    from numamem.nri.plugin import ENV_IDX, ENV_NAME, Plugin
    from numamem.nri.statusserver import StatusServer

    prelaunched = Plugin.is_prelaunched()
    try:
        options = PluginOptions(
            socket=args.socket,
            on_reject=args.on_reject,
            log_level=args.log_level,
            log_format=args.log_format,
            log_file=args.log_file or default_log_file(prelaunched),
        )
        stream = open_log(options.log_file, sys.stderr)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    if prelaunched:
        point_stdio_at(stream)
    handler = MemoryPlugin(options)
    handler.reconfigure_logging = True
    try:
        if prelaunched:
            plugin = Plugin.prelaunched(handler)
            name, idx = os.environ.get(ENV_NAME, ""), os.environ.get(ENV_IDX, "")
            handler.config_source = (
                f"the runtime's config for this plugin (plugin_config_path/{idx}-{name}.conf "
                f"or {name}.conf)"
            )
        else:
            plugin = Plugin(
                handler, name=args.plugin_name, idx=args.plugin_idx, socket_path=args.nri_socket
            )
    except ConfigError as err:
        handler.stop()
        if prelaunched:
            print(f"numamem: {err}", file=stream)
            return EXIT_FAILED
        raise UsageError(str(err)) from None
    # Not before: a usage error logs nothing (and leaves logging as it was).
    nlog.configure(options.log_level, options.log_format, stream=stream, cache=False)
    log = nlog.get_logger("nri")
    handler.reconciler.updater = plugin.update_containers
    stop_on_signal(plugin.stop, log)
    log.info(
        "NRI plugin starting",
        mode="pre-launched" if prelaunched else "external",
        plugin=f"{plugin.idx}-{plugin.name}",
        nri_socket=None if prelaunched else plugin.socket_path,
        daemon_socket=options.socket,
        on_reject=options.on_reject,
        log_file=options.log_file,
    )
    status = None
    if args.status_socket:
        status = StatusServer(args.status_socket, lambda: {**plugin.status(), **handler.status()})
        try:
            status.start()
        except (ConfigError, StartupError) as err:
            handler.stop()
            print(f"numamem: {err}", file=sys.stderr)
            return EXIT_FAILED
    handler.start()
    try:
        plugin.run()
    finally:
        if status is not None:
            status.stop()
        handler.stop()
        log.info("NRI plugin stopped", counts=handler.counts)
    return EXIT_OK


def stop_on_signal(stop: Callable[[], None], log: Any) -> None:
    """Call ``stop`` (and log) on a thread of its own once SIGTERM or SIGINT arrives. The
    handler only writes the signal's number to a pipe (async-signal-safe: it takes no lock,
    which the interrupted main thread may hold, e.g. the plugin's own in a session)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def handler(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            os.write(write_fd, bytes([signum]))

    def watch() -> None:
        signum = os.read(read_fd, 1)
        log.info("NRI plugin stopping", signal=signal.Signals(signum[0]).name)
        stop()

    threading.Thread(target=watch, name="nri-signals", daemon=True).start()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
