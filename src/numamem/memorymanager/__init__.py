"""The kubelet Memory Manager (None and Static policies) as a pure core.

No gRPC and no file I/O: the manager persists through a
:class:`~numamem.memorymanager.manager.StateStore` it is given.
"""
