"""The kernel image's span in physical memory, from ``/proc/iomem`` (KEP-6232 ``auto``).

A reboot with KASLR moves the kernel image, which changes a node's MemTotal by
about its size; ``memory-drift-tolerance=auto`` tolerates that much plus 64 MiB.
The lines ``<start>-<end> : Kernel code|Kernel data|Kernel bss`` give it. Without
CAP_SYS_ADMIN the kernel shows every address as 0: then there is no bound.
"""

from __future__ import annotations

from pathlib import Path

AUTO_SLACK = 64 * 1024 * 1024
MAX_IOMEM_BYTES = 1 << 20
"""The most of ``iomem`` read (a large server's is tens of KiB; the kernel image lines come
first, under System RAM): the rest is not read (issue 38)."""
_KERNEL_PARTS = ("Kernel code", "Kernel data", "Kernel bss")
_MAX_HEX_DIGITS = 16
"""A physical address is 64 bits: a longer number is no address."""


def kernel_image_span(proc_root: str | Path) -> int | None:
    """``max(end) - min(start) + 1`` over the kernel image lines, or None when the file is
    unreadable, has no such line, or shows only zero addresses (:func:`why_no_span` says
    which)."""
    return _scan(proc_root)[0]


def why_no_span(proc_root: str | Path) -> str:
    """Why :func:`kernel_image_span` is None, in words ("" when it is not)."""
    return _scan(proc_root)[1]


def _scan(proc_root: str | Path) -> tuple[int | None, str]:
    path = Path(proc_root) / "iomem"
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_IOMEM_BYTES).decode("ascii", errors="replace")
    except OSError as err:
        return None, f"{path} cannot be read ({err.strerror or err})"
    starts: list[int] = []
    ends: list[int] = []
    for line in text.splitlines():
        head, sep, name = line.rpartition(":")
        if not sep or name.strip() not in _KERNEL_PARTS:
            continue
        first, dash, last = head.strip().partition("-")
        if max(len(first.strip()), len(last.strip())) > _MAX_HEX_DIGITS:
            continue
        try:
            start, end = int(first.strip(), 16), int(last.strip(), 16)
        except ValueError:
            continue
        if not dash or end < start:
            continue
        starts.append(start)
        ends.append(end)
    if not starts:
        return None, f"{path} has no 'Kernel code', 'Kernel data' or 'Kernel bss' line"
    if not any(starts) and not any(ends):
        return None, (
            f"{path} shows the kernel image's addresses as 0: the kernel hides them from "
            "processes without CAP_SYS_ADMIN, which the shipped systemd unit and DaemonSet do "
            "not grant"
        )
    return max(ends) - min(starts) + 1, ""


def auto_drift_bound(proc_root: str | Path) -> int | None:
    """The ``auto`` bound: the kernel image span plus 64 MiB, or None."""
    span = kernel_image_span(proc_root)
    return None if span is None else span + AUTO_SLACK
