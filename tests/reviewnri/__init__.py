"""REVIEW DEMONSTRATIONS (branch ``reviewnri``): the hostile review of ``numamem nri`` on main
(673a7f0). The ``test_review_*`` modules FAIL on purpose: each asserts the kubelet's behaviour
or a README claim the plugin does not keep (one test, marked SOUND, passes: a checked area).
Do not merge them into the suite as they are: turn each into a regression test with its fix.
``probe_*.py`` (not collected; run with ``pytest -s FILE``) print what the real containerd
sends; ``measure_sync.py`` times Synchronize against the 2 s request timeout."""
