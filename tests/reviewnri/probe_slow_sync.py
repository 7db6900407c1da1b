"""REVIEW PROBE (reviewnri): what containerd does with a PRE-LAUNCHED plugin whose Synchronize
answers after the request timeout (numamem's Synchronize takes ~1.9 s at 1000 pods on this
machine and grows quadratically: tests/reviewnri/measure_sync.py). Run with -s."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tests.containerd.instance import Containerd

PLUGIN = """#!{python}
import time
from numamem.nri.handler import Handler
from numamem.nri.plugin import Plugin
from numamem.nriapi import api_pb2 as api

class Slow(Handler):
    def synchronize(self, req, ctx):
        open({marker!r}, "a").write("sync\\n")
        time.sleep(3)
        return api.SynchronizeResponse()
    def remove_container(self, req, ctx):
        return api.RemoveContainerResponse()

Plugin.prelaunched(Slow()).run()
"""


def test_probe(containerd_factory: Callable[..., Containerd]) -> None:
    inst = containerd_factory(start=False)
    inst.layout.plugin_path.mkdir(parents=True, exist_ok=True)
    marker = inst.layout.base / "synced.txt"
    script = inst.layout.plugin_path / "10-slow"
    script.write_text(PLUGIN.format(python=sys.executable, marker=str(marker)))
    script.chmod(0o755)
    try:
        inst.start(timeout=30)
        outcome = "containerd started"
    except RuntimeError as err:
        outcome = "containerd did NOT start: " + str(err)[-400:]
    time.sleep(4)
    syncs = marker.read_text().count("sync") if marker.exists() else 0
    print(f"\n--- {inst.dist.describe()}: {outcome}; Synchronize calls: {syncs}")
