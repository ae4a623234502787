"""scripts/bench fsm — how fast the state machine applies commands, on one core.

Figures (apply time includes msgpack decode and re-validation, as on a replica):
  (a) submitting one N-task DAG (tasks/s);
  (b) running it to completion through ASSIGN_BATCH / REPORT_BATCH(started) /
      REPORT_BATCH(finished) — full task lifecycles per second;
  (c) per-completion cost on a 1,000-task vs a 100,000-task job (ratio ~1 means nothing scans);
  (d) replica memory per task (RSS delta / tasks) at 100,000 tasks, before and after running.
Baseline measured in the same run: msgpack-decoding the same entries without applying them.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, placement
from raftsched.state.model import TERMINAL_JOB_STATES, State
from raftsched.state.outcome import Applied
from raftsched.state.results import AssignResult, Result


def layered_dag(tasks: int, width: int, seed: int) -> list[Any]:
    """`tasks` tasks in layers of `width`; each depends on up to 2 tasks of the layer before."""
    rng = random.Random(seed)
    docs = []
    for i in range(tasks):
        layer_start = (i // width) * width
        prev = range(max(0, layer_start - width), layer_start)
        deps = sorted({f"t{rng.choice(prev)}" for _ in range(2)}) if prev else []
        docs.append({"id": f"t{i}", "command": ["true"], "depends_on": deps,
                     "resources": {"cpu": 0.001, "memory_mb": 1}})
    # What the leader proposes: the wire form of the validated spec.
    return doc_to_wire({"name": "bench", "allow_unschedulable": True, "tasks": docs})


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class CallCounter:
    """Counts Python and C function calls made inside fsm.apply: a machine-independent cost."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls += 1


COLLECT = False
"""--collect: each entry's changes are collected (`State.changes`), as a replica does for its
event stream."""


class Runner:
    def __init__(self, counter: CallCounter | None = None) -> None:
        self.counter = counter
        self.state = State()
        self.now = 1
        self.apply_s = 0.0
        self.decode_s = 0.0
        self.plan_s = 0.0
        self.entries = 0

    def apply(self, cmd: c.Command) -> Result:
        entry = c.encode(cmd)
        t0 = time.perf_counter()
        c.decode(entry)
        t1 = time.perf_counter()
        if self.counter is not None:
            sys.setprofile(self.counter)
        self.state.changes = [] if COLLECT else None
        outcome = fsm.apply(self.state, entry)
        self.state.changes = None
        sys.setprofile(None)
        t2 = time.perf_counter()
        self.decode_s += t1 - t0
        self.apply_s += t2 - t1
        self.entries += 1
        assert isinstance(outcome, Applied), outcome
        return outcome.result

    def register(self) -> None:
        for name in ("east", "west"):
            self.apply(c.ClusterRegister(name, 1, ("linux",), 10**9, 10**9, 0, self.now))

    def run_job(self, job_id: str) -> int:
        done = 0
        job = self.state.jobs[job_id]
        while job.state not in TERMINAL_JOB_STATES:
            self.now += 1
            t0 = time.perf_counter()
            items = tuple(placement.plan(self.state).placements)
            self.plan_s += time.perf_counter() - t0
            assert items, "nothing placeable but the job is not done"
            result = self.apply(c.AssignBatch(self.now, items))
            assert isinstance(result, AssignResult), result
            by_cluster: dict[str, list[tuple[str, str, int]]] = {}
            for p, fence in result.assigned:
                by_cluster.setdefault(p.cluster_id, []).append((p.job_id, p.task_id, fence))
            for kind in (c.ReportKind.STARTED, c.ReportKind.FINISHED):
                for cluster, attempts in by_cluster.items():
                    reports = tuple(c.Report(kind, j, t, f, 0 if kind == c.ReportKind.FINISHED
                                             else None) for j, t, f in attempts)
                    self.apply(c.ReportBatch(cluster, self.now, self.now, reports))
            done += len(result.assigned)
        return done


