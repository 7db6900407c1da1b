"""kubelet Topology Manager semantics: NUMA bitmasks, hint merging, admission.

Pure code: no I/O, no gRPC. Resource managers take part through the
:class:`~numamem.topologymanager.admission.HintProvider` protocol.
"""
