"""The state the kubelet's memory manager keeps, and the rules it obeys.

Owns the state itself (machine state, container blocks, pod-level entries; the interfaces,
the in-memory state and its copy rules: ``model``), the port it persists through
(``store``: the kubelet-compatible file store is :mod:`numamem.checkpoint`'s), its
arithmetic (the default machine state, replay, reserve and release, the group rules:
``arithmetic``), how reserved memory enters it (``reserved``), its invariants
(``invariants``), what differs between a stored state and the machine now
(``differences``), and whether a stored state is restored on a machine that changed since it
was written (``drift``, per ``memory-drift-tolerance``). Pure: states are values the callers
hand in.

May import, of the memory manager, ``requests`` only (a pod allocated as a whole is
accounted by its pod-level blocks); never the search, the policies, resize or the manager.
From numamem: the value types (``memtypes``, ``quantity``), ``errors``, the machine model
(``topology``), bitmasks and ``config.model``.
"""
