"""REVIEW MEASUREMENT (reviewnri): how long numamem nri's Synchronize handler takes for N pods
(2 containers each, Guaranteed, already held by the daemon or not), against the runtime's 2 s
request_timeout. Run: PATH=$PWD/.venv/bin:$PATH .venv/bin/python tests/reviewnri/measure_sync.py"""

from __future__ import annotations

import sys
import time

from numamem.nri.daemonlink import DaemonLink
from numamem.nri.handler import CallContext
from numamem.nri.memoryplugin import MemoryPlugin
from numamem.nri.options import PluginOptions
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from tests.daemon import STATIC_ARGS

HELD = "--held" in sys.argv


def main() -> None:
    d = DaemonProcess(short_tmpdir(), list(STATIC_ARGS)).start()
    try:
        for n in [int(a) for a in sys.argv[1:] if a != "--held"] or [100, 1000, 5000]:
            pods, containers = [], []
            for i in range(n):
                p = obj.pod(f"p{i}", f"uid-{i:06d}")
                p.annotations.update({f"k{j}": "v" * 100 for j in range(10)})
                pods.append(p)
                for name in ("a", "b"):
                    c = obj.container(
                        p, name, memory_limit=1 << 20, cpu_milli=100, state=api.CONTAINER_RUNNING
                    )
                    c.env.extend([f"E{j}=" + "x" * 50 for j in range(30)])
                    containers.append(c)
            if HELD:
                from numamem.client import NumamemClient
                from numamem.v1 import memorymanager_pb2 as mm

                cl = NumamemClient(d.socket, timeout=30)
                for p in pods:
                    res = {"cpu": "100m", "memory": str(1 << 20)}
                    pod = mm.Pod(
                        uid=p.uid,
                        namespace="default",
                        name=p.name,
                        containers=[
                            mm.Container(name=n, requests=res, limits=res) for n in ("a", "b")
                        ],
                    )
                    assert cl.admit(pod).admitted
                cl.close()
            handler = MemoryPlugin(PluginOptions(socket=d.socket), DaemonLink(d.socket))
            req = api.SynchronizeRequest(pods=pods, containers=containers)
            size = len(req.SerializeToString())
            began = time.monotonic()
            ctx = CallContext("Synchronize", began + 2.0, 2.0)
            decoded = api.SynchronizeRequest.FromString(req.SerializeToString())
            handler.synchronize(decoded, ctx)
            took = time.monotonic() - began
            print(
                f"{'held by the daemon: ' if HELD else ''}{n} pods / {2 * n} containers, {size / 1e6:.1f} MB: Synchronize handled in {took:.2f} s "
                f"(runtime's timeout 2 s){'  <-- LATE: the runtime drops the plugin' if took > 2 else ''}"
            )
            handler.stop()
    finally:
        d.kill()


if __name__ == "__main__":
    main()
