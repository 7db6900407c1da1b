"""REVIEW PROBE (reviewnri): what the real containerd sends a plugin (idx 10) when a later
plugin (idx 20) fails CreateContainer. Run with -s."""

from __future__ import annotations

import threading
import time

import pytest

from numamem.errors import NriStatusError
from numamem.nri import status
from numamem.nri.handler import CallContext
from numamem.nri.plugin import Backoff, Plugin
from numamem.nriapi import api_pb2 as api
from tests.containerd.cri import CriError
from tests.containerd.instance import Containerd
from tests.containerd.kubelet import ContainerSpec, Kubelet, PodSpec
from tests.reviewnri.probe_events import Recorder

MIB = 1 << 20


class Failer(Recorder):
    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        raise NriStatusError(status.UNKNOWN, "failer says no")


def test_probe(containerd: Containerd, kubelet: Kubelet) -> None:
    rec, fail = Recorder(), Failer()
    plugins = [
        Plugin(
            rec,
            name="probe",
            idx="10",
            socket_path=str(containerd.layout.nri_socket),
            backoff=Backoff(0.05, 0.2),
        ),
        Plugin(
            fail,
            name="failer",
            idx="20",
            socket_path=str(containerd.layout.nri_socket),
            backoff=Backoff(0.05, 0.2),
        ),
    ]
    threads = [threading.Thread(target=p.run) for p in plugins]
    for t in threads:
        t.start()
    assert all(p.wait_registered(20) for p in plugins)
    pod = PodSpec("p", (ContainerSpec.guaranteed("a", 250, 32 * MIB),))
    running = kubelet.run_pod(pod, containers=False)
    with pytest.raises(CriError) as caught:
        kubelet.start(running, pod.containers[0])
    time.sleep(0.5)
    kubelet.cri.stop_pod_sandbox(running.sandbox_id)
    kubelet.cri.remove_pod_sandbox(running.sandbox_id)
    time.sleep(0.3)
    for p in plugins:
        p.stop()
    for t in threads:
        t.join(10)
    print(f"\n--- {containerd.dist.describe()}: {caught.value.details}")
    for e in rec.events:
        print(e)
