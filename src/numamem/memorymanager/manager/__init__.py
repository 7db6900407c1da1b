"""The memory manager (kubelet ``memory_manager.go``): transactions over committed versions.

Owns the committed versions of the state and how a change becomes one, in one write,
linearizable (``versions``), the container map (``containermap``), admission and Explain on
a fork of a committed state (``forked``), and the class :class:`Manager
<numamem.memorymanager.manager.writes.Manager>` in layers, each a mixin of the next: the
readers (``reads``), then active pods and stale state (``stale``), then resizes
(``resizes``), then the lifecycle and the writers (``writes``, where ``Manager`` is).
The store it persists through is handed in (:mod:`numamem.memorymanager.state.store`).

May import everything below it in the memory manager: ``resize``, ``policy``, ``search``,
``state`` and ``requests``. Inside, a module imports only those below it: ``writes`` >
``resizes`` > ``stale`` > ``reads`` > ``forked`` | ``versions`` > ``containermap``
(pyproject's import-linter contracts).
"""
