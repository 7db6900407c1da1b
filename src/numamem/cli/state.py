"""``numamem state``: the memory manager state, live from the daemon or offline from a file.

* ``numamem state [--socket S] [--json]``: the live per-NUMA table and assignments.
* ``numamem state show [--state-dir D] [--json]``: the same, read from
  ``<state-dir>/memory_manager_state`` without a daemon.
* ``numamem state verify [serve flags | --config FILE]``: decode and verify the
  checkpoint with the kubelet's rules, check the memory manager invariants and
  numamem's container map, and check the state **against this machine and
  configuration** exactly as ``numamem serve`` with the same flags would at start:
  the same report when it would refuse, what it would re-baseline when it would
  accept a changed machine. Exit code 1 if the start would be refused.
* ``numamem state diff [serve flags | --config FILE]``: the stored machine state
  beside the one recomputed from this machine, the configuration and the stored
  blocks, node by node (``*`` marks what differs).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from numamem.api.convert import pod_entries_from_proto, state_from_proto
from numamem.cli.common import (
    EXIT_OK,
    add_client_args,
    add_json_flag,
    client_command,
    fail,
    message_to_dict,
    print_json,
)
from numamem.cli.state_table import render
from numamem.client import NumamemClient
from numamem.config.flags.table import add_serve_arguments
from numamem.config.model import DEFAULT_STATE_DIR
from numamem.v1 import memorymanager_pb2

MACHINE_FLAGS = (
    "--state-dir",
    "--sysfs-root",
    "--proc-root",
    "--memory-manager-policy",
    "--memory-manager-policy-options",
    "--reserved-memory",
    "--system-reserved",
    "--kube-reserved",
    "--eviction-hard",
    "--topology-manager-policy",
    "--topology-manager-scope",
    "--topology-manager-policy-options",
    "--feature-gates",
)
"""The ``numamem serve`` flags ``state verify`` and ``state diff`` read (with ``--config``):
what the memory manager's start-up check depends on."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "state",
        help="show the memory manager state (live; or offline: show, verify against this "
        "machine, diff)",
        description=(
            "numamem state [--socket S] [--json]: the live per-NUMA table and assignments.\n"
            "numamem state show [--state-dir D] [--json]: the same, read from\n"
            "  D/memory_manager_state without a daemon.\n"
            "numamem state verify [serve flags | --config FILE]: check the state file with the\n"
            "  kubelet's rules, then check it against this machine and configuration as\n"
            "  numamem serve with the same flags would at start; exit code 1 if it would refuse.\n"
            "numamem state diff [serve flags | --config FILE]: the stored machine state beside\n"
            "  the one recomputed from this machine and configuration, node by node."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_args(parser)
    parser.set_defaults(run=run_live)
    actions = parser.add_subparsers(dest="action", metavar="{show,verify,diff}")
    show_parser = actions.add_parser("show", help="print D/memory_manager_state without a daemon")
    show_parser.add_argument(
        "--state-dir",
        default=os.environ.get("NUMAMEM_STATE_DIR", DEFAULT_STATE_DIR),
        metavar="DIR",
        help="state dir (default: %(default)s)",
    )
    add_json_flag(
        show_parser, "print the file's JSON (the kubelet's own field names)", inherit=True
    )
    show_parser.set_defaults(run=lambda a: show(Path(a.state_dir), as_json=a.json))
    for name, helptext, runner in (
        (
            "verify",
            "check the state file, and the state against this machine and configuration "
            "(the machine and memory manager flags of numamem serve, or --config); exit code 1 "
            "if numamem serve would refuse to start",
            run_verify,
        ),
        (
            "diff",
            "the stored machine state beside the one recomputed from this machine and "
            "configuration, node by node; exit code 1 when they differ (as diff(1))",
            run_diff,
        ),
    ):
        action = actions.add_parser(name, help=helptext, description=helptext)
        add_serve_arguments(action, only=MACHINE_FLAGS)
        add_json_flag(action, inherit=True)
        action.set_defaults(run=runner)


def run_live(args: argparse.Namespace) -> int:
    return client_command(live)(args)


def live(args: argparse.Namespace, client: NumamemClient) -> int:
    resp = client.get_state()
    if args.json:
        print_json(message_to_dict(resp))
        return EXIT_OK
    machine, assignments = state_from_proto(resp)
    names = {
        uid: (entry.namespace, entry.name)
        for uid, entry in resp.entries.items()
        if entry.namespace or entry.name
    }
    shared = {
        uid: {
            name
            for name, ctr in entry.containers.items()
            if ctr.isolation == memorymanager_pb2.RESOURCE_ISOLATION_POD
        }
        for uid, entry in resp.entries.items()
    }
    render(resp.policy_name, machine, assignments, names, pod_entries_from_proto(resp), shared)
    return EXIT_OK


def show(state_dir: Path, *, as_json: bool) -> int:
    from numamem.cli.state_check import load, names, read_current, shared_containers
    from numamem.errors import CheckpointError

    try:
        current = read_current(state_dir)  # the journal read once, for the state and the map
        loaded = current if isinstance(current, int) else load(state_dir, current)
    except CheckpointError as err:
        return fail(str(err))
    if isinstance(loaded, int):
        return loaded
    if as_json:
        from numamem.checkpoint.kubeletwrite import encode_v1, encode_v3

        if loaded.pod_entries:
            text = encode_v3(
                loaded.policy_name, loaded.machine_state, loaded.assignments, loaded.pod_entries
            )
        else:
            text = encode_v1(loaded.policy_name, loaded.machine_state, loaded.assignments)
        print_json(json.loads(text))
        return EXIT_OK
    render(
        loaded.policy_name,
        loaded.machine_state,
        loaded.assignments,
        names(state_dir),
        loaded.pod_entries,
        shared_containers(current.containers, loaded),
    )
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    from numamem.cli.state_check import verify

    return verify(args)


def run_diff(args: argparse.Namespace) -> int:
    from numamem.cli.state_diff import diff

    return diff(args)
