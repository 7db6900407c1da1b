"""The Handler interface: subscription masks, StateChange routing, defaults."""

from __future__ import annotations

import pytest

from numamem.errors import NriStatusError
from numamem.nri import handler as hmod
from numamem.nri.handler import CallContext, Handler
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from tests.unit.nri_support import PodRecorder, Recorder

CTX = CallContext("StateChange", deadline=0.0, request_timeout=2.0)


@pytest.mark.parametrize(
    ("events", "mask"),
    [
        ([api.RUN_POD_SANDBOX], 0x1),
        ([api.CREATE_CONTAINER], 0x8),
        ([api.REMOVE_CONTAINER], 0x400),
        ([api.CREATE_CONTAINER, api.REMOVE_CONTAINER], 0x408),
        ([api.VALIDATE_CONTAINER_ADJUSTMENT], 1 << 13),
    ],
)
def test_event_e_sets_bit_e_minus_1(events: list[int], mask: int) -> None:
    assert hmod.events_mask(events) == mask
    assert hmod.mask_events(mask) == sorted(events)


@pytest.mark.parametrize("event", [api.UNKNOWN, api.LAST, 99])
def test_events_outside_the_api_have_no_bit(event: int) -> None:
    with pytest.raises(ValueError, match=f"event {event} is not an NRI event"):
        hmod.event_bit(event)


def test_event_names() -> None:
    assert hmod.event_name(api.CREATE_CONTAINER) == "CREATE_CONTAINER"
    assert hmod.event_name(77) == "77"


def test_a_handler_subscribes_to_the_events_it_overrides() -> None:
    assert hmod.mask_events(hmod.handled_events(Recorder())) == [
        api.CREATE_CONTAINER,
        api.UPDATE_CONTAINER,
        api.STOP_CONTAINER,
        api.REMOVE_CONTAINER,
    ]
    assert hmod.handled_events(Handler()) == 0
    reply = PodRecorder().configure(api.ConfigureRequest(), CTX)
    assert api.RUN_POD_SANDBOX in hmod.mask_events(reply.events)


def test_unhandled_events_are_those_without_a_method_or_fallback() -> None:
    mask = hmod.events_mask([api.RUN_POD_SANDBOX, api.CREATE_CONTAINER, api.START_CONTAINER])
    assert hmod.unhandled_events(Recorder(), mask) == [api.RUN_POD_SANDBOX, api.START_CONTAINER]

    class Routed(Handler):
        def state_change(self, req: api.StateChangeEvent, ctx: CallContext) -> api.Empty:
            return api.Empty()

    # StateChange takes what has a fallback, never CreateContainer
    assert hmod.unhandled_events(Routed(), mask) == [api.CREATE_CONTAINER]


def test_state_change_routes_to_the_overridden_methods() -> None:
    handler = PodRecorder()
    pod = obj.pod()
    ctr = obj.container(pod)
    for event in (api.RUN_POD_SANDBOX, api.STOP_POD_SANDBOX, api.REMOVE_POD_SANDBOX):
        handler.state_change(api.StateChangeEvent(event=event, pod=pod), CTX)  # type: ignore[arg-type]
    handler.state_change(
        api.StateChangeEvent(event=api.REMOVE_CONTAINER, pod=pod, container=ctr), CTX
    )
    handler.state_change(  # no method for it: ignored
        api.StateChangeEvent(event=api.START_CONTAINER, pod=pod, container=ctr), CTX
    )
    assert handler.names() == [
        "run_pod_sandbox",
        "stop_pod_sandbox",
        "remove_pod_sandbox",
        "remove_container",
    ]
    [removed] = handler.requests("remove_container")
    assert removed == api.RemoveContainerRequest(pod=pod, container=ctr)
    assert handler.requests("run_pod_sandbox")[0] == api.RunPodSandboxRequest(pod=pod)


def test_state_change_ignores_events_the_handler_does_not_implement() -> None:
    handler = Recorder()  # no pod methods
    pod = obj.pod()
    assert (
        handler.state_change(api.StateChangeEvent(event=api.RUN_POD_SANDBOX, pod=pod), CTX)
        == api.Empty()
    )  # type: ignore[arg-type]
    assert handler.names() == []


@pytest.mark.parametrize(
    ("method", "request_type"),
    [
        ("run_pod_sandbox", api.RunPodSandboxRequest),
        ("stop_pod_sandbox", api.StopPodSandboxRequest),
        ("remove_pod_sandbox", api.RemovePodSandboxRequest),
        ("create_container", api.CreateContainerRequest),
        ("update_container", api.UpdateContainerRequest),
        ("stop_container", api.StopContainerRequest),
        ("remove_container", api.RemoveContainerRequest),
    ],
)
def test_event_methods_default_to_unimplemented(method: str, request_type: type) -> None:
    with pytest.raises(NriStatusError) as e:
        getattr(Handler(), method)(request_type(), CTX)
    assert e.value.code == 12
    assert e.value.message.endswith("not implemented")


def test_the_other_defaults_answer_empty() -> None:
    handler = Handler()
    whole = api.SynchronizeRequest(pods=[obj.pod()])
    assert handler.synchronize(whole, CTX) == api.SynchronizeResponse()
    assert handler.shutdown(api.Empty(), CTX) == api.Empty()


def test_call_context_remaining_is_never_negative() -> None:
    assert CTX.remaining() == 0.0
