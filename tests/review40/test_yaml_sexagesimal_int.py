"""Review 40, finding: a YAML scalar that the YAML 1.1 resolver reads as a sexagesimal int
(``1:1:1:...``, base 60) costs the square of its length to construct, within every bound
of :mod:`numamem.config.yamlbounds` (one value, depth 1, far under MAX_FILE_BYTES).

PyYAML's ``construct_yaml_int`` folds the parts with ``value += digit * base; base *= 60``:
``base`` grows by one digit a part, so each step costs its length. Measured on this machine
(``compose_bounded`` + ``construct``, the path of ``--config``, the NRI config and
``load_mapping``): 16 KiB 0.11 s, 64 KiB 1.2 s, 256 KiB 10.9 s; the 1 MiB the bound allows
would take about three minutes of one core at start (``_check_scalar`` constructs it once
more before ``construct`` does). The module docstring promises "the work of reading one
[is] proportional to its bytes".

What should happen instead: a scalar that resolves (or is tagged) ``!!int``/``!!float`` with
more sexagesimal parts than any real value has (a handful) is refused, naming the line and
the bound, before it is constructed; or every plain int/float scalar is bounded in length
(a KubeletConfiguration has no number longer than a few dozen characters).
"""

from __future__ import annotations

import pytest

from numamem.config.yamlbounds import compose_bounded, construct, load_mapping
from numamem.errors import ConfigError

PARTS = 32_000
"""A 64 KiB document (1.2 s here): large enough to show the growth, small enough to run."""


def sexagesimal(parts: int) -> str:
    return "memoryManagerPolicy: 1" + ":1" * parts + "\n"


def test_a_sexagesimal_int_of_thousands_of_parts_is_refused_before_construction() -> None:
    text = sexagesimal(PARTS)
    assert len(text) < 1 << 20  # within MAX_FILE_BYTES
    with pytest.raises(ConfigError, match="line 1"):
        construct(compose_bounded(text, "--config 'x.yaml'"))


def test_load_mapping_refuses_it_too() -> None:
    """``load_mapping`` is what ``--config`` and the NRI plugin's config go through."""
    with pytest.raises(ConfigError, match="line 1"):
        load_mapping(sexagesimal(PARTS), "--config 'x.yaml'")
