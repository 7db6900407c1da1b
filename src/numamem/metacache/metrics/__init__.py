"""Container and node metrics: the store GetContainerMetric reads, and the cgroup collector.

Nothing outside this package reads cgroups.
"""
