"""The ``numamem`` command: ``serve`` and the client commands that talk to a daemon."""
