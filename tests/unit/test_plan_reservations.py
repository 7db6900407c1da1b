"""``numamem plan-reservations``: what it prints passes validation when fed back to serve."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from numamem.cli.main import main
from numamem.config.syntax import (
    parse_eviction_hard,
    parse_reserved_memory,
    parse_reserved_resources,
)
from numamem.errors import ReservedMemoryError
from numamem.memorymanager.state.reserved import plan_reserved_memory
from numamem.quantity import parse_quantity
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology import Machine, NUMANode

GI = 1024**3


@pytest.mark.parametrize("count", [1, 2, 8])
@pytest.mark.parametrize("hugepages", [True, False])
@pytest.mark.parametrize("spread", [False, True])
def test_the_plan_starts_the_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: int, hugepages: bool, spread: bool
) -> None:
    nodes = standard_nodes(count, memory_gib=8, hugepages=None if hugepages else {})
    write_sysfs(tmp_path / "sys", nodes)
    flags = [
        "--sysfs-root",
        str(tmp_path / "sys"),
        "--system-reserved",
        "memory=1Gi",
        "--kube-reserved",
        "memory=500Mi",
        "--eviction-hard",
        "memory.available<5%",
        *(["--spread"] if spread else []),
    ]
    assert main(["plan-reservations", *flags]) == 0
    out = capsys.readouterr().out
    flag = next(line for line in out.splitlines() if line.startswith("--reserved-memory"))
    spec = flag.split(" ", 1)[1].strip("'")
    docs = [d for d in yaml.safe_load_all(out.replace("\n# ", "\n---\n# ")) if d]
    assert docs[0]["reservedMemory"] == docs[1]["reservedMemory"]
    assert parse_reserved_memory(docs[0]["reservedMemory"], "yaml") == parse_reserved_memory(
        spec, "flag"
    )
    if spread and count > 1:
        assert len(docs[0]["reservedMemory"]) == count
    with serve_in_process(
        nodes,
        reserved_memory=parse_reserved_memory(spec, "plan"),
        system_reserved=parse_reserved_resources("memory=1Gi", "t"),
        kube_reserved=parse_reserved_resources("memory=500Mi", "t"),
        eviction_hard=parse_eviction_hard("memory.available<5%", "t"),
    ) as server:
        assert server.client.get_allocatable_memory()


def test_the_refusal_says_what_passes(tmp_path: Path) -> None:
    with (
        pytest.raises(ReservedMemoryError) as info,
        serve_in_process(
            reserved_memory=parse_reserved_memory("0:memory=2Gi", "t"),
            system_reserved=parse_reserved_resources("memory=924Mi", "t"),
            eviction_hard=parse_eviction_hard("memory.available<100Mi", "t"),
        ),
    ):
        pass
    first, fix = str(info.value).splitlines()
    assert first == (
        'the total amount "2Gi" of type "memory" is not equal to the value "1Gi" determined by '
        "Node Allocatable feature"
    )
    assert fix.startswith("  fix: this passes: --reserved-memory '0:memory=1Gi'")


def test_spread_is_exact_and_proportional() -> None:
    machine = Machine((NUMANode(0, 16 * GI), NUMANode(1, 48 * GI)))
    [a, b] = plan_reserved_memory(machine, {"memory": parse_quantity("1000Mi")}, spread=True)
    assert (a.numa_node, b.numa_node) == (0, 1)
    total = sum(q.as_int64() for r in (a, b) for _, q in r.limits)
    assert total == 1000 * 1024**2
    assert dict(b.limits)["memory"].as_int64() == 750 * 1024**2
    with pytest.raises(ReservedMemoryError) as info:
        plan_reserved_memory(Machine((NUMANode(0, GI),)), {"memory": parse_quantity("2Gi")})
    assert str(info.value) == (
        "NUMA node 0 has 1Gi (1073741824) of memory, fewer than the 2Gi (2147483648) to reserve "
        "there; use --spread or reserve less"
    )
    # With --spread given, the fix is not "use --spread" (issue 26).
    with pytest.raises(ReservedMemoryError) as info:
        plan_reserved_memory(
            Machine((NUMANode(0, GI), NUMANode(1, GI))),
            {"memory": parse_quantity("3Gi")},
            spread=True,
        )
    assert str(info.value).endswith(
        "to reserve there; reserve less (--spread already divides it over the nodes)"
    )


def test_reservations_larger_than_a_node_name_sizes_in_one_form() -> None:
    """Units: every size in a message reads `40Gi (42949672960)` (was raw bytes)."""
    from numamem.memorymanager.state.arithmetic import default_machine_state
    from numamem.topology import HugePagePool

    machine = Machine((NUMANode(0, 16 * GI, (HugePagePool(1048576, 2, 2),)),))
    with pytest.raises(ReservedMemoryError) as info:
        default_machine_state(machine, {0: {"memory": 40 * GI}})
    assert (
        "reserved memory 40Gi (42949672960) plus hugepages 2Gi (2147483648) exceed the "
        "node's MemTotal 16Gi (17179869184)"
    ) in str(info.value)
    with pytest.raises(ReservedMemoryError) as info:
        default_machine_state(machine, {0: {"hugepages-1Gi": 3 * GI}})
    assert (
        "reserved hugepages-1Gi 3Gi (3221225472) exceeds the node's hugepages-1Gi total 2Gi (2147483648)"
        in str(info.value)
    )
