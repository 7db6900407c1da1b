"""REVIEW PROBE (reviewnri): what the real containerd sends an NRI plugin for a pod whose
containers exit, are restarted and are stopped. Not a test; run with
``.venv/bin/python -m pytest -q -s tests/reviewnri/probe_events.py -p no:randomly``."""

from __future__ import annotations

import threading
import time

from numamem.nri.handler import CallContext, Handler
from numamem.nri.plugin import Backoff, Plugin
from numamem.nriapi import api_pb2 as api
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec

MIB = 1 << 20


class Recorder(Handler):
    def __init__(self) -> None:
        self.events: list[str] = []

    def _note(self, what: str, c: api.Container | None) -> None:
        if c is None:
            self.events.append(what)
            return
        self.events.append(
            f"{what} name={c.name} id={c.id[:8]} state={api.ContainerState.Name(c.state)} "
            f"exit_code={c.exit_code} finished_at={c.finished_at} reason={c.status_reason!r} "
            f"restartCount={c.annotations.get('io.kubernetes.container.restartCount')}"
        )

    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        self._note("CreateContainer", req.container)
        return api.CreateContainerResponse()

    def stop_container(
        self, req: api.StopContainerRequest, ctx: CallContext
    ) -> api.StopContainerResponse:
        self._note("StopContainer", req.container)
        return api.StopContainerResponse()

    def remove_container(
        self, req: api.RemoveContainerRequest, ctx: CallContext
    ) -> api.RemoveContainerResponse:
        self._note("RemoveContainer", req.container)
        return api.RemoveContainerResponse()

    def synchronize(self, req: api.SynchronizeRequest, ctx: CallContext) -> api.SynchronizeResponse:
        for c in req.containers:
            self._note("Synchronize", c)
        return api.SynchronizeResponse()


def test_probe(containerd: Containerd, kubelet: Kubelet) -> None:
    rec = Recorder()
    plugin = Plugin(
        rec,
        name="probe",
        idx="10",
        socket_path=str(containerd.layout.nri_socket),
        backoff=Backoff(0.05, 0.2),
    )
    t = threading.Thread(target=plugin.run)
    t.start()
    assert plugin.wait_registered(20)
    crash = ("/bin/sh", "-c", "exit 3")
    pod = PodSpec(
        "p",
        (
            ContainerSpec.guaranteed("a", 250, 32 * MIB, crash),
            ContainerSpec.guaranteed("b", 250, 32 * MIB),
        ),
        init_containers=(
            ContainerSpec.guaranteed("init", 250, 16 * MIB, ("/bin/sh", "-c", "exit 0")),
        ),
    )
    running = kubelet.run_pod(pod)
    kubelet.wait_exited(running.containers["a"])
    time.sleep(0.5)
    containerd.restart()
    assert plugin.wait_registered(30, sessions=2)
    time.sleep(0.5)
    kubelet.remove_pod(running)
    time.sleep(0.5)
    plugin.stop()
    t.join(10)
    print(f"\n--- {containerd.dist.describe()}")
    for e in rec.events:
        print(e)
