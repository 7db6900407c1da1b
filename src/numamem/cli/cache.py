"""``numamem cache``: the metacache's containers, pools and regions."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    UsageError,
    add_client_args,
    client_command,
    fail,
    message_to_dict,
    plural,
    print_json,
    print_table,
)
from numamem.client import NumamemClient
from numamem.config.model import DEFAULT_STATE_DIR


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "cache",
        help="list the metacache's containers, pools and regions (or export its files offline)",
        description=(
            "numamem cache [containers|pools|regions] [--pod UID]: tables of the live metacache\n"
            "  entries (all three kinds unless one is named).\n"
            "numamem cache export [--state-dir D]: with the daemon stopped, fold the journal\n"
            "  into D/sys_advisor_state, leaving one complete, checksummed checkpoint and an\n"
            "  empty journal (a graceful shutdown does the same)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "kind",
        nargs="?",
        choices=("containers", "pools", "regions", "export"),
        help="only this kind; export: compact the state files offline",
    )
    parser.add_argument("--pod", default="", metavar="UID", help="containers of this pod only")
    parser.add_argument(
        "--state-dir",
        default=os.environ.get("NUMAMEM_STATE_DIR", DEFAULT_STATE_DIR),
        metavar="DIR",
        help="export: the daemon's state dir (default: %(default)s)",
    )
    add_client_args(parser)
    live = client_command(run)
    parser.set_defaults(run=lambda a: run_export(a) if a.kind == "export" else live(a))


def run_export(args: argparse.Namespace) -> int:
    if args.pod:
        raise UsageError("--pod selects containers; export compacts the whole state")
    return export(Path(args.state_dir))


def export(state_dir: Path) -> int:
    """Offline: snapshot + journal folded into one snapshot, under the daemon's lock (so it
    never races a running daemon)."""
    from numamem.api.statedir import LOCK_FILE, acquire_lock
    from numamem.errors import CheckpointError, PersistenceError, StartupError
    from numamem.metacache import journal
    from numamem.metacache.persistence import STATE_FILE

    try:
        fd, created = acquire_lock(state_dir / LOCK_FILE)
    except StartupError as err:
        return fail(str(err))
    try:
        restored = journal.export(state_dir)
    except (CheckpointError, PersistenceError) as err:
        return fail(f"{state_dir}: {err}")
    finally:
        os.close(fd)
        if created:
            (state_dir / LOCK_FILE).unlink(missing_ok=True)
    state = restored.state
    containers = sum(len(c) for c in state.pods.values())
    print(
        f"{state_dir / STATE_FILE}: {plural(containers, 'container')}, "
        f"{plural(len(state.pools), 'pool')}, {plural(len(state.regions), 'region')} "
        f"(generation {restored.generation}); {journal.JOURNAL_FILE} is empty"
    )
    return EXIT_OK


def _assignments(values: Any) -> str:
    return " ".join(f"{numa}:{cpus}" for numa, cpus in sorted(values.items())) or "-"


def run(args: argparse.Namespace, client: NumamemClient) -> int:
    if args.pod and args.kind in ("pools", "regions"):
        raise UsageError(f"--pod selects containers; {args.kind} belong to no pod")
    kinds = [args.kind] if args.kind else ["containers", "pools", "regions"]
    data: dict[str, list[Any]] = {}
    if "containers" in kinds:
        data["containers"] = list(client.list_containers(args.pod))
    if "pools" in kinds:
        data["pools"] = list(client.list_pools())
    if "regions" in kinds:
        data["regions"] = list(client.list_regions())
    if args.json:
        print_json({kind: [message_to_dict(m) for m in items] for kind, items in data.items()})
        return EXIT_OK
    first = True
    for kind, items in data.items():
        if not first:
            print()
        first = False
        if kind == "containers":
            print_table(
                ["POD", "CONTAINER", "QOS", "CPU-REQ", "MEM-REQ", "POOL", "ASSIGNMENTS", "REGIONS"],
                [
                    [
                        c.pod_uid,
                        c.container_name,
                        c.qos_level or "-",
                        f"{c.cpu_request:g}",
                        f"{c.memory_request:g}",
                        c.owner_pool_name or "-",
                        _assignments(c.topology_aware_assignments),
                        ",".join(c.region_names) or "-",
                    ]
                    for c in items
                ],
            )
        elif kind == "pools":
            print_table(
                ["POOL", "ASSIGNMENTS", "ORIGINAL", "REGIONS"],
                [
                    [
                        p.pool_name,
                        _assignments(p.topology_aware_assignments),
                        _assignments(p.original_topology_aware_assignments),
                        ",".join(p.region_names) or "-",
                    ]
                    for p in items
                ],
            )
        else:
            print_table(
                ["REGION", "TYPE", "POOL", "NUMAS", "HEADROOM", "PODS"],
                [
                    [
                        r.region_name,
                        r.region_type or "-",
                        r.owner_pool_name or "-",
                        r.binding_numas or "-",
                        f"{r.headroom:g}",
                        len(r.pods),
                    ]
                    for r in items
                ],
            )
    return EXIT_OK
