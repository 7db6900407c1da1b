"""The Static policy's options (``--memory-manager-policy-options``) and the KEP-5759 check.

Options, with upstream's names and error texts where upstream has them:

* ``memory-drift-tolerance`` (KEP-6232): ``off`` | ``auto`` | a quantity, plus
  numamem's ``fit`` (the default); see :mod:`numamem.memorymanager.state.drift`;
* ``hugepages-availability-verification`` (numamem's, named after KEP-5759
  "Memory Manager Hugepages Availability Verification"): ``true`` makes Allocate
  check the free hugepages the kernel reports on the chosen nodes.

Upstream requires the ``MemoryManagerDriftTolerance`` feature gate for the
first; numamem has no feature gates and takes the option as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from numamem.errors import AllocationError, ConfigError, QuantityError, quote
from numamem.memorymanager.state import drift
from numamem.memtypes import MEMORY
from numamem.quantity import format_bytes, parse_quantity
from numamem.topology import Machine

HUGEPAGES_VERIFICATION = "hugepages-availability-verification"
DRIFT_VALUES = (drift.FIT, drift.OFF, drift.AUTO, "<quantity>")
"""What ``memory-drift-tolerance`` takes, in the order the errors list it."""
OPTIONS = (drift.DRIFT_OPTION, HUGEPAGES_VERIFICATION)
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


@dataclass(frozen=True)
class StaticOptions:
    """The Static policy's options (``--memory-manager-policy-options``), resolved."""

    tolerance: drift.Tolerance = drift.DEFAULT
    auto_bound: int | None = None
    """What ``memory-drift-tolerance=auto`` derives on this machine (None: it cannot); used to
    say in refusals whether ``auto`` would accept."""
    state_file: str = "memory_manager_state"
    """How refusals name the state file."""
    free_hugepages: Callable[[int, int], int] | None = None
    """(node, page size kB) -> free pages the kernel reports, when
    ``hugepages-availability-verification`` is on (KEP-5759); None: not checked."""


@dataclass(frozen=True)
class ParsedOptions:
    """What the options say before the machine is known (``auto`` is resolved later)."""

    drift: str = drift.FIT
    """``off``, ``auto``, ``fit`` or a byte count as text."""
    drift_bytes: int = 0
    verify_hugepages: bool = False


def parse_options(options: Mapping[str, str]) -> ParsedOptions:
    """The memory manager policy options; errors carry upstream's texts."""
    mode, size, verify = drift.FIT, 0, False
    for name, value in options.items():
        if name == drift.DRIFT_OPTION:
            if value in (drift.OFF, drift.AUTO, drift.FIT):
                mode = value
                continue
            allowed = f"; allowed: {'|'.join(DRIFT_VALUES)} (e.g. 128Mi)"
            try:
                q = parse_quantity(value)
            except QuantityError as err:
                raise ConfigError(
                    f"bad value for option {quote(name, style='go')}: {err}{allowed}"
                ) from err
            if q.value < 0:
                raise ConfigError(
                    f"bad value for option {quote(name, style='go')}: {quote(value, style='go')} is negative{allowed}"
                )
            if q.value >= 1 << 63:  # the kubelet's int64; 1e1000 crashed format_bytes (issue 38)
                raise ConfigError(
                    f"bad value for option {quote(name, style='go')}: {quote(value, style='go')} is 2^63 bytes or more{allowed}"
                )
            size = int(q.value) if q.value.denominator == 1 else int(q.value) + 1
            mode = str(size)
        elif name == HUGEPAGES_VERIFICATION:
            if value in _TRUE:
                verify = True
            elif value in _FALSE:
                verify = False
            else:
                raise ConfigError(
                    f"bad value for option {quote(name, style='go')}: strconv.ParseBool: parsing "
                    f"{quote(value, style='go')}: invalid syntax"
                )
        else:
            raise ConfigError(f"unknown Memory Manager Policy option: {quote(name, style='go')}")
    return ParsedOptions(mode, size, verify)


def tolerance(parsed: ParsedOptions, auto_bound: int | None) -> drift.Tolerance:
    """The tolerance in force: ``auto`` is its bound on this machine, or off when the kernel
    image span cannot be read (as upstream: "memory drift tolerance stays off")."""
    if parsed.drift == drift.FIT:
        return drift.DEFAULT
    if parsed.drift == drift.OFF:
        return drift.EXACT
    if parsed.drift == drift.AUTO:
        if auto_bound is None:
            return drift.Tolerance(drift.OFF, 0, drift.AUTO)
        return drift.Tolerance("bound", auto_bound, drift.AUTO)
    return drift.Tolerance("bound", parsed.drift_bytes, format_bytes(parsed.drift_bytes))


def verify_hugepages(
    machine: Machine,
    free_hugepages: Callable[[int, int], int],
    bits: Sequence[int],
    requested: Mapping[str, int],
    reuse: Mapping[str, int],
) -> None:
    """KEP-5759: the kernel must report as many free hugepages on ``bits`` as this block
    takes (pods outside the memory manager's view may have used them)."""
    for name in sorted(requested):
        if name == MEMORY:
            continue
        need = max(requested[name] - reuse.get(name, 0), 0)
        if need == 0:
            continue
        available = 0
        for n in bits:
            pool = next((p for p in machine.node(n).hugepages if p.resource_name == name), None)
            if pool is not None:
                available += free_hugepages(n, pool.page_size_kb) * pool.page_size_bytes
        if available < need:
            raise AllocationError(
                f"insufficient {name} on NUMA node(s) [{','.join(map(str, bits))}]: requested "
                f"{format_bytes(need)}, available {format_bytes(available)}"
            )
