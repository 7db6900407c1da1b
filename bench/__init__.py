"""``make bench``: :mod:`bench.run` runs the phases; they share :mod:`bench.harness`.

The phases (:mod:`bench.memory`, :mod:`bench.targets`, :mod:`bench.large_numa`,
:mod:`bench.hard_paths`, :mod:`bench.metacache`, :mod:`bench.startup`,
:mod:`bench.cli_start`, :mod:`bench.nri`) import the harness, never :mod:`bench.run` nor
each other; the import-linter contract on ``bench`` in pyproject.toml keeps it so.
"""
