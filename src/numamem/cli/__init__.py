"""The ``numamem`` command: ``serve`` and the client commands that talk to a daemon.

This module imports nothing, so the entry point can set ``GRPC_VERBOSITY`` before grpc loads.
"""


class UsageError(Exception):
    """The arguments do not make sense together; ``main`` prints the command's usage and the
    message and exits 2, as argparse does for its own checks."""
