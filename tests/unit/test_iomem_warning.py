"""Issue 38: ``memory-drift-tolerance=auto`` cannot read /proc/iomem's addresses without
CAP_SYS_ADMIN (the shipped unit and DaemonSet grant none): the daemon says so once at start,
naming the flag, why and what to do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.api.build import build_manager
from numamem.testing.server import default_config
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology.iomem import why_no_span
from numamem.topology.sysfs import discover

ZEROS = "00000000-00000000 : Kernel code\n00000000-00000000 : Kernel data\n"
REAL = "  01000000-01ffffff : Kernel code\n  02000000-02bfffff : Kernel data\n"


@pytest.mark.parametrize(
    ("iomem", "why"),
    [
        (
            ZEROS,
            "shows the kernel image's addresses as 0: the kernel hides them from processes "
            "without CAP_SYS_ADMIN, which the shipped systemd unit and DaemonSet do not grant",
        ),
        (None, "cannot be read (No such file or directory)"),
        (
            "00000000-00000fff : Reserved\n",
            "has no 'Kernel code', 'Kernel data' or 'Kernel bss' line",
        ),
    ],
)
def test_auto_without_a_bound_is_one_warning_naming_the_flag_why_and_the_fix(
    tmp_path: Path, iomem: str | None, why: str
) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    if iomem is not None:
        (proc / "iomem").write_text(iomem)
    assert why_no_span(proc) == f"{proc / 'iomem'} {why}"
    sysfs = write_sysfs(tmp_path / "sys", standard_nodes(2))
    config = replace(
        default_config(tmp_path, sysfs),
        proc_root=str(proc),
        memory_manager_policy_options=(("memory-drift-tolerance", "auto"),),
    )
    with capture_logs() as logs:
        build_manager(config, discover(str(sysfs)))
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert warning["event"] == (
        "--memory-manager-policy-options memory-drift-tolerance=auto has no bound, so it acts as "
        "off (a restart after a reboot that moved MemTotal is refused): "
        f"{proc / 'iomem'} {why}. Give an explicit tolerance instead, e.g. "
        "memory-drift-tolerance=256Mi (or fit, numamem's default)"
    )


@pytest.mark.parametrize("options", [(("memory-drift-tolerance", "auto"),), ()])
def test_no_warning_with_a_readable_span_or_without_auto(
    tmp_path: Path, options: tuple[tuple[str, str], ...]
) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "iomem").write_text(REAL if options else ZEROS)
    if options:
        assert why_no_span(proc) == ""
    sysfs = write_sysfs(tmp_path / "sys", standard_nodes(2))
    config = replace(
        default_config(tmp_path, sysfs), proc_root=str(proc), memory_manager_policy_options=options
    )
    with capture_logs() as logs:
        build_manager(config, discover(str(sysfs)))
    assert [e for e in logs if "memory-drift-tolerance" in str(e["event"])] == []
