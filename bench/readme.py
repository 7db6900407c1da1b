"""The documented performance table, generated from one bench run (never typed by hand).

``python -m bench.readme [RESULT.json]`` (or ``make bench BENCH_ARGS=--readme``) copies a
run's figures (by default the newest file in ``bench/results/``) to the tracked
``bench/figures.json`` and regenerates the documentation (``make docs``: the table is
:func:`render` of that file, written by ``tests.docgen``). ``tests/unit/test_docs.py``
checks that the table is what ``bench/figures.json`` renders, so the documentation cannot say
what no run measured. A ``--quick`` run is refused: its figures are a smoke test, not numbers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIGURES = REPO / "bench" / "figures.json"
RESULTS = REPO / "bench" / "results"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").strip()


def render(figures: Mapping[str, Any]) -> str:
    """The markdown block for one run: where and when it ran, then every row it printed."""
    machine = figures.get("machine", {})
    floor = figures.get("floor", {})
    floor_text = f"{floor['p50_ms']:.3f} ms" if isinstance(floor, dict) and floor else "?"
    lines = [
        f"One `make bench` run ({machine.get('date', '?')}, {machine.get('cpus', '?')} CPUs, "
        f"Python {machine.get('python', '?')}, {machine.get('platform', '?')}; "
        f"{figures.get('bench_seconds', 0):.0f} s; RPC floor p50 {floor_text}):",
        "",
        "| Figure | p50 / value | p99 | vs RPC floor / note |",
        "|---|---|---|---|",
    ]
    for label, a, b, c in figures["rows"]:
        lines.append(f"| {_cell(label)} | {_cell(a)} | {_cell(b)} | {_cell(c)} |")
    return "\n".join(lines)


def publish(result: Path) -> None:
    """Make ``result`` the documented run: copy it to bench/figures.json, then ``make docs``
    (``python -m tests.docgen --write``, which renders the table from that file)."""
    figures = json.loads(result.read_text())
    if figures.get("machine", {}).get("quick"):
        raise SystemExit(f"{result}: a --quick run is a smoke test; run `make bench` for numbers")
    if "rows" not in figures:
        raise SystemExit(f"{result}: no rows (written before bench/run.py kept them); rerun")
    if result.resolve() != FIGURES.resolve():
        shutil.copyfile(result, FIGURES)
    subprocess.run([sys.executable, "-m", "tests.docgen", "--write"], cwd=REPO, check=True)
    print(f"the performance table is now {result} (copied to {FIGURES.relative_to(REPO)})")


def main(argv: list[str]) -> int:
    if argv:
        result = Path(argv[0])
    else:
        runs = sorted(RESULTS.glob("bench-*.json"))
        if not runs:
            raise SystemExit("no bench/results/bench-*.json: run `make bench` first")
        result = runs[-1]
    publish(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
