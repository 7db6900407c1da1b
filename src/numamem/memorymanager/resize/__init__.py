"""In-place resize of pinned memory (issue 30): a numamem extension the kubelet does not have.

Owns the rules for resizing one container's pinned memory (``decide``: grow, shrink, extend
the group, or refuse by name), the same rules for a pod allocated as a whole by its
pod-level budget (``pod``), which superset of its NUMA nodes a group grows to when the
growth does not fit (``extension``), and making the decided change on a state in one step
(``apply``). The deviation from upstream and its rules are in ``decide``'s docstring.

May import, of the memory manager: ``policy`` (the interface: which policy is in force),
``search`` (the hints by rule, the best subset), ``state`` and ``requests``; never
``manager``.
"""
