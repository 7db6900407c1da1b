"""The NRI plugin's errors: handler failures answered with their message, requests it cannot
serve, subscriptions it cannot honour, names, indexes and environments the runtime would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.errors import ConfigError, NriStatusError, NumamemError
from numamem.nri import handler as hmod
from numamem.nri import status
from numamem.nri.handler import CallContext, Handler
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from tests.unit.nri_support import Recorder, StateChangeOnly, connected

pytestmark = pytest.mark.usefixtures("no_leaked_nri_threads")


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (
            NumamemError("pod 'default/p' container 'app': no NUMA node fits"),
            2,
            "no NUMA node fits",
        ),
        (ValueError("a bug"), 2, "ValueError: a bug"),
        (NriStatusError(status.FAILED_PRECONDITION, "refused on purpose"), 9, "refused on purpose"),
    ],
)
def test_a_handler_error_fails_the_request_with_its_message(
    nri_sock: Path, error: Exception, code: int, text: str
) -> None:
    handler = Recorder()

    def fail(name: str, req: object) -> None:
        if name == "create_container":
            raise error

    handler.hook = fail
    with connected(handler, nri_sock) as peer:
        peer.configure()
        pod = obj.pod()
        with capture_logs() as logs, pytest.raises(NriStatusError) as failed:
            peer.create_container(pod, obj.container(pod))
        assert failed.value.code == code
        assert text in failed.value.message
        [logged] = [e for e in logs if e.get("method") == "CreateContainer"]
        assert logged["pod_uid"] == "uid-a" and logged["container"] == "app"
        handler.hook = None
        assert peer.create_container(pod, obj.container(pod)) is not None  # still serving


def test_unsubscribed_requests_without_fallback_change_nothing(nri_sock: Path) -> None:
    """A CreateContainer the plugin did not subscribe to (it has no StateChange fallback) is
    answered with no adjustment, not an error that would fail the container."""
    handler = StateChangeOnly()
    with connected(handler, nri_sock) as peer:
        peer.configure()
        pod = obj.pod()
        request = api.CreateContainerRequest(pod=pod, container=obj.container(pod))
        with capture_logs() as logs:
            for _ in range(3):
                reply = peer.call("CreateContainer", request, api.CreateContainerResponse)
                assert reply == api.CreateContainerResponse()
        assert [e["problem"] for e in logs if "problem" in e] == ["unsubscribed_event"]


def test_configure_refuses_a_subscription_the_handler_cannot_serve(nri_sock: Path) -> None:
    class Greedy(Recorder):
        def configure(self, req: api.ConfigureRequest, ctx: CallContext) -> api.ConfigureResponse:
            return api.ConfigureResponse(events=hmod.events_mask([api.RUN_POD_SANDBOX]))

    with connected(Greedy(), nri_sock) as peer:
        with pytest.raises(NriStatusError, match="unhandled \\['RUN_POD_SANDBOX'\\]") as e:
            peer.configure()
        assert e.value.code == status.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("name", "idx", "match"),
    [("", "90", "name ''"), ("numamem", "9", "index '9'"), ("numamem", "a1", "two digits")],
)
def test_the_runtime_would_refuse_the_name_or_index(name: str, idx: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Plugin(Recorder(), name=name, idx=idx)


def test_a_handler_that_handles_nothing_is_refused() -> None:
    with pytest.raises(ConfigError, match="handles no event"):
        Plugin(Handler(), name="numamem", idx="90")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "NRI_PLUGIN_SOCKET='' is not a file descriptor"),
        ({"NRI_PLUGIN_SOCKET": "three"}, "NRI_PLUGIN_SOCKET='three'"),
        ({"NRI_PLUGIN_SOCKET": "-1"}, "NRI_PLUGIN_SOCKET='-1'"),
        ({"NRI_PLUGIN_SOCKET": "987654"}, "NRI_PLUGIN_SOCKET=987654 is not a usable socket"),
    ],
)
def test_prelaunched_environment_errors_name_the_variable(env: dict[str, str], match: str) -> None:
    assert Plugin.is_prelaunched(env) == ("NRI_PLUGIN_SOCKET" in env)
    with pytest.raises(ConfigError, match=match):
        Plugin.prelaunched(Recorder(), env)
