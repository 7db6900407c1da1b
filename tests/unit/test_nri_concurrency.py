"""Concurrent NRI calls: serialized writes, the bounded pool, calls from inside a handler, and
frames Go's reader accepts."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from numamem.errors import NriStatusError
from numamem.nri import status
from numamem.nri.framing import GO_READ_BUFFER, Frame, FrameDecoder, Message, MessageDecoder
from numamem.nri.handler import CallContext
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.nri_runtime import ScriptedRuntime, plugin_env
from tests.unit.nri_support import FAST, Recorder, running
from tests.unit.test_nri_malformed import RawRuntime

pytestmark = pytest.mark.usefixtures("no_leaked_nri_threads")


def test_concurrent_calls_get_their_own_replies(nri_sock: Path) -> None:
    """Replies written by several workers at once never interleave or cross streams."""

    class Echo(Recorder):
        def create_container(
            self, req: api.CreateContainerRequest, ctx: CallContext
        ) -> api.CreateContainerResponse:
            out = api.CreateContainerResponse(adjust=obj.mems_adjustment("0"))
            out.adjust.annotations["for"] = req.container.id * 300  # > 4 KiB: two frames
            return out

    runtime = ScriptedRuntime(nri_sock).start()
    plugin = Plugin(
        Echo(), name="numamem", idx="90", socket_path=str(nri_sock), backoff=FAST, workers=4
    )
    try:
        with running(plugin):
            peer = runtime.accept()
            peer.configure()
            pod = obj.pod()

            def create(i: int) -> str:
                reply = peer.create_container(pod, obj.container(pod, container_id=f"c{i:03d}"))
                assert reply is not None
                return reply.adjust.annotations["for"]

            with ThreadPoolExecutor(16) as pool:
                answers = list(pool.map(create, range(64)))
            assert answers == [f"c{i:03d}" * 300 for i in range(64)]
    finally:
        runtime.stop()


def test_requests_beyond_the_bound_are_refused_not_queued() -> None:
    release = threading.Event()
    arrived = threading.Semaphore(0)
    handler = Recorder()

    def hold(name: str, req: object) -> None:
        if name == "create_container":
            arrived.release()
            release.wait(30)

    handler.hook = hold
    runtime = ScriptedRuntime(request_timeout=30)
    peer, theirs = runtime.prelaunch()
    plugin = Plugin.prelaunched(
        handler, plugin_env("numamem", "90", theirs.detach()), workers=2, max_in_flight=2
    )
    thread = threading.Thread(target=plugin.run, name="plugin-run")
    thread.start()
    try:
        peer.wait_registered(10)
        peer.configure()
        pod = obj.pod()
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(peer.create_container, pod, obj.container(pod)) for _ in range(2)]
            assert arrived.acquire(timeout=10) and arrived.acquire(timeout=10)  # both running
            with pytest.raises(NriStatusError) as refused:
                peer.create_container(pod, obj.container(pod))
            assert refused.value.code == status.RESOURCE_EXHAUSTED
            assert "2 requests in flight already" in refused.value.message
            release.set()
            assert all(f.result(30) is not None for f in held)
        assert peer.create_container(pod, obj.container(pod)) is not None  # slots freed
    finally:
        release.set()
        peer.close()
        thread.join(30)


def test_a_handler_can_call_the_runtime_while_it_is_being_called(nri_sock: Path) -> None:
    """The reader is never blocked by a handler: a CreateContainer handler that asks for an
    UpdateContainers gets its reply (the runtime answers it before CreateContainer's)."""
    runtime = ScriptedRuntime(nri_sock).start()
    failed: list[list[api.ContainerUpdate]] = []

    class Mover(Recorder):
        def create_container(
            self, req: api.CreateContainerRequest, ctx: CallContext
        ) -> api.CreateContainerResponse:
            failed.append(
                plugin.update_containers([obj.mems_update("other", "1")], timeout=ctx.remaining())
            )
            return super().create_container(req, ctx)

    plugin = Plugin(Mover(), name="numamem", idx="90", socket_path=str(nri_sock), backoff=FAST)
    try:
        with running(plugin):
            peer = runtime.accept()
            # The runtime's side registers when it gets the request, the plugin when the reply
            # reaches it; its calls to the runtime before that are refused ("not registered").
            assert plugin.wait_registered(10)
            peer.configure()
            pod = obj.pod()
            assert peer.create_container(pod, obj.container(pod)) is not None
            assert failed == [[]]
            assert peer.update_requests[0].update[0].container_id == "other"
    finally:
        runtime.stop()


@pytest.mark.parametrize("size", [10, 4000, 4096, 5000, 70_000])
def test_replies_are_framed_as_gos_reader_needs(size: int) -> None:
    """A reply's first frame is at most 4096 bytes (Go's bufio buffer); a longer reply sends
    the rest in one more frame (read straight into the message buffer)."""

    class Big(Recorder):
        def create_container(
            self, req: api.CreateContainerRequest, ctx: CallContext
        ) -> api.CreateContainerResponse:
            out = api.CreateContainerResponse()
            out.adjust.annotations["a"] = "x" * size
            return out

    ours, theirs = socket.socketpair()
    plugin = Plugin.prelaunched(Big(), plugin_env("numamem", "90", theirs.detach()))
    thread = threading.Thread(target=plugin.run, name="plugin-run")
    thread.start()
    try:
        raw = RawRuntime(ours)
        raw.register()
        pod = obj.pod()
        request = api.CreateContainerRequest(pod=pod, container=obj.container(pod))
        raw.request("CreateContainer", request.SerializeToString())
        frames = FrameDecoder()
        messages = MessageDecoder()
        sizes: list[int] = []
        replies: list[object] = []
        while not replies:
            for frame in frames.feed(ours.recv(1 << 20)):
                assert isinstance(frame, Frame) and frame.conn_id == 1
                sizes.append(len(frame.payload))
                replies += messages.feed(frame.payload)
        [reply] = replies
        assert isinstance(reply, Message) and len(reply.payload) > size
        message = 10 + len(reply.payload)
        assert sum(sizes) == message
        if message > GO_READ_BUFFER:
            assert sizes == [GO_READ_BUFFER, message - GO_READ_BUFFER]
        else:
            assert sizes == [message]
    finally:
        ours.close()
        thread.join(30)
