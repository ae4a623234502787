"""scripts/bench placement — the pure planner (`placement.plan`) under contention, on one core.

What it answers: placement decisions per second and time per planning round with 100 clusters
x 100,000 queued tasks across 10 tenants, and the ratio of round time when the queue grows 10x.
The planner's promise (docs/architecture.md §9, `raftsched/state/placement.py`) is that the cost of
a round
follows what it places, not what waits: a leader re-plans every round, so a planner whose round
grew with the backlog would slow placement down exactly when the backlog is long.

No processes, no network: the state is built by applying real commands with
`fsm.apply_command` (CLUSTER_REGISTER, TENANT_SET, JOB_SUBMIT in the wire form a leader
proposes), and only the `plan()` call is timed.
  clusters  16-64 cpus less 0.25 (KEPT_CPU_MILLI), 4 GB per cpu; one in ten also has the
            capability `gpu` and 4 or 8 gpus;
  tenants   weights 1..T, shuffled;
  jobs      of up to 1,000 independent tasks, each job of one tenant (round robin), priority
            30, 50 or 70, one in five scored `spread`; task shapes: 0.5 cpu (25%), 1 cpu (50%),
            4 cpu (19%), 4 cpu + 1 gpu requiring `gpu` (5%), 32 cpu / 64 GB (1%, large).
Scenario 1, "round with free room": the queue is kept at N RUNNABLE tasks (topped up between
  rounds); each round plans at most the leader's batch (`leader.PLACEMENT_BATCH`), applies the
  plan as an ASSIGN_BATCH, then reports STARTED + FINISHED for the oldest half of the running
  attempts, so the next round finds freed room scattered over the clusters.
Scenario 2, "full clusters, long queue": the same state with every cluster filled until a plan
  places nothing, the queue topped up to N again; the timed plan places nothing (its cost must
  be a look per task shape, not a walk of the queue). "+30 s" re-plans that state
  RESERVE_AFTER_MS later, when the large tasks at the queues' heads have waited long enough to
  be given reservations: the reservation pass looks at waiting tasks, and must not walk them.
Both run at N/10 and N queued tasks; the ratio of their round times should be near 1x. "calls"
is the Python and C function calls one plan makes (sys.setprofile, untimed): a measure that
does not depend on the machine's speed or its caches. The state is deterministic given --seed
(the planner itself draws no randomness); times are not.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_fsm import CallCounter  # the one machine-independent cost counter

from raftsched import limits
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, placement
from raftsched.state.model import State
from raftsched.state.outcome import Applied
from raftsched.state.results import AssignResult, Result

try:  # the leader's batch size; the module only defines things at import
    from raftsched.replica.leader import PLACEMENT_BATCH
except ImportError:  # pragma: no cover - a trimmed install
    PLACEMENT_BATCH = 1_000

ROUND_MS = 1_000
"""Time between two planning rounds (the state's clock; nothing sleeps)."""
FINISH_SHARE = 0.5
"""Share of the running attempts (the oldest) that finish after each scenario-1 round."""
JOB_TASKS = 1_000
"""Tasks per submitted job (the last job of a top-up may be smaller)."""
CPU_CHOICES = (16, 24, 32, 48, 64)
GPU_EVERY = 10
"""One cluster in this many has the `gpu` capability and gpus."""
PRIORITIES = (30, 50, 50, 70)
KEPT_CPU_MILLI = 250
"""What a cluster's agent keeps for itself: it advertises its cpus minus this. A full cluster
then keeps a sliver of cpu no task shape fits, so a plan cannot stop at "no cluster has any
cpu left" (`limits.MIN_CPU_MILLI`) and has to look at every shape: the harder case."""

# name, resources, requires, weight (out of 100)
SHAPES: tuple[tuple[str, dict[str, Any], list[str], int], ...] = (
    ("tiny", {"cpu": 0.5, "memory_mb": 512}, [], 25),
    ("small", {"cpu": 1, "memory_mb": 2_048}, [], 50),
    ("medium", {"cpu": 4, "memory_mb": 8_192}, [], 19),
    ("gpu", {"cpu": 4, "memory_mb": 16_384, "gpu": 1}, ["gpu"], 5),
    ("large", {"cpu": 32, "memory_mb": 65_536}, [], 1),
)
SCENARIOS = ("1 free room", "2 full clusters", "2 full, +30 s")


@dataclass(frozen=True, slots=True)
class Config:
    tasks: int
    clusters: int
    tenants: int
    rounds: int
    seed: int
    batch: int


@dataclass(slots=True)
class Figures:
    """One scenario at one queue length."""

    scenario: str
    queued: int
    plan_s: list[float] = field(default_factory=list)
    placed: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    reservations: int = 0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.plan_s) * 1000

    @property
    def p90_ms(self) -> float:
        return pct(self.plan_s, 0.9) * 1000

    @property
    def placements_per_s(self) -> float:
        total = sum(self.plan_s)
        return sum(self.placed) / total if total else 0.0

    @property
    def median_calls(self) -> float:
        return statistics.median(self.calls) if self.calls else 0.0


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    """A state built through the state machine, and the moves of a leader and its agents."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.state = State()
        self.now = 1_000
        self.jobs = 0
        self.submitted = 0
        self.build_s = 0.0
        self.dropped = 0
        self.running: deque[tuple[str, str, str, int]] = deque()
        """(cluster, job, task, fence) of each live attempt, oldest first."""
        self.weights: list[int] = []

    def apply(self, cmd: c.Command) -> Result:
        outcome = fsm.apply_command(self.state, cmd)
        assert isinstance(outcome, Applied), outcome
        return outcome.result

    def setup(self) -> None:
        for i in range(self.cfg.clusters):
            cpu = self.rng.choice(CPU_CHOICES)
            gpu = self.rng.choice((4, 8)) if i % GPU_EVERY == 0 else 0
            caps = ("linux", "gpu") if gpu else ("linux",)
            self.apply(c.ClusterRegister(f"c{i:04d}", 1, caps, cpu * 1000 - KEPT_CPU_MILLI,
                                         cpu * 4_096, gpu, self.now))
        self.weights = list(range(1, self.cfg.tenants + 1))
        self.rng.shuffle(self.weights)
        for i, weight in enumerate(self.weights):
            self.apply(c.TenantSet(f"tenant{i}", weight, 0, 0, self.now))

    def queued(self) -> int:
        return sum(queue.live for queue in self.state.queues.values())

    def top_up(self, target: int) -> None:
        """Submit jobs until `target` tasks are RUNNABLE (untimed, but counted in build_s)."""
        t0 = time.perf_counter()
        missing = target - self.queued()
        while missing > 0:
            size = min(JOB_TASKS, missing)
            self.submit(size)
            missing -= size
        self.build_s += time.perf_counter() - t0

    def submit(self, size: int) -> None:
        rng = self.rng
        names = [shape[0] for shape in SHAPES]
        weights = [shape[3] for shape in SHAPES]
        by_name = {shape[0]: shape for shape in SHAPES}
        tasks = []
        for i, name in enumerate(rng.choices(names, weights, k=size)):
            _, resources, requires, _ = by_name[name]
            tasks.append({"id": f"t{i}", "command": ["true"], "resources": resources,
                          "requires": requires})
        doc = {"name": f"bench-{self.jobs}", "tenant": f"tenant{self.jobs % self.cfg.tenants}",
               "priority": rng.choice(PRIORITIES), "allow_unschedulable": True,
               "scoring": "spread" if rng.random() < 0.2 else "binpack", "tasks": tasks}
        self.apply(c.JobSubmit(f"j{self.jobs:06d}", doc_to_wire(doc), self.now))
        self.jobs += 1
        self.submitted += size

    def plan(self, max_items: int, counter: CallCounter | None = None
             ) -> tuple[float, placement.Plan]:
        """One planning round on the current state: seconds, and what it returned."""
        if counter is not None:
            sys.setprofile(counter)
        t0 = time.perf_counter()
        planned = placement.plan(self.state, now_ms=self.now, max_items=max_items)
        elapsed = time.perf_counter() - t0
        sys.setprofile(None)
        return elapsed, planned

    def assign(self, planned: placement.Plan) -> int:
        result = self.apply(c.AssignBatch(self.now, tuple(planned.placements),
                                          tuple(planned.reservations)))
        assert isinstance(result, AssignResult), result
        self.dropped += len(result.dropped)
        for p, fence in result.assigned:
            self.running.append((p.cluster_id, p.job_id, p.task_id, fence))
        return len(result.assigned)

    def finish(self, count: int) -> None:
        """STARTED then FINISHED (exit 0) for the `count` oldest live attempts."""
        by_cluster: dict[str, list[tuple[str, str, int]]] = {}
        for _ in range(min(count, len(self.running))):
            cluster, job, task, fence = self.running.popleft()
            by_cluster.setdefault(cluster, []).append((job, task, fence))
        for kind, code in ((c.ReportKind.STARTED, None), (c.ReportKind.FINISHED, 0)):
            for cluster, attempts in sorted(by_cluster.items()):
                for start in range(0, len(attempts), limits.MAX_BATCH_ITEMS):
                    reports = tuple(c.Report(kind, job, task, fence, code) for job, task, fence
                                    in attempts[start:start + limits.MAX_BATCH_ITEMS])
                    self.apply(c.ReportBatch(cluster, self.now, self.now, reports))

    def fill(self) -> None:
        """Place until a plan places nothing: every cluster is full for every queued shape."""
        while True:
            self.now += 1
            _, planned = self.plan(limits.MAX_BATCH_ITEMS)
            if not planned.placements:
                return
            self.assign(planned)


def build(cfg: Config, queued: int) -> Bench:
    bench = Bench(cfg)
    bench.setup()
    bench.top_up(queued)
    return bench


def free_room(bench: Bench, queued: int) -> Figures:
    """Scenario 1: plan, assign, finish the oldest share, top the queue up; `rounds` times."""
    figures = Figures("1 free room", queued)
    gc.collect()
    for _ in range(bench.cfg.rounds):
        bench.now += ROUND_MS
        counter = CallCounter()
        bench.plan(bench.cfg.batch, counter)  # the same plan, counted (untimed)
        elapsed, planned = bench.plan(bench.cfg.batch)
        figures.plan_s.append(elapsed)
        figures.placed.append(len(planned.placements))
        figures.calls.append(counter.calls)
        figures.reservations += len(planned.reservations)
        bench.assign(planned)
        bench.finish(int(len(bench.running) * FINISH_SHARE))
        bench.top_up(queued)
    return figures


def full_clusters(bench: Bench, queued: int) -> list[Figures]:
    """Scenario 2: fill every cluster, top the queue up, re-plan the same state `rounds` times;
    then again RESERVE_AFTER_MS later, when the large tasks at the queues' heads have waited
    long enough to get reservations (the plan is pure: the state is the same)."""
    bench.fill()
    bench.top_up(queued)
    results = []
    for scenario, later_ms in (("2 full clusters", ROUND_MS),
                               ("2 full, +30 s", placement.RESERVE_AFTER_MS)):
        figures = Figures(scenario, queued)
        bench.now += later_ms
        counter = CallCounter()
        bench.plan(bench.cfg.batch, counter)
        gc.collect()
        for _ in range(bench.cfg.rounds):
            elapsed, planned = bench.plan(bench.cfg.batch)
            figures.plan_s.append(elapsed)
            figures.placed.append(len(planned.placements))
            figures.calls.append(counter.calls)
            figures.reservations = len(planned.reservations)
        results.append(figures)
    return results


def run(cfg: Config, out: Callable[[str], None] = print) -> list[Figures]:
    sizes = [max(1, cfg.tasks // 10), cfg.tasks]
    results: list[Figures] = []
    notes: list[str] = []
    for queued in sizes:
        bench = build(cfg, queued)
        built_s = bench.build_s
        if queued == sizes[0]:
            state = bench.state
            cpus = sum(cl.cpu_milli for cl in state.clusters.values()) // 1000
            gpus = sum(1 for cl in state.clusters.values() if cl.gpu)
            out(f"clusters {cfg.clusters} ({cpus:,} cpus in all, {gpus} with gpus), "
                f"tenants {cfg.tenants} (weights {bench.weights}), batch {cfg.batch:,}, "
                f"rounds {cfg.rounds}, seed {cfg.seed}")
        results.append(free_room(bench, queued))
        results.extend(full_clusters(bench, queued))
        notes.append(f"{queued:,} queued: built in {built_s:.1f} s ({bench.jobs} jobs, "
                     f"{bench.submitted:,} tasks submitted in all by the end); "
                     f"{bench.dropped} placements dropped at apply")
        del bench
        gc.collect()
    for note in notes:
        out(note)
    out("")
    out("| scenario        |  queued | rounds | placed/round | round ms median | round ms p90 "
        "| placements/s | calls/round | reservations |")
    out("|-----------------|--------:|-------:|-------------:|----------------:|-------------:"
        "|-------------:|------------:|-------------:|")
    for f in sorted(results, key=lambda f: (SCENARIOS.index(f.scenario), f.queued)):
        out(f"| {f.scenario:<15} | {f.queued:>7,} | {len(f.plan_s):>6} "
            f"| {statistics.mean(f.placed):>12,.0f} | {f.median_ms:>15.2f} | {f.p90_ms:>12.2f} "
            f"| {f.placements_per_s:>12,.0f} | {f.median_calls:>11,.0f} "
            f"| {f.reservations:>12} |")
    out("")
    label = f"ratio {sizes[1]:,} vs {sizes[0]:,} queued"
    out(f"| {label:<31} | round time (median) | calls/round |")
    out(f"|{'-' * 33}|--------------------:|------------:|")
    for scenario in SCENARIOS:
        small, big = (next(f for f in results if f.scenario == scenario and f.queued == n)
                      for n in sizes)
        time_ratio = big.median_ms / small.median_ms if small.median_ms else float("nan")
        calls_ratio = big.median_calls / small.median_calls if small.median_calls else 0.0
        out(f"| {scenario:<31} | {time_ratio:>18.2f}x | {calls_ratio:>10.2f}x |")
    return results


def parse(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000,
                        help="queued tasks N (the ratio compares N/10 with N)")
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20, help="timed plans per figure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=PLACEMENT_BATCH,
                        help="max_items of a plan (default: the leader's PLACEMENT_BATCH)")
    parser.add_argument("--quick", action="store_true",
                        help="a small configuration that runs in seconds (CI smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        return Config(tasks=2_000, clusters=10, tenants=3, rounds=3, seed=args.seed, batch=200)
    if min(args.tasks, args.clusters, args.tenants, args.rounds, args.batch) < 1:
        parser.error("--tasks, --clusters, --tenants, --rounds and --batch must be positive")
    if args.batch > limits.MAX_BATCH_ITEMS:
        parser.error(f"--batch is at most MAX_BATCH_ITEMS={limits.MAX_BATCH_ITEMS:,}")
    return Config(args.tasks, args.clusters, args.tenants, args.rounds, args.seed, args.batch)


def main(argv: Sequence[str] | None = None) -> list[Figures]:
    cfg = parse(argv)
    print(f"raftsched placement benchmark  (python {sys.version.split()[0]}, one core; only "
          f"placement.plan() is timed)")
    started = time.perf_counter()
    results = run(cfg)
    print(f"\nran in {time.perf_counter() - started:.1f} s")
    return results


if __name__ == "__main__":
    main()
