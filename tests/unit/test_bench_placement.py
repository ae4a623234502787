"""scripts/bench_placement.py --quick runs in-process: it builds a state through the state
machine, plans, and prints its figure rows (the figures themselves are never asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_placement.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_placement", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while they are built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_quick_run_places_tasks_and_prints_every_figure_row(
        capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script()
    results = bench.main(["--quick", "--seed", "3"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for scenario in bench.SCENARIOS:
        for queued in ("200", "2,000"):
            assert any(row.startswith(f"| {scenario}") and f"| {queued:>7} |" in row
                       for row in rows), (scenario, queued, out)
        assert any(row.startswith(f"| {scenario}") and row.rstrip().endswith("x |")
                   for row in rows), (scenario, out)
    assert "seed 3" in out
    free_room = [f for f in results if f.scenario == "1 free room"]
    assert len(free_room) == 2
    assert all(sum(f.placed) > 0 for f in free_room)
    assert all(sum(f.placed) == 0 for f in results if f.scenario != "1 free room")
    assert out.count("0 placements dropped at apply") == 2
