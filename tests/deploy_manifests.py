"""Loading the deploy/ manifests and reading the daemon flags they pass (shared by the deploy tests)."""

from __future__ import annotations

import argparse
import configparser
import shlex
from pathlib import Path
from typing import Any

import yaml

from numamem.config.flags.table import add_serve_arguments
from numamem.config.load import config_from_args
from numamem.config.model import Config

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"


def deploy_file(*parts: str) -> Path:
    path = DEPLOY.joinpath(*parts)
    if not path.exists():
        raise AssertionError(f"{path} is missing: deploy/ must ship it")
    return path


POD_IP = "10.244.1.7"
"""What the downward API gives $(POD_IP) in these tests."""


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """The kubelet's ``$(VAR)`` expansion of container args."""
    out = []
    for arg in args:
        expanded = arg
        for name, value in env.items():
            expanded = expanded.replace(f"$({name})", value)
        out.append(expanded)
    return out


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's env with the downward-API pod IP filled in."""
    env = {}
    for var in container.get("env") or []:
        if var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[var["name"]] = POD_IP
        elif "value" in var:
            env[var["name"]] = var["value"]
    return env


def serve_config(args: list[str], config_file: Path | None = None) -> Config:
    """The Config `numamem serve ARGS` builds, reading ``config_file`` in place of its --config."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    namespace = parser.parse_args([a for a in args if a != "serve"])
    if config_file is not None:
        namespace.config = str(config_file)
    return config_from_args(namespace)


def daemonset_docs() -> dict[str, dict[str, Any]]:
    """The documents of deploy/kubernetes/daemonset.yaml by kind."""
    docs = list(yaml.safe_load_all(deploy_file("kubernetes", "daemonset.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def numamem_container(daemonset: dict[str, Any]) -> dict[str, Any]:
    [container] = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "numamem"
    ]
    return container


def nri_container(daemonset: dict[str, Any]) -> dict[str, Any]:
    """The NRI plugin's container (``numamem nri``, external mode)."""
    [container] = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "numamem-nri"
    ]
    return container


def cli_args(argv: list[str]) -> argparse.Namespace:
    """``numamem ARGV`` as the numamem command parses it (its own parser: a flag it does not
    know, or a bad value, fails the test as it would fail the container)."""
    from numamem.cli.main import build_parser

    return build_parser(argv[0], listed=False).parse_args(argv)


def probe_command(container: dict[str, Any], probe: str) -> list[str]:
    command: list[str] = container[probe]["exec"]["command"]
    return command


def systemd_unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(deploy_file("systemd", "numamem.service").read_text())
    return unit


def exec_start_args(unit: configparser.ConfigParser, key: str = "ExecStart") -> list[str]:
    """ExecStart (or ``key``: ExecStartPre) as argv (continuation lines joined)."""
    return shlex.split(unit["Service"][key].replace("\\\n", " "))
