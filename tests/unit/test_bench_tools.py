"""The bench's documented commands run: the profiler of each operation, the performance-table generator,
the bound daemon (``bench.bounds``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bounds, harness, profile
from numamem.client import NumamemClient


@pytest.mark.parametrize("operation", profile.OPERATIONS)
def test_the_documented_profile_command_profiles_each_operation(
    operation: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bench.profile OP`` (docs/performance.md) runs the call it names and
    prints its profile; a call that raised (a wrong request, a refused state) fails here."""
    assert profile.main([operation, "--calls", "5", "--warmup", "3", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert f"{operation}: 5 calls" in out
    assert "Ordered by: internal time" in out and "Ordered by: cumulative time" in out


@pytest.mark.parametrize("bound", bounds.BOUNDS)
def test_the_bound_daemon_replays_allocate_and_admit(bound: str, tmp_path: Path) -> None:
    """``bench.bounds`` behind ``bench.harness.daemon(bound=..., real_admits=2)``: the first
    Allocate and the first two Admits are real (the state holds them), later ones return
    the last real reply unchanged and, for ``write``, rewrite the state's bytes after it
    beside it; ``noop`` writes nothing."""
    with harness.daemon(tmp_path / "d", bound=bound, real_admits=2) as d:
        client = NumamemClient(d.socket, timeout=30)
        state = Path(d.state_dir) / "memory_manager_state"
        beside = state.with_suffix(".bound")
        first = client.allocate(harness.guaranteed("a0"), "c0")
        assert first.blocks, "the first Allocate pins memory"
        held = state.read_bytes()
        assert client.admit(harness.guaranteed("b0", containers=2)).admitted
        after_first = state.read_bytes()
        assert after_first != held, "the first Admit is real: the state file changed"
        second = client.admit(harness.guaranteed("b1", containers=2))
        assert second.admitted
        after_admits = state.read_bytes()
        assert after_admits != after_first, "so is the second"
        assert not beside.exists()
        # Later calls: another pod's Allocate returns a0's blocks; the state stays as it was.
        assert client.allocate(harness.guaranteed("other"), "c0") == first
        assert client.admit(harness.guaranteed("c0")) == second
        assert state.read_bytes() == after_admits
        if bound == "write":
            assert beside.read_bytes() == after_admits  # Admit's replay wrote last
        else:
            assert not beside.exists()
        client.close()


def test_no_real_admit_is_refused() -> None:
    with pytest.raises(SystemExit, match="at least one Admit must be real"):
        bounds.install("write", Path("/nonexistent"), real_admits=0)


def test_an_unknown_bound_is_refused() -> None:
    with pytest.raises(SystemExit, match="NUMAMEM_BENCH_BOUND='fast': use one of noop, write"):
        bounds.install("fast", Path("/nonexistent"))


def test_the_nri_phases_breakdown_splits_the_difference_by_where_it_was_measured() -> None:
    """bench.nri: the p50 difference with the plugin, the median of the rounds' paired
    differences, NRI's own share (the null plugin), numamem's, its handling and Admit."""
    from bench import nri

    ms = 1e-3
    cri = {
        "with": [55 * ms, 60 * ms, 70 * ms],
        "null": [52 * ms, 59 * ms, 60 * ms],
        "without": [50 * ms, 58 * ms, 62 * ms],
        "handling": [3 * ms, 4 * ms, 5 * ms],
        "admit": [2 * ms, 3 * ms, 3 * ms],
    }
    parts = {k: round(v / ms, 6) for k, v in nri.breakdown(cri).items()}
    assert parts == {
        "delta": 2.0, "paired": 5.0, "nri": 1.0, "numamem": 1.0, "handling": 4.0, "admit": 3.0
    }  # fmt: skip


def test_the_nri_phase_runs_its_scripted_part(short_root: Path) -> None:
    """The phase's first part end to end with 2 pods: the real numamem nri command, the
    scripted runtime, the daemon; every sample taken (the CRI part is the e2e harness's)."""
    from bench import nri

    samples = nri.scripted(short_root / "s", 2)
    assert {k: len(v) for k, v in samples.items()} == {"floor": 2, "admit": 2, "create": 2}
    assert all(v > 0 for vs in samples.values() for v in vs)
