"""What a pod and its containers ask the memory manager for.

Owns the requests of a container or a pod as the kubelet's ``getRequestedResources`` reads
them (``resources``), and pod-level resources (KEP-5526, ``podlevel``): which pods are
allocated as a whole, how a pod-level budget divides among the containers, and what the
machine state accounts for such a pod. Pure functions of the pod.

May import: nothing else of the memory manager (it is the bottom layer: every other
subpackage may import it); from numamem the value types (``pod``, ``memtypes``,
``quantity``), ``errors`` and the feature gates of ``config.model``.
"""
