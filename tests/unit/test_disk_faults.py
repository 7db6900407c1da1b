"""Full disk and read-only state dir during writes: UNAVAILABLE, memory == disk, reads go on, recovery."""

from __future__ import annotations

import errno
from pathlib import Path

import grpc
import pytest

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.checkpoint import kubelet
from numamem.checkpoint.mmstore import KubeletStateStore
from numamem.metacache import journal
from numamem.metacache.cache import State
from numamem.metacache.journal_store import JournalPersister
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc


def pod(uid: str) -> mm.Pod:
    res = {"cpu": "1", "memory": "1Gi"}
    return mm.Pod(uid=uid, containers=[mm.Container(name="c", requests=res, limits=res)])


def components(
    server: InProcessServer,
) -> tuple[KubeletStateStore, JournalPersister]:
    store = server.component(MemoryManagerComponent).manager._store
    cache = server.component(MetaCacheComponent)
    assert isinstance(store, KubeletStateStore) and cache.persister is not None
    return store, cache.persister


def on_disk_cache(persister: JournalPersister) -> State:
    restored = journal.read(persister.path.parent)
    assert restored is not None
    return restored.state


@pytest.mark.parametrize(("error", "name"), [(errno.ENOSPC, "ENOSPC"), (errno.EROFS, "EROFS")])
def test_write_faults_fail_cleanly_and_recover(error: int, name: str) -> None:
    with serve_in_process() as server:
        client = server.client
        assert client.admit(pod("before")).admitted
        client.set_container_info(mc.ContainerInfo(pod_uid="p", container_name="c", cpu_request=1))
        store, persister = components(server)

        def fail(stage: str, target: Path) -> None:
            if stage in ("write", "append"):  # a checkpoint rewrite, a journal append
                raise OSError(error, "injected")

        store.faults = persister.faults = fail
        for call in (
            lambda: client.admit(pod("during")),
            lambda: client.set_container_info(
                mc.ContainerInfo(pod_uid="p", container_name="c", cpu_request=2)
            ),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert name in (info.value.details() or "")
            assert "not applied" in (info.value.details() or "")
        # Reads keep working, health stays SERVING, and memory equals disk.
        assert client.check_health() == 1
        state = client.get_state()
        assert set(state.entries) == {"before"}
        on_disk = kubelet.load(store.state_path.read_bytes())
        assert set(on_disk.assignments) == {"before"}
        assert client.get_container_info("p", "c").cpu_request == 1
        assert on_disk_cache(persister).pods["p"]["c"].cpu_request == 1
        # Space comes back: so does the daemon.
        store.faults = persister.faults = None
        assert client.admit(pod("after")).admitted
        client.set_container_info(mc.ContainerInfo(pod_uid="p", container_name="c", cpu_request=3))
        assert set(kubelet.load(store.state_path.read_bytes()).assignments) == {"before", "after"}
        assert on_disk_cache(persister).pods["p"]["c"].cpu_request == 3
