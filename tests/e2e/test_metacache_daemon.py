"""The metacache on the real daemon: restart round trip, corrupt-file refusal, 16 concurrent clients."""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from numamem.client import NumamemClient
from numamem.metacache.journal import JOURNAL_FILE, header
from numamem.metacache.persistence import STATE_FILE, decode, decode_snapshot
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import metacache_pb2 as mc
from tests.daemon import read_cache_files, run_together

pytestmark = pytest.mark.e2e


def start(
    root: Path, factory: list[DaemonProcess], extra: list[str] | None = None
) -> DaemonProcess:
    if not (root / "sys").exists():
        write_sysfs(root / "sys", standard_nodes(2))
    d = DaemonProcess(root, ["--sysfs-root", str(root / "sys"), *(extra or [])])
    factory.append(d)
    return d.start()


def test_restart_round_trip(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as c:
        c.add_container_info(
            mc.ContainerInfo(
                pod_uid="p",
                container_name="a",
                qos_level="shared_cores",
                topology_aware_assignments={0: "0-3"},
                region_names=["r"],
            )
        )
        c.set_pool_info(mc.PoolInfo(pool_name="share", topology_aware_assignments={0: "0-3"}))
        c.set_region_info(mc.RegionInfo(region_name="r", headroom=2.5, binding_numas="0"))
        before = (list(c.list_containers()), list(c.list_pools()), list(c.list_regions()))
    d.stop()
    d.start()
    with NumamemClient(d.socket) as c:
        assert (list(c.list_containers()), list(c.list_pools()), list(c.list_regions())) == before


def test_sigkill_leaves_a_journal_that_the_restart_replays_and_stop_compacts(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    state_dir = Path(d.state_dir)
    with NumamemClient(d.socket) as c:
        for n in range(5):
            c.set_container_info(mc.ContainerInfo(pod_uid="p", container_name=f"c{n}"))
        c.update_containers(
            [
                mc.ContainerUpdate(
                    pod_uid="p",
                    container_name=f"c{n}",
                    info=mc.ContainerInfo(pod_uid="p", container_name=f"c{n}", cpu_request=2),
                    update_mask=FieldMask(paths=["cpu_request"]),
                )
                for n in range(3)
            ]
        )
        before = list(c.list_containers())
    d.stop(signal.SIGKILL)
    assert (state_dir / JOURNAL_FILE).read_bytes().count(b"\n") == 1 + 6  # header + 6 commits
    assert decode((state_dir / STATE_FILE).read_bytes()).pods == {}
    d.start()
    with NumamemClient(d.socket) as c:
        assert list(c.list_containers()) == before
    d.stop()  # graceful: one complete checkpoint, an empty journal
    state, generation = decode_snapshot((state_dir / STATE_FILE).read_bytes())
    assert set(state.pods["p"]) == {f"c{n}" for n in range(5)}
    assert (state_dir / JOURNAL_FILE).read_bytes() == header(generation)


def test_no_metacache_persist_writes_no_metacache_files(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory, ["--no-metacache-persist"])
    with NumamemClient(d.socket) as c:
        c.set_container_info(mc.ContainerInfo(pod_uid="p", container_name="a"))
    d.stop()
    names = {p.name for p in Path(d.state_dir).iterdir()}
    assert STATE_FILE not in names and JOURNAL_FILE not in names


def test_corrupt_file_refuses_start_unless_discarded(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as c:
        c.add_container_info(mc.ContainerInfo(pod_uid="p", container_name="a"))
    d.stop()
    path = Path(d.state_dir) / STATE_FILE
    path.write_bytes(path.read_bytes().replace(b'"PodUID":"p"', b'"PodUID":"q"'))
    out = d.run_to_exit("--sysfs-root", str(short_root / "sys"))
    assert out.returncode == 1
    line = out.stderr.strip().splitlines()[-1]
    assert (
        str(path) in line
        and "checkpoint is corrupted" in line
        and "--metacache-discard-corrupt-state" in line
    )
    d.args.append("--metacache-discard-corrupt-state")
    d.start()
    with NumamemClient(d.socket) as c:
        assert list(c.list_containers()) == []
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(f"{STATE_FILE}.corrupt-")]
    assert decode(path.read_bytes()).pods == {}  # a fresh, valid file


def test_sixteen_concurrent_clients(short_root: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Writers and readers at once, compactions among them; the final state (live and on disk)
    is exactly the acknowledged writes."""
    d = start(short_root, daemon_factory, ["--metacache-compact-bytes", "4096"])
    expected: dict[tuple[str, str], float] = {}
    lock = threading.Lock()
    failures: list[str] = []

    def writer(n: int) -> None:
        rng = random.Random(n)
        with NumamemClient(d.socket) as c:
            for i in range(30):
                pod, ctr = f"pod{n}", f"c{rng.randrange(6)}"
                try:
                    if rng.random() < 0.25:
                        c.delete_container(pod, ctr)
                        with lock:
                            expected.pop((pod, ctr), None)
                    else:
                        c.set_container_info(
                            mc.ContainerInfo(pod_uid=pod, container_name=ctr, cpu_request=i)
                        )
                        with lock:
                            expected[(pod, ctr)] = i
                except grpc.RpcError as err:
                    failures.append(f"{err.code()}: {err.details()}")

    def reader(n: int) -> None:
        with NumamemClient(d.socket) as c:
            for _ in range(30):
                for info in c.list_containers():
                    assert info.pod_uid.startswith("pod")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(12)]
    threads += [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    run_together(threads)
    assert failures == []
    with NumamemClient(d.socket) as c:
        live = {(i.pod_uid, i.container_name): i.cpu_request for i in c.list_containers()}
    assert live == expected
    on_disk = read_cache_files(d.state_dir)
    assert {
        (p, n): i.cpu_request for p, ctrs in on_disk.pods.items() for n, i in ctrs.items()
    } == expected
