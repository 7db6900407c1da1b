"""``numamem.v1.MetaReader`` and ``numamem.v1.MetaWriter`` over the metacache.

Validation (INVALID_ARGUMENT naming the field): a key that disagrees with the
info's own ``pod_uid``/``container_name``/``pool_name``/``region_name`` (an
empty one is filled from the key), a malformed cpulist or one naming a CPU id
>= ``cpuset.MAX_CPUS`` (a NUMA id >= ``MAX_NUMA_NODES``: an assignment's key,
``binding_numas``), kept as ranges (issue 38), a negative or non-finite
request/limit/headroom, an unknown container type, an unknown field-mask path
(the conversions in :mod:`numamem.api.metacache_wire`). Missing entries are NOT_FOUND.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from numamem.api.metacache_wire import (
    check_entries,
    checked_keys,
    container_from_proto,
    container_to_proto,
    mask_updater,
    missing,
    pool_from_proto,
    pool_to_proto,
    region_from_proto,
    region_to_proto,
)
from numamem.api.validation import check_string
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.config.model import Config
from numamem.errors import quote
from numamem.logging import get_logger
from numamem.metacache.bounds import warn_beyond_api_bounds
from numamem.metacache.cache import MetaCache, State
from numamem.metacache.journal_store import JournalPersister
from numamem.metacache.metrics.collector import Collector, Target
from numamem.metacache.metrics.store import MetricStore, insurance_period_ns
from numamem.metacache.persistence import STATE_FILE
from numamem.metacache.types import ContainerInfo
from numamem.v1 import common_pb2, metacache_pb2, metacache_pb2_grpc

READER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaReader"].full_name
WRITER_SERVICE = metacache_pb2.DESCRIPTOR.services_by_name["MetaWriter"].full_name
_log = get_logger("metacache")


# --- servicers ----------------------------------------------------------------------


class MetaReaderServicer(metacache_pb2_grpc.MetaReaderServicer):
    def __init__(
        self, cache: MetaCache, metrics: MetricStore, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.clock = clock

    def GetContainerEntries(
        self, request: metacache_pb2.GetContainerEntriesRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.GetContainerEntriesResponse:
        entries = self.cache.get_container_entries(check_string(request.pod_uid, "pod_uid"))
        if entries is None:
            raise missing(f"pod {quote(request.pod_uid)}")
        return metacache_pb2.GetContainerEntriesResponse(
            containers={name: container_to_proto(info) for name, info in entries.items()}
        )

    def GetContainerInfo(
        self, request: metacache_pb2.GetContainerInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.ContainerInfo:
        info = self.cache.get_container_info(*checked_keys(request.pod_uid, request.container_name))
        if info is None:
            raise missing(
                f"container {quote(request.container_name)} of pod {quote(request.pod_uid)}"
            )
        return container_to_proto(info)

    def GetContainerMetric(
        self, request: metacache_pb2.GetContainerMetricRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.GetContainerMetricResponse:
        pod_uid, name = checked_keys(request.pod_uid, request.container_name)
        metric = check_string(request.metric_name, "metric_name")
        value = self.metrics.get_container_metric(pod_uid, name, metric, self.clock())
        stamp = Timestamp()
        stamp.FromNanoseconds(value.time_ns)
        return metacache_pb2.GetContainerMetricResponse(value=value.value, time=stamp)

    def ListContainers(
        self, request: metacache_pb2.ListContainersRequest, context: grpc.ServicerContext
    ) -> Iterator[metacache_pb2.ContainerInfo]:
        state = self.cache.state()
        if request.pod_uid:
            if request.pod_uid not in state.pods:
                raise missing(f"pod {quote(request.pod_uid)}")
            pods = [request.pod_uid]
        else:
            pods = sorted(state.pods)
        for pod in pods:
            for name in sorted(state.pods[pod]):
                yield container_to_proto(state.pods[pod][name])

    def GetPoolInfo(
        self, request: metacache_pb2.GetPoolInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.PoolInfo:
        info = self.cache.get_pool_info(check_string(request.pool_name, "pool_name"))
        if info is None:
            raise missing(f"pool {quote(request.pool_name)}")
        return pool_to_proto(info)

    def GetPoolSize(
        self, request: metacache_pb2.GetPoolSizeRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.GetPoolSizeResponse:
        size = self.cache.get_pool_size(check_string(request.pool_name, "pool_name"))
        if size is None:
            raise missing(f"pool {quote(request.pool_name)}")
        return metacache_pb2.GetPoolSizeResponse(size=size)

    def ListPools(
        self, request: metacache_pb2.ListPoolsRequest, context: grpc.ServicerContext
    ) -> Iterator[metacache_pb2.PoolInfo]:
        state = self.cache.state()
        for name in sorted(state.pools):
            yield pool_to_proto(state.pools[name])

    def GetRegionInfo(
        self, request: metacache_pb2.GetRegionInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.RegionInfo:
        info = self.cache.get_region_info(check_string(request.region_name, "region_name"))
        if info is None:
            raise missing(f"region {quote(request.region_name)}")
        return region_to_proto(info)

    def ListRegions(
        self, request: metacache_pb2.ListRegionsRequest, context: grpc.ServicerContext
    ) -> Iterator[metacache_pb2.RegionInfo]:
        state = self.cache.state()
        for name in sorted(state.regions):
            yield region_to_proto(state.regions[name])


class MetaWriterServicer(metacache_pb2_grpc.MetaWriterServicer):
    def __init__(self, cache: MetaCache) -> None:
        self.cache = cache

    def AddContainer(
        self, request: metacache_pb2.AddContainerInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        pod_uid, name = checked_keys(request.pod_uid, request.container_name)
        info = (
            container_from_proto(request.info, pod_uid, name) if request.HasField("info") else None
        )
        self.cache.add_container(pod_uid, name, info)
        return metacache_pb2.MetaWriteResponse()

    def SetContainerInfo(
        self, request: metacache_pb2.SetContainerInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        pod_uid, name = checked_keys(request.pod_uid, request.container_name)
        self.cache.set_container_info(
            pod_uid, name, container_from_proto(request.info, pod_uid, name)
        )
        return metacache_pb2.MetaWriteResponse()

    def DeleteContainer(
        self, request: metacache_pb2.DeleteContainerRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        self.cache.delete_container(*checked_keys(request.pod_uid, request.container_name))
        return metacache_pb2.MetaWriteResponse()

    def RemovePod(
        self, request: metacache_pb2.RemovePodRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        self.cache.remove_pod(check_string(request.pod_uid, "pod_uid"))
        return metacache_pb2.MetaWriteResponse()

    def DeleteContainers(
        self, request: metacache_pb2.DeleteContainersRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.DeleteContainersResponse:
        for name in ("pod_uids", "qos_levels", "owner_pool_names", "keep"):
            check_entries(getattr(request, name), name)
        pods, qos, owners = (
            set(request.pod_uids),
            set(request.qos_levels),
            set(request.owner_pool_names),
        )
        keep = {(r.pod_uid, r.container_name) for r in request.keep}

        def doomed(info: ContainerInfo) -> bool:
            return (
                (not pods or info.pod_uid in pods)
                and (not qos or info.qos_level in qos)
                and (not owners or info.owner_pool_name in owners)
                and (info.pod_uid, info.container_name) not in keep
            )

        deleted = self.cache.range_and_delete_container(doomed, request.safe_time_unix_nano)
        return metacache_pb2.DeleteContainersResponse(
            deleted=[common_pb2.ContainerRef(pod_uid=p, container_name=c) for p, c in deleted]
        )

    def UpdateContainers(
        self, request: metacache_pb2.UpdateContainersRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        check_entries(request.updates, "updates")
        updates = []
        for i, update in enumerate(request.updates):
            updates.append(
                (update.pod_uid, update.container_name, mask_updater(update, f"updates[{i}]"))
            )
        self.cache.update_containers(updates)
        return metacache_pb2.MetaWriteResponse()

    def SetPoolInfo(
        self, request: metacache_pb2.SetPoolInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        name = check_string(request.pool_name, "pool_name")
        self.cache.set_pool_info(name, pool_from_proto(request.info, name))
        return metacache_pb2.MetaWriteResponse()

    def DeletePool(
        self, request: metacache_pb2.DeletePoolRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        self.cache.delete_pool(check_string(request.pool_name, "pool_name"))
        return metacache_pb2.MetaWriteResponse()

    def GCPoolEntries(
        self, request: metacache_pb2.GCPoolEntriesRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.GCPoolEntriesResponse:
        check_entries(request.living_pool_names, "living_pool_names")
        return metacache_pb2.GCPoolEntriesResponse(
            deleted=self.cache.gc_pool_entries(request.living_pool_names)
        )

    def SetRegionEntries(
        self, request: metacache_pb2.SetRegionEntriesRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        check_entries(request.entries, "entries")
        entries = {
            check_string(name, "entries key"): region_from_proto(
                info, name, f"entries[{quote(name)}]"
            )
            for name, info in request.entries.items()
        }
        self.cache.set_region_entries(entries)
        return metacache_pb2.MetaWriteResponse()

    def SetRegionInfo(
        self, request: metacache_pb2.SetRegionInfoRequest, context: grpc.ServicerContext
    ) -> metacache_pb2.MetaWriteResponse:
        name = check_string(request.region_name, "region_name")
        self.cache.set_region_info(name, region_from_proto(request.info, name))
        return metacache_pb2.MetaWriteResponse()


class MetaCacheComponent:
    """Restores the metacache in start() (refusing a corrupt file unless told to discard it)."""

    service_names: Sequence[str] = (READER_SERVICE, WRITER_SERVICE)

    def __init__(
        self,
        config: Config,
        extra_targets: Callable[[], Sequence[Target]] | None = None,
        fs: FileSystem = REAL,
    ) -> None:
        self.config = config
        self.persister = (
            JournalPersister(
                config.state_dir, min_compact_bytes=config.metacache_compact_bytes, fs=fs
            )
            if config.metacache_persist
            else None
        )
        self._restored: State | None = None
        self.cache = self._new_cache(None)
        self.metrics = MetricStore(insurance_period_ns(config.metric_insurance_period_seconds))
        self.reader = MetaReaderServicer(self.cache, self.metrics)
        self.writer = MetaWriterServicer(self.cache)
        self._extra_targets = extra_targets or (lambda: [])
        self.collector = Collector(
            self.metrics,
            config.cgroup_root,
            self.targets,
            interval_s=config.metric_interval_seconds,
        )

    def _new_cache(self, initial: State | None) -> MetaCache:
        limits = self.config.limits
        return MetaCache(
            self.persister,
            initial=initial,
            max_entries=limits.max_metacache_entries,
            max_entry_bytes=limits.max_metacache_entry_bytes,
            max_bytes=limits.max_metacache_bytes,
        )

    def targets(self) -> list[Target]:
        """Containers with a known runtime id: metacache entries first, then the memory manager's ids."""
        found = [
            (pod_uid, name, info.container_id)
            for pod_uid, containers in self.cache.state().pods.items()
            for name, info in containers.items()
            if info.container_id
        ]
        return found + list(self._extra_targets())

    def liveness_locks(self) -> list[tuple[str, threading.Lock]]:
        """The writer lock the daemon's watchdog probe takes (:mod:`numamem.api.watchdog`)."""
        return [("metacache", self.cache.writer_lock)]

    def liveness_writes(self) -> list[tuple[str, Callable[[], float]]]:
        """The commit round the watchdog probe times (it writes outside the writer lock)."""
        return [("metacache", self.cache.commit_running_for)]

    def register(self, server: grpc.Server) -> None:
        metacache_pb2_grpc.add_MetaReaderServicer_to_server(self.reader, server)
        metacache_pb2_grpc.add_MetaWriterServicer_to_server(self.writer, server)

    def watch_durability(self, report: Callable[[str, str | None], None]) -> None:
        if self.persister is not None:
            self.persister.durability_observers.append(lambda problem: report(STATE_FILE, problem))

    def load(self) -> None:
        """Read and verify the checkpoint (when persisting); writes nothing."""
        if self.persister is None:
            return
        self._restored = self.persister.load(
            discard_corrupt=self.config.metacache_discard_corrupt_state
        )
        self.cache = self._new_cache(self._restored or State())
        self.reader.cache = self.cache
        self.writer.cache = self.cache

    def start(self) -> None:
        """Write a missing checkpoint, then start the metric collector's thread."""
        if self.persister is not None:
            self.persister.restored()  # creates missing (or discarded) files at once
            self._log_restored()
        self.collector.start()

    def _log_restored(self) -> None:
        state = self.cache.state()
        _log.info(
            "metacache restored",
            containers=sum(len(c) for c in state.pods.values()),
            pools=len(state.pools),
            regions=len(state.regions),
        )
        warn_beyond_api_bounds(state, self.config.state_dir)

    def stop(self) -> None:
        """Stop the collector; leave a compacted snapshot and an empty journal (the daemon
        stops serving before its components stop, so no write is in flight)."""
        self.collector.stop()
        if self.persister is not None:
            try:
                self.persister.close()
            except Exception as err:  # noqa: BLE001 - shutdown goes on; the journal stays
                _log.warning(
                    "metacache: could not compact at shutdown; the journal is replayed at the "
                    "next start",
                    error=str(err),
                )
