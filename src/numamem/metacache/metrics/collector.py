"""The periodic collector: samples known containers' cgroups into the metric store.

Every ``--metric-interval`` seconds it asks its ``targets`` function for the
containers to sample ((pod uid, container name, container id): the ids from
``ContainerInfo.container_id`` and from ``MemoryManager.AddContainer``),
resolves each cgroup (:mod:`numamem.metacache.metrics.cgroup`), reads it, and
replaces that container's metrics in the store with values stamped with the
sample time. Rates (``cpu.usage.container`` and its user/sys parts, in cores)
need two samples: value delta over time delta.

A cgroup that disappears between listing and reading is normal (the container
stopped): its metrics are dropped and a debug line logged. Any other read
error drops that container's metrics, is counted and logged as a warning; the
loop never stops. Node memory figures come from psutil.

Other samplings that must run on the same interval (the placement of pinned
containers, :mod:`numamem.metacache.metrics.placement`) add themselves to
:attr:`Collector.rounds`: each is called at the end of every round with the
round's time and returns how many containers it could not read (added to the
round's errors); one that raises is counted as one error and logged, and the
others still run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from numamem.errors import CgroupFormatError, quote
from numamem.logging import get_logger
from numamem.metacache.metrics import cgroup, cgroupsample
from numamem.metacache.metrics.store import MetricStore, MetricValue

_log = get_logger("collector")

Target = tuple[str, str, str]
"""(pod uid, container name, container id)."""

RATES = (
    ("cpu_ns", "cpu.usage.container"),
    ("user_ns", "cpu.usage.user.container"),
    ("sys_ns", "cpu.usage.sys.container"),
)


@dataclass
class _Previous:
    time_ns: int
    counters: dict[str, float]
    dirs: cgroup.CgroupDirs


@dataclass
class CollectorStats:
    samples: int = 0
    errors: int = 0
    gone: int = 0
    last_duration_s: float = 0.0
    durations: list[float] = field(default_factory=list)


class Collector:
    """Thread-safe to read; :meth:`sample_once` must not run concurrently with itself."""

    def __init__(
        self,
        store: MetricStore,
        root: str | Path,
        targets: Callable[[], Sequence[Target]],
        *,
        interval_s: float = 10.0,
        clock: Callable[[], int] = time.time_ns,
        page_size: int | None = None,
        clk_tck: int | None = None,
        node_memory: Callable[[], tuple[int, int, int, int]] | None = None,
    ) -> None:
        self.store = store
        self.root = Path(root)
        self.targets = targets
        self.interval_s = interval_s
        self.clock = clock
        self.page_size = page_size or cgroup.page_size()
        self.clk_tck = clk_tck or cgroupsample.clock_ticks()
        self.node_memory = node_memory or _psutil_memory
        self.mode = cgroup.detect_mode(self.root)
        self.stats = CollectorStats()
        self._previous: dict[tuple[str, str], _Previous] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.observers: list[Callable[[float, int], None]] = []
        self.rounds: list[Callable[[int], int]] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="metrics-collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # noqa: BLE001 - the loop must survive any bug in one round
                self.stats.errors += 1
                _log.exception("metrics collection round failed")
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        total, available, used, free = self.node_memory()
        self.store.set_node_metrics(
            {
                "mem.total.system": MetricValue(total, now),
                "mem.available.system": MetricValue(available, now),
                "mem.used.system": MetricValue(used, now),
                "mem.free.system": MetricValue(free, now),
            }
        )
        live: set[tuple[str, str]] = set()
        errors = 0
        for pod_uid, name, container_id in self.targets():
            key = (pod_uid, name)
            if not container_id or key in live:
                continue
            live.add(key)
            if not self._sample_container(key, container_id, now):
                errors += 1
        self.store.retain(live)
        for key in [k for k in self._previous if k not in live]:
            del self._previous[key]
        for extra in self.rounds:
            try:
                errors += extra(now)
            except Exception:  # noqa: BLE001 - one sampling's bug must not stop the others
                errors += 1
                _log.exception("a sampling of the metrics round failed")
        duration = time.perf_counter() - started
        self.stats.samples += 1
        self.stats.errors += errors
        self.stats.last_duration_s = duration
        for observer in self.observers:
            observer(duration, errors)

    def _sample_container(self, key: tuple[str, str], container_id: str, now: int) -> bool:
        previous = self._previous.get(key)
        dirs = (
            previous.dirs
            if previous is not None
            else cgroup.resolve(self.root, self.mode, key[0], container_id)
        )
        if dirs is None:
            self.store.delete_container(*key)
            return True  # not started yet, or not on this node: no metrics, no error
        try:
            raw = cgroupsample.sample(dirs, self.page_size, self.clk_tck)
        except FileNotFoundError:
            self.stats.gone += 1
            self._previous.pop(key, None)
            self.store.delete_container(*key)
            _log.debug(
                "cgroup disappeared; container stopped",
                pod_uid=quote(key[0], style="bare"),
                container=quote(key[1], style="bare"),
            )
            return True
        except (OSError, ValueError, CgroupFormatError) as err:
            self._previous.pop(key, None)
            self.store.delete_container(*key)
            _log.warning(
                "cannot read container cgroup",
                pod_uid=quote(key[0], style="bare"),
                container=quote(key[1], style="bare"),
                error=str(err),
            )
            return False
        values = {name: MetricValue(value, now) for name, value in raw.gauges.items()}
        if previous is not None and now > previous.time_ns:
            elapsed = now - previous.time_ns
            for counter, metric in RATES:
                if counter in raw.counters and counter in previous.counters:
                    delta = raw.counters[counter] - previous.counters[counter]
                    if delta >= 0:
                        values[metric] = MetricValue(delta / elapsed, now)
        if (
            "cpu.usage.container" in values
            and values.get("cpu.limit.container", MetricValue(0, 0)).value > 0
        ):
            limit = values["cpu.limit.container"].value
            values["cpu.usage.ratio.container"] = MetricValue(
                values["cpu.usage.container"].value / limit, now
            )
        values["mem.updatetime.container"] = MetricValue(now / 10**9, now)
        self.store.set_container_metrics(key[0], key[1], values)
        self._previous[key] = _Previous(now, raw.counters, dirs)
        return True


def _psutil_memory() -> tuple[int, int, int, int]:
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available), int(vm.used), int(vm.free)
