"""The workloads every system runs, built from a seed and a scale: plain data, no I/O.

A workload's tasks are `Node`s (id, duration, dependencies) in topological order; a runner turns
them into raftsched mock tasks (`["mock", "sleep_ms=N"]`) or Dask/Celery calls that
`time.sleep(N / 1000)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORKERS = 2
"""raftsched agents, Dask workers, Celery workers."""
SLOTS_PER_WORKER = 8
"""raftsched: --cpu 8 and 1 cpu per task; Dask: 8 threads; Celery: concurrency 8."""
SLOTS = WORKERS * SLOTS_PER_WORKER

CAPACITY_TASKS = 2_000
CAPACITY_TASK_MS = 50
LAYERED_DAGS = 3
LAYERED_LEVELS = 6
LAYERED_WIDTH = 48
LAYERED_PARENTS = 2
FANOUT_STAGES = 3
"""root -> (fan out -> fan in) x 3: depth 7."""
FANOUT_WIDTH = 64
MIN_WIDTH_OVER_SLOTS = 1.5
"""Scaled DAG levels stay this much wider than the slots: the point is more work than slots."""
DAG_TASK_MS = (20, 80)
"""Uneven durations, uniform in this range (inclusive), from the seed."""
NOOP_WIDE_TASKS = 10_000
NOOP_JOBS = 1_000
NOOP_TASKS_PER_JOB = 10
SUBMIT_SEQUENTIAL = 200
SUBMIT_BATCH_JOBS = 10_000
"""One-task jobs of the batch-submit figure: one SubmitJobs call (MAX_BATCH_JOBS), timed from the
call to its answer (every job committed)."""
SUBMIT_IN_FLIGHT = 64
SUBMIT_PROCESSES = 2
SUBMIT_PER_THREAD = 20
"""At 64 in flight; at fewer in flight each thread submits more (the same total calls)."""
SUBMIT_IN_FLIGHT_LEVELS = (16, SUBMIT_IN_FLIGHT)
"""Concurrent submit rows: 16 (the issue's single-job target, against etcd's puts/s at 16) and
64 in flight."""
MIN_SCALE = 0.1
MAX_SCALE = 1.0

NAMES = ("capacity", "layered", "fanout", "noop", "submit", "turnaround")
"""Workload names, in the order they run (turnaround reads what capacity left behind)."""


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    duration_ms: int
    deps: tuple[str, ...] = ()


def scaled(count: int, scale: float, floor: int = 1) -> int:
    assert MIN_SCALE <= scale <= MAX_SCALE, scale
    return max(floor, round(count * scale))


def dag_width(width: int, scale: float) -> int:
    return scaled(width, scale, floor=round(SLOTS * MIN_WIDTH_OVER_SLOTS))


def capacity(scale: float) -> list[Node]:
    return [Node(f"t{i}", CAPACITY_TASK_MS) for i in range(scaled(CAPACITY_TASKS, scale))]


def layered(seed: int, width: int) -> list[Node]:
    """LAYERED_LEVELS levels of `width` tasks; each task below the first depends on
    LAYERED_PARENTS distinct tasks of the level above."""
    rng = random.Random(seed)
    nodes = [Node(f"l0-{j}", rng.randint(*DAG_TASK_MS)) for j in range(width)]
    for level in range(1, LAYERED_LEVELS):
        for j in range(width):
            parents = rng.sample(range(width), LAYERED_PARENTS)
            deps = tuple(f"l{level - 1}-{p}" for p in sorted(parents))
            nodes.append(Node(f"l{level}-{j}", rng.randint(*DAG_TASK_MS), deps))
    return nodes


def layered_dags(seed: int, scale: float) -> list[list[Node]]:
    width = dag_width(LAYERED_WIDTH, scale)
    return [layered(seed + i, width) for i in range(scaled(LAYERED_DAGS, scale))]


def fanout(seed: int, scale: float) -> list[Node]:
    """root -> `width` tasks -> join -> `width` tasks -> join ... (FANOUT_STAGES times)."""
    rng = random.Random(seed)
    width = dag_width(FANOUT_WIDTH, scale)
    nodes = [Node("root", rng.randint(*DAG_TASK_MS))]
    joined = "root"
    for stage in range(FANOUT_STAGES):
        fanned = [f"s{stage}-{j}" for j in range(width)]
        nodes += [Node(task_id, rng.randint(*DAG_TASK_MS), (joined,)) for task_id in fanned]
        joined = f"join{stage}"
        nodes.append(Node(joined, rng.randint(*DAG_TASK_MS), tuple(fanned)))
    return nodes


def small_job() -> list[Node]:
    """The 10-task job of the no-op workload: 5 roots, 5 tasks that each depend on two roots."""
    roots = [Node(f"r{i}", 0) for i in range(5)]
    return roots + [Node(f"d{i}", 0, (f"r{i}", f"r{(i + 1) % 5}")) for i in range(5)]


def critical_path_ms(nodes: list[Node]) -> int:
    finish: dict[str, int] = {}
    for node in nodes:  # topological order
        finish[node.id] = node.duration_ms + max((finish[d] for d in node.deps), default=0)
    return max(finish.values(), default=0)


def work_ms(nodes: list[Node]) -> int:
    return sum(node.duration_ms for node in nodes)


def lower_bound_s(nodes: list[Node]) -> float:
    """No schedule on SLOTS slots can finish sooner (scheduling overhead zero)."""
    return max(critical_path_ms(nodes), work_ms(nodes) / SLOTS) / 1000


def children(nodes: list[Node]) -> dict[str, list[str]]:
    below: dict[str, list[str]] = {node.id: [] for node in nodes}
    for node in nodes:
        for dep in node.deps:
            below[dep].append(node.id)
    return below


def per_thread(in_flight: int, scale: float) -> int:
    """Calls each of `in_flight` threads makes: the same total at every level."""
    total = scaled(SUBMIT_PER_THREAD * SUBMIT_IN_FLIGHT, scale)
    return max(5, total // in_flight)


def rate_key(in_flight: int) -> str:
    """The figure name of the submits/s at `in_flight` (64 keeps the name it always had)."""
    return "submits_per_s" if in_flight == SUBMIT_IN_FLIGHT else f"submits_per_s_{in_flight}"
