"""Checks of a setting's converted value that the configuration layer cannot make itself.

The policy options (``--memory-manager-policy-options``,
``--topology-manager-policy-options``) are parsed by the memory manager and the topology
manager, which this layer may not import. A higher layer (``numamem serve``) hands their
parsers in as :data:`ValueChecks`; :func:`check_value` runs one on the value as it was
converted and names the flag, or the file's field and line, in front of its error. The
same parsers run again when the daemon builds its policies (a caller that passes no
checks gets their refusal there, without the field's name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from numamem.errors import ConfigError

ValueChecks = Mapping[str, Callable[[Any], object]]
"""``Flag.attr`` -> a function of the converted value that raises ConfigError."""


def check_value(checks: ValueChecks, attr: str, value: Any, where: str) -> None:
    """Run ``checks[attr]`` (when there is one) on ``value``; its ConfigError, if any, is
    raised again with ``where`` (the flag, or the file's field) in front."""
    check = checks.get(attr)
    if check is None:
        return
    try:
        check(value)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from err
