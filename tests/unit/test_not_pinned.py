"""An admission that pins nothing says why (issue 38): every ``not_pinned_reason`` the daemon
gives, from what it knows (policy, QoS class, gates, requests), in Admit and in Explain's
decision, and as ``numamem admit``/``explain`` print it (text and ``--json``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from numamem.cli.main import main
from numamem.config.model import FeatureGates
from numamem.memorymanager.policy import unpinned
from numamem.testing.server import serve_in_process
from numamem.v1 import memorymanager_pb2 as mm

GUARANTEED = {"cpu": "1", "memory": "1Gi"}


@dataclass
class Case:
    name: str
    config: dict[str, Any]
    pod: mm.Pod
    expected: Mapping[str, str]
    """Container -> reason ("" when pinned)."""
    fragment: str
    """A part of the message of the first reason."""
    kubectl: dict[str, Any] = field(default_factory=dict)


def container(name: str, requests: Mapping[str, str], limits: Mapping[str, str]) -> mm.Container:
    return mm.Container(name=name, requests=dict(requests), limits=dict(limits))


def pod(*containers: mm.Container, **fields: Any) -> mm.Pod:
    return mm.Pod(uid="u1", namespace="ns", name="web", containers=list(containers), **fields)


POD_LEVEL_GATES = {"feature_gates": FeatureGates(True, True)}

CASES = [
    Case(
        unpinned.POLICY_NONE,
        {"memory_manager_policy": "None", "reserved_memory": ()},
        pod(container("app", GUARANTEED, GUARANTEED)),
        {"app": unpinned.POLICY_NONE},
        "the memory manager policy is None: it pins no memory (--memory-manager-policy Static",
    ),
    Case(
        unpinned.NOT_GUARANTEED,
        {},
        pod(container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})),
        {"app": unpinned.NOT_GUARANTEED},
        "the pod's QoS class is Burstable (container 'app' requests cpu 1 but limits it to 2); "
        "only Guaranteed pods get memory pinned",
    ),
    Case(
        unpinned.POD_LEVEL_GATES_OFF,
        {},
        pod(
            container("app", GUARANTEED, GUARANTEED),
            requests={"cpu": "2", "memory": "2Gi"},
            limits={"cpu": "2", "memory": "2Gi"},
        ),
        {"app": unpinned.POD_LEVEL_GATES_OFF},
        "PodLevelResources and PodLevelResourceManagers are not both on",
    ),
    Case(
        unpinned.POD_LEVEL_SHARED,
        POD_LEVEL_GATES,  # the container scope: only the equivalent-Guaranteed are pinned
        pod(
            container("db", GUARANTEED, GUARANTEED),
            container("web", {"cpu": "500m"}, {}),
            requests={"cpu": "2", "memory": "4Gi"},
            limits={"cpu": "2", "memory": "4Gi"},
        ),
        {"db": "", "web": unpinned.POD_LEVEL_SHARED},
        "container 'web' is not equivalent-Guaranteed (its own cpu and memory requests do not "
        "equal its limits): it shares the pod's pod-level resources, which are pinned only when "
        "the pod is allocated as a whole (--topology-manager-scope pod",
    ),
]


def _reasons(containers: Any) -> dict[str, str]:
    return {c.container_name: c.not_pinned_reason for c in containers}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_reason_through_admit_and_explain(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_in_process(**case.config) as server:
        explained = server.client.explain(case.pod).decision
        assert explained.admitted
        assert _reasons(explained.containers) == case.expected
        admitted = server.client.admit(case.pod)
        assert admitted.admitted
        assert _reasons(admitted.containers) == case.expected
        for c in admitted.containers:
            assert bool(c.blocks) == (not c.not_pinned_reason)  # a reason exactly when unpinned
            assert bool(c.not_pinned_message) == bool(c.not_pinned_reason)
        [first] = [c for c in admitted.containers if c.not_pinned_reason == case.name]
        assert case.fragment in first.not_pinned_message


def _manifest(tmp_path: Path, p: mm.Pod) -> str:
    def ctr(c: mm.Container) -> dict[str, Any]:
        return {
            "name": c.name,
            "resources": {"requests": dict(c.requests), "limits": dict(c.limits)},
        }

    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"uid": p.uid, "namespace": p.namespace, "name": p.name},
        "spec": {"containers": [ctr(c) for c in p.containers]},
    }
    if p.requests or p.limits:
        doc["spec"]["resources"] = {"requests": dict(p.requests), "limits": dict(p.limits)}
    if p.qos_class:
        doc["status"] = {"qosClass": p.qos_class}
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_cli_says_why_in_text_and_json(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: `numamem admit` said "admitted ... not pinned" and no reason, also in --json."""
    manifest = _manifest(tmp_path, case.pod)
    with serve_in_process(**case.config) as server:
        sock = ["--socket", server.socket]
        assert main(["explain", "-f", manifest, *sock]) == 0
        out = capsys.readouterr().out
        line = f"  {next(n for n, r in case.expected.items() if r)}: not pinned ({case.name}): "
        assert any(x.startswith(line) and case.fragment in x for x in out.splitlines()), out
        assert main(["explain", "-f", manifest, "--json", *sock]) == 0
        data = json.loads(capsys.readouterr().out)
        assert _reasons_json(data["decision"]["containers"]) == case.expected
        assert main(["admit", "-f", manifest, "--no-start", *sock]) == 0
        out = capsys.readouterr().out
        assert any(x.startswith(line.strip()) and case.fragment in x for x in out.splitlines()), out
        for name, reason in case.expected.items():
            row = next(x.split() for x in out.splitlines() if x.split()[:1] == [name])
            assert (row[-1] == reason) if reason else "not" not in row
        assert main(["admit", "-f", manifest, "--no-start", "--json", *sock]) == 0
        data = json.loads(capsys.readouterr().out)
        assert _reasons_json(data["containers"]) == case.expected


def _reasons_json(containers: list[dict[str, Any]]) -> dict[str, str]:
    return {c["container_name"]: c["not_pinned_reason"] for c in containers}


def test_every_reason_is_covered_and_documented() -> None:
    """The codes are API: each has a case here and a line in the proto's comment."""
    from tests.genproto import REPO

    proto = (REPO / "proto" / "numamem" / "v1" / "memorymanager.proto").read_text()
    tested = {c.name for c in CASES}
    assert tested == set(unpinned.REASONS) - {unpinned.NOT_ALLOCATED}
    for reason in unpinned.REASONS:
        assert f"//   {reason} " in proto, reason


def test_not_allocated_is_the_rest() -> None:
    """A pod taken for Guaranteed (its status.qosClass) whose container requests no memory:
    the daemon's validation refuses such a pod, the function still answers."""
    from numamem.memorymanager.policy.options import StaticOptions
    from numamem.memorymanager.policy.static import StaticPolicy
    from numamem.pod import Container, Pod
    from numamem.quantity import parse_quantity
    from numamem.topology import Machine, NUMANode

    policy = StaticPolicy(
        Machine((NUMANode(0, 8 * 2**30, ()),)), {0: {"memory": 2**30}}, options=StaticOptions()
    )
    cpu = {"cpu": parse_quantity("1")}
    p = Pod("u", containers=(Container("c", cpu, dict(cpu)),), qos_class="Guaranteed")
    why = unpinned.why_not_pinned(policy, p, p.containers[0])
    assert why == unpinned.NotPinned(
        unpinned.NOT_ALLOCATED, "container 'c' requests no memory or hugepages"
    )
