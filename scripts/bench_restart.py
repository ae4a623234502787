"""scripts/bench cluster --restart-tasks N: a large state through snapshots and a restart.

3 replicas on 127.0.0.1 snapshot often (--snapshot-entries) while N tasks (jobs of 10,000,
JSON) are submitted; then a probe submits one small job after another while every replica
writes snapshots of the full state. Reported:
  - how long building the state took, and the leader changes during it;
  - each replica's snapshot writes (the forked child's time, from the replicas' event logs);
  - whether writing them held anything up: the probe's submit latency (p50/p99/max) while every
    replica wrote one, and the term before and after (a leader change would show);
  - a follower kill -9'd and restarted: the time from its start to serving — answering with
    the state the leader had committed before the kill — and the snapshot load it logged.
Every wait is bounded; the cluster is always torn down.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raftsched import limits  # noqa: E402
from raftsched.errors import RaftschedError  # noqa: E402
from raftsched.eventlog import read_events  # noqa: E402
from tests.support.cluster import LocalCluster  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

JOB_TASKS = 10_000
"""Tasks per submitted job. (A 100,000-task job, within the spec's limits, is applied in one
entry for about a second on every replica's tick thread: long enough to cost elections. That is
a known limit, not what this phase measures.)"""
SUBMITTERS = 4
SNAPSHOT_ENTRIES = int(__import__("os").environ.get("SNAP", "500"))
"""--snapshot-entries for the replicas: snapshots come every few seconds under the probe."""
SUBMIT_TIMEOUT_S = 120.0
PHASE_TIMEOUT_S = 600.0
PROBE_SPEC = ("name: probe\nallow_unschedulable: true\n"
              "tasks:\n  - {id: t, command: [mock], requires: [nowhere]}\n")
PROBE_ROOM = 1
"""Queued tasks the probe holds at once (it cancels each probe job once accepted): the state
built is at most MAX_QUEUED_TASKS less this, or the probe's submits would be refused."""


@dataclass
class Probe:
    """Submits one small job after another until stopped; keeps the latencies."""

    client: Any
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                job_id = self.client.submit(PROBE_SPEC).job_id
            except RaftschedError as error:
                self.failures.append(error.message)
                continue
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            try:
                self.client.cancel(job_id, "probe measured")  # frees its queued task
            except RaftschedError as error:
                self.failures.append(f"cancel: {error.message}")


def wide_job(name: str, tasks: int) -> str:
    return json.dumps({"name": name, "allow_unschedulable": True, "tasks": [
        {"id": f"t{i}", "command": ["mock"], "requires": ["nowhere"],
         "resources": {"cpu": 0.001, "memory_mb": 0}} for i in range(tasks)]})


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def dumps_written(cluster: LocalCluster, replica: int) -> list[float]:
    """elapsed_ms of each snapshot replica `replica` wrote (its event log)."""
    log = cluster.root / "logs" / f"r{replica}.log"
    return [float(e.fields["elapsed_ms"]) for e in read_events(log, {"raft_dump_written"})]


def run(total_tasks: int) -> list[str]:
    lines = [f"restart with {total_tasks:,} tasks (3 replicas, --snapshot-entries "
             f"{SNAPSHOT_ENTRIES}, jobs of {JOB_TASKS:,} tasks):"]
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-restart-") as tmp:
        cluster = LocalCluster(Path(tmp), replica_flags=["--snapshot-entries",
                                                          str(SNAPSHOT_ENTRIES)])
        try:
            lines += _phases(cluster.start(), total_tasks)
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            cluster.close()
    return lines


def _phases(cluster: LocalCluster, total_tasks: int) -> list[str]:
    client = cluster.client(retry_budget_s=SUBMIT_TIMEOUT_S, timeout_s=SUBMIT_TIMEOUT_S)
    term_start = client.cluster_status().term
    started = time.perf_counter()
    jobs = max(1, total_tasks // JOB_TASKS)
    spec = wide_job("big", min(JOB_TASKS, total_tasks))
    short = jobs * min(JOB_TASKS, total_tasks) + PROBE_ROOM - limits.MAX_QUEUED_TASKS
    last = spec if short <= 0 else wide_job("big", min(JOB_TASKS, total_tasks) - short)
    total_tasks -= max(0, short)
    clients = [cluster.client(retry_budget_s=SUBMIT_TIMEOUT_S, timeout_s=SUBMIT_TIMEOUT_S)
               for _ in range(SUBMITTERS)]
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        list(pool.map(lambda i: clients[i % SUBMITTERS].submit(spec if i < jobs - 1 else last),
                      range(jobs)))
    submitted_s = time.perf_counter() - started
    term_built = client.cluster_status().term
    # Every replica writes a snapshot of the full state while the probe goes on.
    probe = Probe(cluster.client(retry_budget_s=SUBMIT_TIMEOUT_S))
    prober = threading.Thread(target=probe.run, daemon=True)
    prober.start()
    term_before = term_built
    marks = {i: len(dumps_written(cluster, i)) for i in range(3)}
    wait_until(lambda: all(len(dumps_written(cluster, i)) > marks[i] for i in range(3)),
               "every replica to snapshot the full state", PHASE_TIMEOUT_S)
    probe.stop.set()
    prober.join(SUBMIT_TIMEOUT_S)
    term_after = client.cluster_status().term
    lines = [f"  (built {total_tasks:,} tasks: the probe needs room under MAX_QUEUED_TASKS)"
             ] if short > 0 else []
    lines += [
        f"  submitting the jobs ({SUBMITTERS} clients) took {submitted_s:.1f} s "
        f"({total_tasks / submitted_s:,.0f} tasks/s, parsed and validated twice); term "
        f"{term_start} -> {term_built}",
        "  snapshot writes (forked child), per replica, ms: " + "; ".join(
            f"r{i} " + ", ".join(f"{ms:.0f}" for ms in dumps_written(cluster, i)[-3:])
            for i in range(3)),
        f"  meanwhile {len(probe.latencies_ms)} probe submits: p50 "
        f"{pct(probe.latencies_ms, 0.5):.1f} ms, p99 {pct(probe.latencies_ms, 0.99):.1f} ms, "
        f"max {max(probe.latencies_ms):.0f} ms;"
        f" {len(probe.failures)} failed; term {term_before} -> {term_after}"
        f" ({'no leader change' if term_after == term_before else 'LEADER CHANGED'})",
    ]
    return lines + _restart_one(cluster, client)


def _restart_one(cluster: LocalCluster, client: Any) -> list[str]:
    leader = cluster.wait_leader()
    victim = (leader + 1) % 3
    target = client.cluster_status(cluster.grpc[leader]).commit_index
    cluster.replicas[victim].kill()
    started = time.perf_counter()
    cluster.replicas[victim].start()

    def serving() -> bool:
        probe = cluster.client(retry_budget_s=1, timeout_s=1)
        try:
            status = probe.cluster_status(cluster.grpc[victim])
        except RaftschedError:
            return False
        return bool(status.leader) and status.state_index >= target

    wait_until(serving, "the restarted replica to serve", PHASE_TIMEOUT_S)
    serving_s = time.perf_counter() - started
    log = cluster.root / "logs" / f"r{victim}.log"
    loads = [e for e in read_events(log, {"raft_dump_loaded"})]
    return [f"  kill -9 of a follower, restart -> serving the committed state: {serving_s:.1f} s "
            f"(it loaded {len(loads)} snapshot(s) on the way)"]


if __name__ == "__main__":
    for line in run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000):
        print(line, flush=True)