def bench_dag(tasks: int, width: int,
              counter: CallCounter | None = None) -> tuple[float, float, Runner]:
    r = Runner(counter)
    r.register()
    doc = layered_dag(tasks, width, seed=7)
    r.apply_s = 0.0
    r.apply(c.JobSubmit("big", doc, r.now))
    submit_s = r.apply_s
    r.apply_s = r.decode_s = 0.0
    if counter is not None:
        counter.calls = 0
    done = r.run_job("big")
    assert done == tasks
    return submit_s, r.apply_s, r


def per_completion_us(tasks: int) -> float:
    _, run_s, _ = bench_dag(tasks, width=100)
    return run_s / tasks * 1e6


def per_completion_calls(tasks: int) -> float:
    counter = CallCounter()
    bench_dag(tasks, width=100, counter=counter)
    return counter.calls / tasks


def memory(tasks: int) -> tuple[float, float, float]:
    """RSS growth per task of a replica applying one `tasks`-task JOB_SUBMIT entry (decode
    garbage included), then after running every task once. The entry's own bytes, which the
    Raft log holds until compaction, are reported separately."""
    r = Runner()
    r.register()
    entry = c.encode(c.JobSubmit("mem", layered_dag(tasks, 100, seed=3), r.now))
    gc.collect()
    before = rss_bytes()
    outcome = fsm.apply(r.state, entry)
    assert isinstance(outcome, Applied), outcome
    gc.collect()
    submitted = rss_bytes()
    r.run_job("mem")
    gc.collect()
    ran = rss_bytes()
    return (submitted - before) / tasks, (ran - before) / tasks, len(entry) / tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000, help="size of the DAG in (a)/(b)")
    parser.add_argument("--big", type=int, default=100_000, help="large job in (c)/(d)")
    parser.add_argument("--collect", action="store_true",
                        help="collect each entry's changes, as a replica does for its event "
                             "stream (State.changes)")
    args = parser.parse_args()
    global COLLECT
    COLLECT = args.collect

    print(f"raftsched fsm benchmark  (python {sys.version.split()[0]}, one core)")
    submit_s, run_s, r = bench_dag(args.tasks, width=100)
    print(f"(a) submit one {args.tasks:,}-task DAG:   {args.tasks / submit_s:>12,.0f} tasks/s "
          f"({submit_s * 1000:.0f} ms)")
    print(f"(b) run it to completion:          {args.tasks / run_s:>12,.0f} lifecycles/s "
          f"(apply {run_s * 1000:.0f} ms in {r.entries} entries; planner "
          f"{r.plan_s * 1000:.0f} ms more)")
    print(f"    baseline, msgpack decode only: {args.tasks / r.decode_s:>12,.0f} lifecycles/s "
          f"-> apply costs {run_s / r.decode_s:.1f}x a bare decode")
    sizes = [1_000, 10_000, args.big]
    times = [min(per_completion_us(n) for _ in range(2)) for n in sizes]
    calls = [per_completion_calls(n) for n in (sizes[0], sizes[-1])]
    for n, us in zip(sizes, times, strict=True):
        print(f"(c) per completion, {n:>7,}-task job: {us:6.1f} us  "
              f"(ratio to 1,000: {us / times[0]:.2f})")
    print(f"    function calls per completion: {calls[0]:.1f} at 1,000 tasks, {calls[1]:.1f} at "
          f"{args.big:,} (ratio {calls[1] / calls[0]:.3f}; time ratios above include cache "
          f"misses of a larger heap)")
    at_submit, after_run, entry = memory(args.big)
    print(f"(d) memory per task at {args.big:,} tasks: {at_submit:,.0f} B submitted, "
          f"{after_run:,.0f} B after running (1 attempt each); the log entry is "
          f"{entry:,.0f} B/task more until compaction")


if __name__ == "__main__":
    main()
