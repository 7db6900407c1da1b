"""The status codes ttrpc carries (gRPC's numbering, in a google.rpc.Status).

Only the codes NRI's peers act on or numamem answers with are named. containerd
2.x delivers a lifecycle event through StateChange after the plugin answered
its dedicated method :data:`UNIMPLEMENTED`; its Synchronize splits the
pods and containers into smaller messages after :data:`RESOURCE_EXHAUSTED`
(from its own sender); any other error of CreateContainer fails the container.
"""

from __future__ import annotations

from numamem.errors import NriStatusError

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
FAILED_PRECONDITION = 9
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14


def unimplemented(method: str) -> NriStatusError:
    """The error a handler method that is not implemented raises."""
    return NriStatusError(UNIMPLEMENTED, f"method {method} not implemented")
