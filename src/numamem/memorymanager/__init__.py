"""The kubelet Memory Manager (None and Static policies) as a pure core.

No gRPC and no file I/O: the manager persists through a
:class:`~numamem.memorymanager.state.store.StateStore` it is given.

One subpackage per idea, each importing only those below it (pyproject's import-linter
contracts; ``search`` and ``state`` are independent of each other)::

    manager    the manager: committed versions and their one-write transactions,
       |       admission and Explain on a fork, the class in layers (reads, stale, resizes, writes)
    resize     in-place resize of pinned memory (a numamem extension): the rules,
       |       a pod-level budget's resize, the superset a group grows to, applying it
    policy     the None and Static policies: interface, allocation, restore on start,
       |       hints and Explain, options, init-container reuse, why a container is not pinned
    search | state
               search: one request's hints by rule and every search over them (no pods, no state)
               state:  the kubelet's state, its arithmetic and invariants, reserved memory,
                       drift on restore, the store port
    requests   what a pod and its containers ask for; pod-level resources (KEP-5526)

Each subpackage's ``__init__`` says what it owns and what it may import; none re-exports.
"""
