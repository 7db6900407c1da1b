"""numamem's NRI plugin runtime: the NRI wire protocol (multiplexed ttrpc) and the plugin's
connection lifecycle, with a :class:`~numamem.nri.handler.Handler` interface.

Layers, bottom up: :mod:`~numamem.nri.framing` (bytes, pure),
:mod:`~numamem.nri.transport` (socket and reader thread),
:mod:`~numamem.nri.rpc` (ttrpc server and client), :mod:`~numamem.nri.service`
(the NRI ``Plugin`` service over a handler), :mod:`~numamem.nri.plugin`
(connect, register, reconnect).

``numamem nri``'s handler, a client of the daemon (:mod:`numamem.client`), on top:
:mod:`~numamem.nri.memoryplugin` (the events), :mod:`~numamem.nri.creation`
(CreateContainer), :mod:`~numamem.nri.reconciler` (reconciliations) and
:mod:`~numamem.nri.daemonlink` (daemon RPCs within the runtime's deadlines), over the
pure :mod:`~numamem.nri.kube` (the runtime's pods and containers in the kubelet's
terms), :mod:`~numamem.nri.podrecord` (a pod's containers and their kinds),
:mod:`~numamem.nri.view` and :mod:`~numamem.nri.reconcile` (the runtime's view and
the reconciliation plans). The package never imports the daemon's internals (an
import-linter contract).
"""
