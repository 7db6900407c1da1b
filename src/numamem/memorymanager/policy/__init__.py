"""The memory manager's policies: None and Static (kubelet ``policy.go``, ``policy_static.go``).

Owns the policy interface every policy implements (``interface``), the None policy (``none``), the
Static policy's allocation and release (``static``), its validation of a restored state on start
(``restore``), its topology hints and Explain (``hints``), its options (``options``), init-container
reuse (``reuse``), why an admitted container has no memory pinned (``unpinned``), and which policy a
configuration names (``new``). A policy keeps no state between calls: it works on the state it is
handed (a transaction's fork, or a committed state for readers).

May import, of the memory manager: ``search`` (the hints by rule), ``state`` and
``requests``; never ``resize`` or ``manager``.
"""
