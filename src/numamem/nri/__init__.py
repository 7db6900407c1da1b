"""numamem's NRI plugin runtime: the NRI wire protocol (multiplexed ttrpc) and the plugin's
connection lifecycle, with a :class:`~numamem.nri.handler.Handler` interface.

Layers, bottom up: :mod:`~numamem.nri.framing` (bytes, pure),
:mod:`~numamem.nri.transport` (socket and reader thread),
:mod:`~numamem.nri.rpc` (ttrpc server and client), :mod:`~numamem.nri.service`
(the NRI ``Plugin`` service over a handler), :mod:`~numamem.nri.plugin`
(connect, register, reconnect). It imports the generated messages
(:mod:`numamem.nriapi`), :mod:`numamem.errors` and :mod:`numamem.logging`, and
never the daemon's internals (an import-linter contract).
"""
