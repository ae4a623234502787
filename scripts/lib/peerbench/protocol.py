"""What the orchestrator and the runners exchange: a plan (argv[1], JSON) in, one result line
out. Standard library only."""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .processes import log

RESULT_PREFIX = "PEERBENCH-RESULT "
"""The result line starts with this, so that a library printing to stdout cannot garble it."""

Figures = dict[str, Any]
"""One workload's figures: name -> number (or None, or a string note)."""


@dataclass(frozen=True, slots=True)
class Plan:
    workloads: tuple[str, ...]
    scale: float
    seed: int
    workdir: str
    phase_timeout_s: float
    """Bound of each wait for one workload to finish."""
    queue_depth: int = -1
    """raftsched's agents' --queue-depth (late binding); -1: the agent's default."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_argv(argv: list[str]) -> Plan:
        raw = json.loads(argv[1])
        return Plan(tuple(raw["workloads"]), float(raw["scale"]), int(raw["seed"]),
                    raw["workdir"], float(raw["phase_timeout_s"]), int(raw.get("queue_depth", -1)))


def run_each(plan: Plan, workloads: dict[str, Callable[[], Figures]]) -> dict[str, Figures]:
    """Run the planned workloads this system has, in plan order. A failing workload is recorded
    with its error and the next one still runs."""
    results: dict[str, Figures] = {}
    for name in plan.workloads:
        if name not in workloads:
            continue
        log(f"  {name} ...")
        started = time.monotonic()
        try:
            results[name] = workloads[name]()
        except Exception as error:  # one workload's failure is a figure, not the end of the run
            traceback.print_exc(file=sys.stderr)
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        results[name]["wall_s"] = round(time.monotonic() - started, 2)
        log(f"  {name}: {results[name]}")
    return results


def emit(result: dict[str, Any]) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def parse_result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            return parsed
    return None
