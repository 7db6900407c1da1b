"""The ``numamem`` command line as a whole: every command is listed, documented and consistent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from numamem.cli.common import human_bytes
from numamem.cli.main import build_parser, main
from numamem.quantity import format_bytes
from numamem.testing.server import InProcessServer

CLIENT_COMMANDS = [
    "topology",
    "state",
    "hints",
    "explain",
    "admit",
    "resize",
    "release",
    "sync",
    "cache",
    "residency",
]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_help_lists_every_command_with_a_one_line_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name in ["serve", "plan-reservations", "nri", "nri-status", *CLIENT_COMMANDS]:
        # argparse puts a long command's description on the next line
        assert any(
            line.split()[:1] == [name]
            and (
                len(line.split()) > 1 or (i + 1 < len(lines) and lines[i + 1].startswith(" " * 10))
            )
            for i, line in enumerate(lines)
        ), name
    assert "Exit codes: 0 success, 1 failure" in out
    assert set(_subparsers()) == {
        "serve",
        "health",
        "plan-reservations",
        "nri",
        "nri-status",
        *CLIENT_COMMANDS,
    }


@pytest.mark.parametrize("name", [*CLIENT_COMMANDS, "health"])
def test_every_client_command_has_socket_timeout_and_json(name: str) -> None:
    options = {opt for a in _subparsers()[name]._actions for opt in a.option_strings}
    assert {"--socket", "--timeout", "--json"} <= options


def test_health_json(numamem_server: InProcessServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["health", "--json", "--socket", numamem_server.socket]) == 0
    assert json.loads(capsys.readouterr().out) == {"service": "", "status": "SERVING"}


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["health", "--address", "localhost"], "expected HOST:PORT with a port from 1 to 65535"),
        (["health", "--address", "::1"], "expected HOST:PORT"),
        (["health", "--address", "127.0.0.1:0"], "expected HOST:PORT"),
        (["health", "--timeout", "0"], "'0': expected seconds, more than 0"),
        (["topology", "--timeout", "-1"], "'-1': expected seconds, more than 0"),
        (["state", "--timeout", "nan"], "'nan': expected seconds, more than 0"),
    ],
)
def test_addresses_without_a_port_and_zero_timeouts_are_usage_errors(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`health --address localhost` dialled 127.0.0.1:443 and `--timeout 0` answered
    DEADLINE_EXCEEDED: both are usage errors now, exit 2 naming the flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[1]}: " in err and fragment in err


def test_health_accepts_bracketed_ipv6_addresses() -> None:
    from numamem.cli.health import host_port

    assert host_port("[::1]:9440") == "[::1]:9440"
    assert host_port("localhost:9440") == "localhost:9440"


def test_usage_error_is_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain"])  # -f is required
    assert exit_info.value.code == 2
    assert "the following arguments are required: -f/--file" in capsys.readouterr().err


def test_unreachable_daemon_is_one_line_and_exit_code_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["topology", "--socket", "/nonexistent/numamem.sock", "--timeout", "2"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "numamem: UNAVAILABLE: no daemon socket at /nonexistent/numamem.sock (is numamem running? --socket)"
    ]


def test_a_mistyped_flag_shows_the_commands_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--memory-manger-policy", "Static"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: numamem serve ")
    assert "numamem serve: error: unrecognized arguments: --memory-manger-policy" in err


def test_serve_help_lists_the_allowed_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "{None,Static}" in out
    assert "{none,best-effort,restricted,single-numa-node}" in out
    assert "'memory.available<0%' disables" in out


def test_state_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["state", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "numamem state verify [serve flags | --config FILE]" in out


GUARANTEED_POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, uid: u-1}
spec:
  containers:
    - name: app
      resources:
        requests: {cpu: "1", memory: 1Gi}
        limits: {cpu: "1", memory: 1Gi}
"""


