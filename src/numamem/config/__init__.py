"""Daemon configuration.

* :mod:`numamem.config.model`: the values (Config, Limits, reservations, thresholds);
  the only part the core imports.
* :mod:`numamem.config.syntax`: kubelet syntax of reservations and eviction thresholds.
* :mod:`numamem.config.flags`: the ``numamem serve`` flag table and its merge.
* :mod:`numamem.config.yamlfile`: the ``--config`` file.

This package module imports none of them, so importing the model pulls in
neither argparse nor YAML.
"""
