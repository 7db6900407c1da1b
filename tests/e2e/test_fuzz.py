"""The project's fuzzer (tests/fuzz), bounded: every RPC of every service, the real daemon.

``make soak`` runs a long campaign (``python -m tests.fuzz``); this one sends
:data:`REQUESTS` requests of a fixed seed (``NUMAMEM_FUZZ_SEED`` and
``NUMAMEM_FUZZ_REQUESTS`` override them) and fails with each finding's replay
command.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError

from numamem.api.status import status_with_reason
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.fuzz import __main__ as fuzz_main
from tests.fuzz.amplify import QUANTITY_AMPLIFIERS
from tests.fuzz.catalogue import BY_PATH, RPCS
from tests.fuzz.cost import CPU, RESTART_FACTOR, RESTART_SLACK_S, RSS, CostOracle
from tests.fuzz.generate import malformed
from tests.fuzz.run import KINDS, Campaign, Outcome, generated, reply_problems
from tests.fuzz.seeds import SEEDS

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("NUMAMEM_FUZZ_SEED", "31"))
REQUESTS = int(os.environ.get("NUMAMEM_FUZZ_REQUESTS", "4000"))


def test_the_catalogue_is_every_rpc_of_every_service_and_each_has_a_valid_seed() -> None:
    services = {rpc.path.rsplit("/", 1)[0].strip("/") for rpc in RPCS}
    assert services == {
        "numamem.v1.Info",
        "numamem.v1.Topology",
        "numamem.v1.MemoryManager",
        "numamem.v1.MetaReader",
        "numamem.v1.MetaWriter",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "v1.PodResourcesLister",
    }
    # Reflection on both sockets; AllocatePod and GetPodMemory (KEP-5526); Resize and
    # ExplainResize (issue 30); Info/GetBuildInfo (issue 38).
    assert len(RPCS) == 48
    assert len({rpc.short for rpc in RPCS}) == len(RPCS)
    assert set(SEEDS) == {rpc.path for rpc in RPCS}
    # Every malformed payload is bytes that decode as no request of the RPC it goes to.
    for rpc in RPCS:
        for what, payload in malformed(rpc.request):
            with pytest.raises(DecodeError):
                rpc.request.FromString(payload)
            assert what


def test_a_request_is_a_function_of_its_seed_and_index() -> None:
    again = [generated(SEED, i) for i in range(300)]
    for i, gen in enumerate(again):
        twin = generated(SEED, i)
        assert (twin.rpc, twin.kind) == (gen.rpc, gen.kind)
        assert twin.request.SerializeToString(deterministic=True) == gen.request.SerializeToString(
            deterministic=True
        )
    kinds = [generated(SEED, i) for i in range(4000)]
    shares = {k: [g.kind for g in kinds].count(k) / len(kinds) for k in KINDS}
    assert abs(shares["valid"] - 0.25) < 0.03
    assert abs(shares["mutated"] - 0.5) < 0.03
    assert abs(shares["random"] - 0.20) < 0.03
    assert abs(shares["undecodable"] - 0.05) < 0.015
    # It carries issue 38's cpulist and huge quantities: with the expanding cpusets of
    # before, the first such request (14: 0-1048575) cost 1.8 s of CPU and 261 MiB.
    sent = [g.request.SerializeToString() for g in kinds]
    assert sum(b"0-1048576" in r for r in sent) >= 20
    assert sum(any(q.encode() in r for q in QUANTITY_AMPLIFIERS) for r in sent) >= 20
    assert b"0-1048575" in sent[14]
    for gen in kinds:
        if gen.kind == "undecodable":
            assert gen.payload is not None
            with pytest.raises(DecodeError):
                gen.rpc.request.FromString(gen.payload)


def test_a_findings_replay_lines_parse_back_to_the_same_campaign(tmp_path: Path) -> None:
    """The bounded campaign restarts at REQUESTS // 2, not at python -m tests.fuzz's default:
    a replay line without every parameter replays another campaign."""
    campaign = Campaign(tmp_path, SEED, check_every=250, restart_every=REQUESTS // 2)
    campaign._find(1234, "what", "problem")
    [finding] = campaign.findings
    lines = finding.report().splitlines()
    replays = {}
    for label in ("replay", "this request alone"):
        [line] = [x for x in lines if x.strip().startswith(f"{label}: ")]
        argv = shlex.split(line.split(": ", 1)[1])
        assert argv[:3] == ["python", "-m", "tests.fuzz"], line
        replayed, requests = fuzz_main.build_campaign(
            fuzz_main.parser().parse_args(argv[3:]), tmp_path
        )
        params = (replayed.seed, replayed.check_every, replayed.restart_every)
        assert params == (SEED, 250, REQUESTS // 2), line
        replays[label] = (requests, replayed.indices)
    assert replays["replay"][0] == 1235 and replays["replay"][1] is None
    assert replays["this request alone"][1] == range(1234, 1235)


class _Call(grpc.RpcError):
    """What a client sees of a failed call: code, details, trailers."""

    def __init__(self, status: Any) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code  # type: ignore[no-any-return]

    def details(self) -> str:
        return self._status.details  # type: ignore[no-any-return]

    def trailing_metadata(self) -> Any:
        return self._status.trailing_metadata


def test_the_reply_checks_catch_what_issue_31_saw() -> None:
    """The checks are not vacuous: each symptom is a finding, a real error is not."""
    rpc = BY_PATH["/numamem.v1.MetaWriter/SetPoolInfo"]
    request = mc.SetPoolInfoRequest(pool_name="p")
    real = status_with_reason(
        grpc.StatusCode.INVALID_ARGUMENT, "info.pool_name: ...", "INVALID_ARGUMENT"
    )
    good = Outcome(real.code, real.details, _Call(real))
    assert reply_problems(rpc, request, good) == []
    removed = SimpleNamespace(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED,
        details="Stream removed (received metadata size exceeds hard limit (value length 65566 vs. 16384))",
        trailing_metadata=(),
    )
    problems = reply_problems(rpc, request, Outcome(removed.code, removed.details, _Call(removed)))
    assert any("rejected the trailers" in p for p in problems)
    long = status_with_reason(grpc.StatusCode.INVALID_ARGUMENT, "x" * 70000, "INVALID_ARGUMENT")
    assert any(
        "cut by api/status" in p
        for p in reply_problems(rpc, request, Outcome(long.code, long.details, _Call(long)))
    )
    bare = SimpleNamespace(code=grpc.StatusCode.NOT_FOUND, details="gone", trailing_metadata=())
    assert reply_problems(rpc, request, Outcome(bare.code, bare.details, _Call(bare))) == [
        "no google.rpc.Status in the trailers"
    ]
    internal = Outcome(grpc.StatusCode.INTERNAL, "internal error", _Call(real))
    assert any("answered INTERNAL" in p for p in reply_problems(rpc, request, internal))


def test_the_cost_oracle_charges_each_request_its_cost() -> None:
    """Not vacuous: a request that cost more than its bound is a finding, one within it is
    not; a restart that takes longer than its floor allows is a finding; issue 38's request
    (309 bytes: 9.5 s, +1290 MiB) is far beyond both bounds."""
    readings = iter(
        [(0.6, 50 << 20, 50 << 20), (0.7, 51 << 20, 51 << 20), (10.15, 1340 << 20, 1340 << 20)]
    )
    oracle = CostOracle(sampler=lambda pid: lambda: next(readings))
    assert oracle.started(1) == [] and oracle.floor_s == 0.6
    assert oracle.charge(200, "cheap") == []
    found = oracle.charge(309, "issue 38")
    assert len(found) == 2
    assert "9450 ms of CPU for 309 bytes, 37.7 x the bound" in found[0]
    assert "1289.0 MiB of peak RSS growth for 309 bytes" in found[1]
    assert oracle.worst_cpu.what == oracle.worst_rss.what == "issue 38"
    assert oracle.charged == 2 and "worst CPU 37.707 of its bound" in oracle.report()
    oracle.sampler = lambda pid: lambda: (RESTART_FACTOR * 0.6 + RESTART_SLACK_S + 0.01, 0, 0)
    [slow] = oracle.started(2)
    assert "the restart took 2.81 s of CPU to serve, more than 3 x the first start's" in slow
    assert CPU.of(309) < 0.26 and RSS.of(309) < 33 << 20


def test_a_bounded_campaign_finds_nothing(short_root: Path) -> None:
    campaign = Campaign(short_root, SEED, check_every=500, restart_every=REQUESTS // 2)
    campaign.start()
    try:
        campaign.run(REQUESTS)
        assert campaign.findings == [], "\n".join(f.report() for f in campaign.findings)
        assert campaign.sent == REQUESTS
        assert campaign.swept == sum(len(malformed(rpc.request)) for rpc in RPCS)
        assert campaign.restarts == 2  # one halfway, one at the end
        # Every request was charged its cost (tests/fuzz/cost.py), and both restarts.
        assert campaign.cost.charged == campaign.sent + campaign.swept
        assert campaign.cost.floor_s is not None and len(campaign.cost.restarts_s) == 2
        print(campaign.cost.report())
        assert {rpc for rpc, _ in campaign.codes} == {rpc.short for rpc in RPCS}
        assert {rpc.short for rpc in RPCS} <= {
            rpc for rpc, code in campaign.codes if code == "INVALID_ARGUMENT"
        }
        # The model check is not vacuous either: a write the daemon never saw is noticed.
        assert campaign.client is not None
        campaign.model.pools.add("never-written")
        campaign.model.mm_must_hold[("never-admitted", "app")] = []
        campaign.model.mm_ids["never-added"] = ("never-admitted", "app")
        campaign.model.mm_live_ids.add("never-added")
        problems = campaign.model.problems(campaign.client)
        assert any("pools differ" in p for p in problems)
        assert any("lost 'never-admitted'/'app'" in p for p in problems)
        assert any("holds None for container id 'never-added'" in p for p in problems)
        remove = BY_PATH["/numamem.v1.MemoryManager/RemoveContainer"]
        request = mm.RemoveContainerRequest(container_id="never-added")
        assert any(
            "answered found=false" in p
            for p in campaign.model.apply(remove, request, campaign.client.call(remove, request))
        )
    finally:
        campaign.stop()
