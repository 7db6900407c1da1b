"""The project's fuzzer: every RPC of every service, from the protobuf descriptors.

``python -m tests.fuzz --requests N [--seed S]`` runs a campaign against the real
daemon (:mod:`tests.fuzz.run`); ``make soak`` runs a long one, ``make test`` a
bounded one (``tests/e2e/test_fuzz.py``).
"""
