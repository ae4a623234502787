"""Slot turnaround on raftsched: how long a freed slot waits for its next task.

Two views, both taken from the capacity workload (more ready tasks than slots all along):
- the agents' own histogram `raftsched_agent_slot_turnaround_seconds`, when they export it;
- an estimate from the committed attempt history. Per compute cluster with S slots, sort the
  attempts' finish times and (separately) their start times. While the cluster is full, the
  i-th start (i >= S) can only use the slot freed by the (i-S)-th finish, so
      turnaround_i = start_i - finish_(i-S)
  (the slot's idle time as the leader saw it). Every time is the leader's clock when it proposed
  the entry: started_ms/finished_ms are the agent's STARTED/FINISHED reports, assigned_ms the
  ASSIGN_BATCH. `finish -> assigned` is the scheduler's share; `finish -> started` adds the
  delivery to the agent and its STARTED report.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .processes import HOST
from .protocol import Figures
from .stats import histogram_buckets, histogram_quantile, pct

METRIC = "raftsched_agent_slot_turnaround_seconds"
SCRAPE_TIMEOUT_S = 5.0
HISTORY_THREADS = 8


def from_agent_metrics(metrics_ports: list[int]) -> Figures:
    """p50/p99 of the agents' histogram (summed over agents), or a note that it is missing."""
    buckets: dict[float, float] = {}
    for port in metrics_ports:
        url = f"http://{HOST}:{port}/metrics"
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
            text = reply.read().decode("utf-8", "replace")
        for bound, count in histogram_buckets(text, METRIC).items():
            buckets[bound] = buckets.get(bound, 0.0) + count
    p50, p99 = histogram_quantile(buckets, 0.5), histogram_quantile(buckets, 0.99)
    if p50 is None or p99 is None:
        return {"metric_p50_ms": None, "metric_p99_ms": None,
                "metric_note": "n/a (metric not exported)"}
    return {"metric_p50_ms": p50 * 1000, "metric_p99_ms": p99 * 1000,
            "metric_count": int(buckets[max(buckets)])}


def attempts_of(client: Any, job_id: str) -> list[Any]:
    """Every attempt of the job that ran to an end (GetTaskHistory per task, 8 at a time)."""
    task_ids = [task.task_id for task in client.list_tasks(job_id).tasks]
    with ThreadPoolExecutor(HISTORY_THREADS) as pool:
        histories = list(pool.map(lambda t: client.task_history(job_id, t), task_ids))
    return [a for h in histories for a in h.attempts if a.started_ms and a.finished_ms]


def slot_gaps(attempts: list[Any], slots: int, field: str) -> list[float]:
    """start_i - finish_(i - slots) per cluster, with start taken from `field`."""
    by_cluster: dict[str, list[Any]] = defaultdict(list)
    for attempt in attempts:
        by_cluster[attempt.cluster].append(attempt)
    gaps: list[float] = []
    for runs in by_cluster.values():
        finishes = sorted(a.finished_ms for a in runs)
        starts = sorted(getattr(a, field) for a in runs)
        gaps += [float(starts[i] - finishes[i - slots]) for i in range(slots, len(starts))]
    return gaps


def from_histories(client: Any, job_id: str, slots: int) -> Figures:
    attempts = attempts_of(client, job_id)
    to_started = slot_gaps(attempts, slots, "started_ms")
    to_assigned = slot_gaps(attempts, slots, "assigned_ms")
    durations = [float(a.finished_ms - a.started_ms) for a in attempts]
    if not to_started:
        return {"estimate_note": "too few attempts for an estimate"}
    return {"estimate_samples": len(to_started),
            "finish_to_started_p50_ms": pct(to_started, 0.5),
            "finish_to_started_p99_ms": pct(to_started, 0.99),
            "finish_to_assigned_p50_ms": pct(to_assigned, 0.5),
            "finish_to_assigned_p99_ms": pct(to_assigned, 0.99),
            "recorded_duration_p50_ms": pct(durations, 0.5)}