def test_release_sync_and_unknown_ids(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = ["--socket", numamem_server.socket]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(GUARANTEED_POD)
    assert main(["admit", "-f", str(manifest), "--no-start", *sock]) == 0
    out = capsys.readouterr().out
    assert "numamem release --pod u-1" in out  # --no-start says how to release it
    # An unknown id is reported, not "released".
    assert main(["release", "nope/app", *sock]) == 1
    captured = capsys.readouterr()
    assert "released" not in captured.out
    assert "container id 'nope/app' is not known; nothing released" in captured.err
    # The pod's memory, whose ids were never recorded, is released by uid.
    assert main(["release", "--pod", "u-1", *sock]) == 0
    assert capsys.readouterr().out.strip() == "released u-1/app"
    assert main(["release", "--pod", "u-1", *sock]) == 1  # nothing left: said so
    assert "pod 'u-1' holds no memory" in capsys.readouterr().err
    # sync: the listed pods stay, everything else goes.
    assert main(["admit", "-f", str(manifest), "--no-start", *sock]) == 0
    other = tmp_path / "other.yaml"
    other.write_text(GUARANTEED_POD.replace("u-1", "u-2").replace("web", "api"))
    assert main(["admit", "-f", str(other), "--no-start", *sock]) == 0
    capsys.readouterr()
    assert main(["sync", "-f", str(manifest), *sock]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["1 live pod; released 1 container", "released u-2/app"]
    assert set(numamem_server.client.get_state().entries) == {"u-1"}
    with pytest.raises(SystemExit) as exit_info:  # releasing everything needs --none
        main(["sync", *sock])
    assert exit_info.value.code == 2
    assert "--none" in capsys.readouterr().err
    assert main(["sync", "--none", *sock]) == 0
    assert numamem_server.client.get_state().entries == {}


def test_a_manifest_without_uid_is_refused(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(GUARANTEED_POD.replace(", uid: u-1", ""))
    assert main(["admit", "-f", str(manifest), "--socket", numamem_server.socket]) == 1
    err = capsys.readouterr().err
    assert "metadata.uid is missing" in err and "kubectl get pod web -o yaml" in err
    assert numamem_server.client.get_state().entries == {}


def test_sync_reads_pod_lists_and_several_documents(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [yaml.safe_load(GUARANTEED_POD.replace("u-1", f"u-{i}")) for i in range(3)]
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": pods[:2]}))
    docs = tmp_path / "docs.yaml"
    docs.write_text(yaml.safe_dump_all(pods[1:]))
    for i in range(3):
        one = tmp_path / f"p{i}.yaml"
        one.write_text(yaml.safe_dump(pods[i]))
        assert main(["admit", "-f", str(one), "--socket", numamem_server.socket]) == 0
    capsys.readouterr()
    assert (
        main(["sync", "-f", str(listing), "-f", str(docs), "--socket", numamem_server.socket]) == 0
    )
    assert capsys.readouterr().out.startswith("3 live pods; released 0 containers")
    assert set(numamem_server.client.get_state().entries) == {"u-0", "u-1", "u-2"}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "\n---\n",
        "apiVersion: v1\nkind: List\nitems: []\nmetadata:\n  resourceVersion: ''\n",
    ],
    ids=["empty-file", "empty-documents", "empty-list"],
)
def test_sync_of_input_without_pods_needs_none(
    numamem_server: InProcessServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
) -> None:
    """Issue 24: `sync -f empty.yaml` released every container. An empty `kind: List` is what
    `kubectl get pods -o yaml` prints for a wrong namespace or context: input without pods
    releases nothing unless --none says so, as plain `sync` does."""
    sock = ["--socket", numamem_server.socket]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(GUARANTEED_POD)
    assert main(["admit", "-f", str(manifest), *sock]) == 0
    empty = tmp_path / "empty.yaml"
    empty.write_text(content)
    capsys.readouterr()
    assert main(["sync", "-f", str(empty), *sock]) == 1
    err = capsys.readouterr().err
    assert f"{empty}: no pods" in err and "nothing released" in err and "--none" in err
    assert set(numamem_server.client.get_state().entries) == {"u-1"}
    # --none beside input that lists pods contradicts it: a usage error, nothing released.
    with pytest.raises(SystemExit) as exit_info:
        main(["sync", "-f", str(manifest), "--none", *sock])
    assert exit_info.value.code == 2
    assert "--none, but 1 live pod in" in capsys.readouterr().err
    assert set(numamem_server.client.get_state().entries) == {"u-1"}
    # With --none, the empty input releases everything.
    assert main(["sync", "-f", str(empty), "--none", *sock]) == 0
    assert capsys.readouterr().out.startswith("0 live pods; released 1 container\n")
    assert numamem_server.client.get_state().entries == {}


def test_sync_refuses_any_file_without_pods_beside_files_with_pods(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sync -f ns1.yaml -f ns2.yaml`, one file per namespace, and ns2.yaml is the empty List
    of a wrong context: before, ns2's pods were released (issue 24's item, half fixed)."""
    sock = ["--socket", numamem_server.socket]
    ns1, ns2_real = tmp_path / "ns1.yaml", tmp_path / "ns2-real.yaml"
    ns1.write_text(GUARANTEED_POD.replace("u-1", "uid-1"))
    ns2_real.write_text(GUARANTEED_POD.replace("u-1", "uid-2"))
    for manifest in (ns1, ns2_real):
        assert main(["admit", "-f", str(manifest), *sock]) == 0
    ns2 = tmp_path / "ns2.yaml"
    ns2.write_text('apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: ""\n')
    capsys.readouterr()
    assert main(["sync", "-f", str(ns1), "-f", str(ns2), *sock]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(f"numamem: sync: {ns2}: no pods (an empty file, or an empty")
    assert "the other files list 1 live pod" in out.err and "nothing released" in out.err
    assert "Leave out a file whose namespace has no live pod" in out.err and "--none" in out.err
    assert set(numamem_server.client.get_state().entries) == {"uid-1", "uid-2"}
    # The files with pods alone: the usual sync.
    assert main(["sync", "-f", str(ns1), "-f", str(ns2_real), *sock]) == 0
    assert capsys.readouterr().out.startswith("2 live pods; released 0 containers")
    assert main(["sync", "-f", str(ns1), *sock]) == 0
    assert capsys.readouterr().out.startswith("1 live pod; released 1 container")
    assert set(numamem_server.client.get_state().entries) == {"uid-1"}


@pytest.mark.parametrize(
    "argv",
    [["release"], ["release", "a/b", "--pod", "u"], ["sync"]],
    ids=["release-nothing", "release-both", "sync-nothing"],
)
def test_usage_errors_of_client_commands_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Checks argparse cannot express are usage errors too: exit 2 and the command's usage."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--socket", "/nonexistent/n.sock"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: numamem {argv[0]} ")
    assert f"numamem {argv[0]}: error: " in err


def test_explain_and_state_print_bytes_alike() -> None:
    """One formatter for every size numamem prints: exact units where they divide, else 2 decimals."""
    assert format_bytes(4926017536) == "4.59Gi"
    assert format_bytes(10 * 2**30) == "10Gi"
    assert format_bytes(4810488 * 1024) == "4.59Gi"  # was '4810488Ki' in explain
    assert format_bytes(4810488 * 1024) == human_bytes(4810488 * 1024)


EVIL = "web\x1b]0;owned\x07\x1b[2J\rFAKE\u202e"
"""A name a client chose: an OSC title, a screen clear, a carriage return, an RTL override."""


def raw_output(text: str, command: str) -> list[str]:
    """What is wrong with ``command``'s output: characters a terminal would run, or no
    escaped name at all (the check would be vacuous)."""
    bad = sorted({ch for ch in text if not ch.isprintable() and ch != "\n"})
    if bad:
        return [f"numamem {command} printed {bad!r} raw: {text[:300]!r}"]
    if "\\x1b]0;owned\\x07\\x1b[2J\\rFAKE\\u202e" not in text:
        return [f"numamem {command} did not print the name: {text[:300]!r}"]
    return []


def test_client_chosen_names_never_reach_the_terminal_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod, container, pool and region named with terminal control sequences: every client
    command prints them as quote(style="bare") writes them (before: `numamem state` printed
    them raw, and the operator's terminal ran them)."""
    from numamem.testing.server import serve_in_process
    from numamem.v1 import memorymanager_pb2 as mm
    from numamem.v1 import metacache_pb2 as mc

    res = {"cpu": "1", "memory": "1Gi"}
    pod = mm.Pod(
        uid="u-" + EVIL,
        namespace="default",
        name=EVIL,
        containers=[mm.Container(name="app" + EVIL, requests=res, limits=res)],
    )
    with serve_in_process(podresources_socket=str(tmp_path / "pr" / "pr.sock")) as server:
        sock = ["--socket", server.socket]
        server.client.allocate(pod, "app" + EVIL)
        server.client.add_container(pod, "app" + EVIL, "cid-" + EVIL)
        server.client.add_container_info(
            mc.ContainerInfo(
                pod_uid="u-" + EVIL,
                container_name="app" + EVIL,
                qos_level="shared_cores",
                owner_pool_name="share" + EVIL,
                region_names=["region" + EVIL],
            )
        )
        server.client.set_pool_info(mc.PoolInfo(pool_name="share" + EVIL))
        server.client.set_region_info(mc.RegionInfo(region_name="region" + EVIL))
        manifest = tmp_path / "pod.yaml"
        manifest.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "other", "namespace": "shop", "uid": "u-" + EVIL},
                    "spec": {"containers": [{"name": "app" + EVIL, "resources": {"limits": res}}]},
                }
            )
        )
        capsys.readouterr()
        problems = []
        for argv in (
            ["state"],
            ["cache"],
            ["residency"],
            ["hints", "-f", str(manifest)],
            ["explain", "-f", str(manifest)],
        ):
            main([*argv, *sock])
            problems += raw_output(capsys.readouterr().out, argv[0])
        other = tmp_path / "other.yaml"
        other.write_text(GUARANTEED_POD)
        assert main(["sync", "-f", str(other), *sock]) == 0
        problems += raw_output(capsys.readouterr().out, "sync")
        assert problems == []
