"""REVIEW PROBE (reviewnri): what a pre-launched plugin's stdout/stderr are under the real
containerd (a pipe nobody reads would block a plugin that logs). Run with -s."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.containerd.instance import Containerd


def test_probe(containerd_factory: Callable[..., Containerd]) -> None:
    inst = containerd_factory(start=False)
    inst.layout.plugin_path.mkdir(parents=True, exist_ok=True)
    out = inst.layout.base / "fds.txt"
    script = inst.layout.plugin_path / "10-fds"
    script.write_text(
        "#!/usr/bin/python3\nimport os, time\n"
        "fds = [(f, os.readlink('/proc/self/fd/' + str(f))) for f in range(4)]\n"
        f"open({str(out)!r}, 'w').write(repr(fds))\ntime.sleep(3)\n"
    )
    script.chmod(0o755)
    inst.start()
    for _ in range(100):
        if out.exists() and out.read_text():
            break
        time.sleep(0.05)
    print(f"\n--- {inst.dist.describe()}\n{out.read_text()}")
