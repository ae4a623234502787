"""Seeded discrete-time simulation of contention: the pure state machine and the planner under
load, no processes (docs/architecture.md §9, `state/placement.py`).

A `Sim` moves a simulated clock (`Harness.now_ms`) one step at a time. Each step it reports
STARTED for the attempts the previous step assigned and FINISHED for those whose run time has
elapsed (one REPORT_BATCH per cluster), ticks, plans with `placement.plan` and applies the whole
plan, placements and reservations, as one ASSIGN_BATCH (nothing planned may be dropped). Each
task's run time is drawn from the seed's `random.Random` when it is submitted. The state
machine's invariants are checked every `check_every` applies.

What is checked:
- weighted dominant-resource fair share between tenants (3:1 weights; cpu-heavy against
  memory-heavy tasks with equal weights), measured over a long window;
- inside a tenant, priority then submission order (and a task's position in its job);
- aging: a low-priority job is not passed forever by a stream of higher-priority ones;
- a task that needs a whole cluster is not starved by a stream of small ones (reservations);
- tasks that need a rare capability block nobody (no head-of-line blocking) and still run;
- at the end, regressions: reservation defects these runs found.

Each failure names its seed: `FAIRNESS_SEED=<n> pytest tests/sim/test_fairness.py` replays it
(alone); `-s` prints the measured figures.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest

from raftsched.protocol import Report, ReportKind, ReportVerdict
from raftsched.state import commands as c
from raftsched.state import placement
from raftsched.state.model import AGING_MS_PER_PRIORITY, TaskState, ready_rank_ms
from raftsched.state.outcome import Applied
from raftsched.state.placement import RESERVE_AFTER_MS
from raftsched.state.queries import ready_entry_live
from raftsched.state.results import AssignResult
from tests.support.fsmkit import Harness, job_doc, task_doc

SEEDS = [int(os.environ["FAIRNESS_SEED"])] if "FAIRNESS_SEED" in os.environ else [1, 7, 42]

SHORT_MS, LONG_MS = 1_000, 10_000
"""Run times of the small tasks are drawn uniformly from [SHORT_MS, LONG_MS]."""
Shape = Mapping[str, float]
"""A task's `resources` (cpu, memory_mb)."""
SMALL: Shape = {"cpu": 1, "memory_mb": 64}

Key = tuple[str, str]
"""(job id, task id)"""


@dataclass(slots=True)
class _Live:
    """An attempt the simulated agents run."""

    cluster_id: str
    job_id: str
    task_id: str
    end_ms: int
    reported_start: bool = False


class Sim:
    """The state machine, the planner and agents that run each task for its drawn time."""

    def __init__(self, seed: int, *, step_ms: int = 1_000, check_every: int = 250) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.h = Harness(check_every=check_every)
        self.step_ms = step_ms
        self.live: dict[int, _Live] = {}
        """fence -> the attempt, until its run time has elapsed and FINISHED is reported."""
        self.duration_ms: dict[Key, int] = {}
        self.placed_ms: dict[Key, int] = {}
        """When each task was placed (its attempt assigned): "starts" in the properties."""
        self.placed_on: dict[Key, str] = {}
        self.reservations: list[tuple[int, c.Reservation]] = []
        """(time, reservation) of every reservation a plan made."""
        self.last_placed: list[tuple[Key, str]] = []
        """(task, cluster) of what the last step placed."""
        self.jobs = 0

    @property
    def tag(self) -> str:
        return f"replay with FAIRNESS_SEED={self.seed} (at {self.h.now_ms} ms)"

    def cluster(self, cluster_id: str, *, cpu: float, memory_mb: int,
                caps: tuple[str, ...] = ("linux",)) -> None:
        outcome = self.h.register(cluster_id, caps=caps, cpu=cpu, memory_mb=memory_mb)
        assert isinstance(outcome, Applied), outcome

    def submit(self, tenant: str, durations: list[int], *, priority: int = 50,
               resources: Shape | None = None,
               requires: tuple[str, ...] = ()) -> str:
        """A job of `len(durations)` tasks of one shape, each to run its drawn time."""
        self.jobs += 1
        job_id = f"{tenant}-{self.jobs}"
        docs = []
        for index, duration in enumerate(durations):
            docs.append(task_doc(f"t{index}", resources=resources or SMALL,
                                 requires=list(requires)))
            self.duration_ms[(job_id, f"t{index}")] = duration
        outcome = self.h.submit(job_id, job_doc(docs, tenant=tenant, priority=priority))
        assert isinstance(outcome, Applied), f"{self.tag}: {outcome}"
        return job_id

    def draw(self, count: int, low: int = SHORT_MS, high: int = LONG_MS) -> list[int]:
        return [self.rng.randint(low, high) for _ in range(count)]

    def keep_queued(self, tenant: str, at_least: int, *, batch: int = 100,
                    resources: Shape | None = None, priority: int = 50) -> None:
        """Top the tenant's queue up with a job of `batch` small tasks when it runs low."""
        usage = self.h.state.usage.get(tenant)
        if usage is None or usage.queued < at_least:
            self.submit(tenant, self.draw(batch), resources=resources, priority=priority)

    def step(self) -> placement.Plan:
        """Advance one step: reports, tick, plan, apply. Returns the plan applied."""
        h = self.h
        h.now_ms += self.step_ms
        now = h.now_ms
        reports: dict[str, list[Report]] = {}
        ended = []
        for fence, live in self.live.items():
            items = reports.setdefault(live.cluster_id, [])
            if not live.reported_start:
                items.append(Report(ReportKind.STARTED, live.job_id, live.task_id, fence))
                live.reported_start = True
            if live.end_ms <= now:
                items.append(Report(ReportKind.FINISHED, live.job_id, live.task_id, fence, 0))
                ended.append(fence)
        for fence in ended:
            del self.live[fence]
        for cluster_id in sorted(reports):
            if reports[cluster_id]:
                verdicts = h.report(cluster_id, *reports[cluster_id])
                assert all(v == ReportVerdict.ACCEPTED for v in verdicts), \
                    f"{self.tag}: {verdicts}"
        h.tick()
        planned = placement.plan(h.state, now_ms=now)
        assert not getattr(planned, "preemptions", None), "no job here is preemptible"
        self.last_placed = []
        if planned.placements or planned.reservations:
            result = h.expect(c.AssignBatch(now, tuple(planned.placements),
                                            tuple(planned.reservations)), AssignResult)
            assert not result.dropped, f"{self.tag}: apply dropped {result.dropped}"
            for item, fence in result.assigned:
                key = (item.job_id, item.task_id)
                self.placed_ms[key] = now
                self.placed_on[key] = item.cluster_id
                self.last_placed.append((key, item.cluster_id))
                self.live[fence] = _Live(item.cluster_id, item.job_id, item.task_id,
                                         now + self.duration_ms[key])
            self.reservations.extend((now, r) for r in planned.reservations)
        return planned

    def run_until(self, done: Callable[[], bool], limit_ms: int,
                  each: Callable[[], None] = lambda: None) -> None:
        """Step (calling `each` before every step) until `done()`; at most until `limit_ms`."""
        while not done():
            assert self.h.now_ms < limit_ms, f"{self.tag}: not done by {limit_ms} ms"
            each()
            self.step()

    def free_cpu(self, cluster_id: str) -> int:
        cluster = self.h.state.clusters[cluster_id]
        return cluster.cpu_milli - cluster.reserved_cpu_milli

    def placed(self, job_id: str) -> bool:
        job = self.h.job(job_id)
        return all((job_id, t.spec.id) in self.placed_ms for t in job.tasks)


# --- weighted dominant-resource fair share ------------------------------------------------------

WINDOW_S = 30 * 60
"""The fair-share window: 30 simulated minutes, sampled every simulated second ..."""
WARMUP_S = 60
"""... after the first simulated minute."""
BACKLOG = 100
"""Each tenant keeps at least this many tasks queued: far more than the clusters hold."""


def _dominant(sim: Sim, tenant: str) -> float:
    """The tenant's dominant share of the clusters' totals (unweighted)."""
    usage = sim.h.state.usage.get(tenant)
    if usage is None:
        return 0.0
    cpu = sum(cl.cpu_milli for cl in sim.h.state.clusters.values())
    memory = sum(cl.memory_mb for cl in sim.h.state.clusters.values())
    return max(usage.cpu_milli / cpu, usage.memory_mb / memory)


def _measure_shares(sim: Sim, shapes: dict[str, Shape]) -> tuple[dict[str, float], float]:
    """Run the window with every tenant backlogged; the time-averaged dominant share of each
    tenant, and the time-averaged fraction of the cpu in use."""
    sums = dict.fromkeys(shapes, 0.0)
    busy = 0.0
    total_cpu = sum(cl.cpu_milli for cl in sim.h.state.clusters.values())
    for second in range(WINDOW_S):
        for tenant, shape in shapes.items():
            sim.keep_queued(tenant, BACKLOG, resources=shape)
        sim.step()
        if second < WARMUP_S:
            continue
        for tenant in shapes:
            sums[tenant] += _dominant(sim, tenant)
        busy += sum(u.cpu_milli for u in sim.h.state.usage.values()) / total_cpu
    samples = WINDOW_S - WARMUP_S
    return {tenant: total / samples for tenant, total in sums.items()}, busy / samples


@pytest.mark.parametrize("seed", SEEDS)
def test_weights_3_to_1_share_the_dominant_resource_3_to_1(seed: int) -> None:
    """Two tenants with weights 3 and 1, both backlogged with 1-cpu tasks on 2 x 16 cpus: over
    the window, the weight-3 tenant holds 75 % (± 5 points) of the cpu in use."""
    sim = Sim(seed, check_every=500)
    for cluster_id in ("east", "west"):
        sim.cluster(cluster_id, cpu=16, memory_mb=65_536)
    sim.h.run(c.TenantSet("heavy", 3, 0, 0, sim.h.now_ms))
    shares, busy = _measure_shares(sim, {"heavy": SMALL, "light": SMALL})
    heavy = shares["heavy"] / (shares["heavy"] + shares["light"])
    print(f"seed {seed}: weight-3 share {heavy:.4f}, cpu busy {busy:.4f}, "
          f"reservations {len(sim.reservations)}")
    assert busy > 0.95, f"{sim.tag}: no contention: the cpu was {busy:.1%} busy"
    assert abs(heavy - 0.75) <= 0.05, \
        f"{sim.tag}: the weight-3 tenant held {heavy:.2%} of the cpu in use, not 75 % ± 5"


CPU_HEAVY: Shape = {"cpu": 2, "memory_mb": 1_024}
"""2 of 32 cpus, 1 of 128 GB: a sixteenth of the cpu, dominant."""
MEMORY_HEAVY: Shape = {"cpu": 1, "memory_mb": 8_192}
"""1 of 32 cpus, 8 of 128 GB: a sixteenth of the memory, dominant."""


@pytest.mark.parametrize("seed", SEEDS)
def test_equal_weights_equal_dominant_shares_across_task_shapes(seed: int) -> None:
    """A cpu-heavy and a memory-heavy tenant with equal weights on 2 x (16 cpus, 64 GB): their
    time-averaged dominant shares (cpu for one, memory for the other) are equal, each 50 %
    (± 5 points) of their sum. A task of either is a sixteenth of its tenant's dominant
    resource, so an equal split is a whole number of tasks. (Shares then tie often, and the
    planner gives a tie to the first tenant name: `cpu` here, by a couple of points.)"""
    sim = Sim(seed, check_every=500)
    for cluster_id in ("east", "west"):
        sim.cluster(cluster_id, cpu=16, memory_mb=65_536)
    shares, busy = _measure_shares(sim, {"cpu": CPU_HEAVY, "memory": MEMORY_HEAVY})
    memory = shares["memory"] / (shares["memory"] + shares["cpu"])
    usage = sim.h.state.usage
    assert usage["memory"].memory_mb / 131_072 > usage["memory"].cpu_milli / 32_000
    assert usage["cpu"].cpu_milli / 32_000 > usage["cpu"].memory_mb / 131_072
    print(f"seed {seed}: dominant shares cpu-heavy {shares['cpu']:.4f}, memory-heavy "
          f"{shares['memory']:.4f} (memory-heavy's part {memory:.4f}), cpu busy {busy:.4f}")
    assert busy > 0.9, f"{sim.tag}: no contention: the cpu was {busy:.1%} busy"
    assert abs(memory - 0.5) <= 0.05, \
        (f"{sim.tag}: dominant shares cpu-heavy {shares['cpu']:.3f} and memory-heavy "
         f"{shares['memory']:.3f}: the memory-heavy tenant's part is {memory:.2%}, not 50 % ± 5")


# --- inside a tenant: priority, then submission order -------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_priority_then_submission_order_inside_a_tenant(seed: int) -> None:
    """One tenant, 2 x 8 cpus held by a first job for 40-50 s; meanwhile, within 20 s (less
    than AGING_MS_PER_PRIORITY), jobs of priorities 10, 49, 50, 51 and 90 arrive, 1 to 6
    1-cpu tasks each. Then: every task of a higher-priority job starts (is placed) no later
    than any task of a lower-priority job submitted within AGING_MS_PER_PRIORITY of it; among
    equal priorities, every task of the earlier job no later than any of the later one; inside
    a job, task order. (One task shape: a smaller task may pass a larger one that fits nowhere,
    by design, which is not what this test is about.)"""
    sim = Sim(seed, step_ms=500, check_every=100)
    for cluster_id in ("east", "west"):
        sim.cluster(cluster_id, cpu=8, memory_mb=65_536)
    first = sim.submit("solo", sim.draw(16, 40_000, 50_000))
    sim.step()
    assert sim.placed(first)
    burst: list[str] = []
    end_ms = sim.h.now_ms + 20_000
    while sim.h.now_ms < end_ms:
        if sim.rng.random() < 0.6:
            burst.append(sim.submit("solo", sim.draw(sim.rng.randint(1, 6)),
                                    priority=sim.rng.choice([10, 49, 50, 51, 90])))
        sim.step()
    sim.run_until(lambda: all(sim.placed(job_id) for job_id in burst), sim.h.now_ms + 600_000)

    jobs = [sim.h.job(job_id) for job_id in burst]
    starts = {job.id: [sim.placed_ms[(job.id, t.spec.id)] for t in job.tasks] for job in jobs}
    assert min(min(s) for s in starts.values()) >= max(job.submitted_ms for job in jobs), \
        f"{sim.tag}: a burst task started before the burst was all queued"
    violations = []
    crossed = 0
    for a in jobs:
        if starts[a.id] != sorted(starts[a.id]):
            violations.append(f"{a.id}: tasks out of order {starts[a.id]}")
        for b in jobs:
            if a is b or abs(a.submitted_ms - b.submitted_ms) > AGING_MS_PER_PRIORITY:
                continue
            first_a = a.spec.priority > b.spec.priority or (
                a.spec.priority == b.spec.priority and a.seq < b.seq)
            if not first_a:
                continue
            crossed += a.submitted_ms > b.submitted_ms
            if max(starts[a.id]) > min(starts[b.id]):
                violations.append(
                    f"{a.id} (priority {a.spec.priority}, submitted {a.submitted_ms}) last "
                    f"started {max(starts[a.id])} after {b.id} (priority {b.spec.priority}, "
                    f"submitted {b.submitted_ms}) first started {min(starts[b.id])}")
    print(f"seed {seed}: {len(jobs)} jobs, {sum(len(s) for s in starts.values())} tasks, "
          f"{crossed} pairs where the later job goes first")
    assert crossed > 0, f"{sim.tag}: no later job had to pass an earlier one"
    assert not violations, f"{sim.tag}: " + "; ".join(violations[:5])


# --- aging --------------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [1, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_aging_bounds_the_wait_of_a_low_priority_job(seed: int, levels: int) -> None:
    """A low-priority job L (priority p, one 1-cpu task, submitted at t0) in front of a stream
    of priority p + levels jobs that arrives faster than 2 x 8 cpus drain (about 5 tasks/s
    against about 2.9).

    The bound. L ranks t0 - p·A (A = AGING_MS_PER_PRIORITY); a stream job submitted at s ranks
    s - (p + levels)·A, ahead of L iff s < T = t0 + levels·A (at s = T the ranks tie and L, the
    earlier job, goes first). So (1) no task of a job submitted at or after T starts before L.
    (2) After the plan of the first step at or after T, the tasks still ahead of L are a fixed
    set of B (later jobs go behind L; the planner and reservations serve the queue's head). All
    tasks take one of the C = 16 one-cpu slots; a slot's task ends within D = LONG_MS and the
    step after (S = step) sees it end and gives the slot to the head of the queue: every
    window of D + S places C tasks from the front, and L starts by
        T + ceil((B + 1) / C) x (D + S).
    When the stream outpaces the drain, B grows with levels·A, so levels·A + D alone bounds
    nothing: the test prints how L's wait compares with it."""
    sim = Sim(seed, step_ms=500, check_every=200)
    for cluster_id in ("east", "west"):
        sim.cluster(cluster_id, cpu=8, memory_mb=65_536)
    slots = 16
    low, high = 50, 50 + levels
    stream: list[str] = []

    def arrive() -> None:
        stream.append(sim.submit("solo", sim.draw(sim.rng.randint(1, 4)), priority=high))

    for _ in range(20):  # 10 s of the stream before L: the clusters are full, a backlog waits
        arrive()
        sim.step()
    t0 = sim.h.now_ms
    low_job = sim.submit("solo", sim.draw(1), priority=low)
    key = (low_job, "t0")
    deadline = t0 + levels * AGING_MS_PER_PRIORITY
    while sim.h.now_ms < deadline:
        arrive()
        sim.step()
    job = sim.h.job(low_job)
    rank = (ready_rank_ms(job), job.seq)
    ahead = 0
    for tenant_queue in sim.h.state.queues.values():
        for shape_queue in tenant_queue.shapes.values():
            ahead += sum(1 for entry in shape_queue.heap
                         if ready_entry_live(sim.h.state, entry)
                         and (entry[0], entry[1]) < rank)
    bound = deadline + math.ceil((ahead + 1) / slots) * (LONG_MS + sim.step_ms)
    sim.run_until(lambda: key in sim.placed_ms, bound + 60_000, arrive)

    start = sim.placed_ms[key]
    passed = [f"{job_id} (submitted {sim.h.job(job_id).submitted_ms}) at {when}"
              for job_id in stream if sim.h.job(job_id).submitted_ms >= deadline
              for t in sim.h.job(job_id).tasks
              if (when := sim.placed_ms.get((job_id, t.spec.id), start)) < start]
    naive = levels * AGING_MS_PER_PRIORITY + LONG_MS
    print(f"seed {seed}, {levels} level(s): L waited {start - t0} ms; {ahead} tasks ahead at "
          f"t0 + {levels}·A; bound {bound - t0} ms; levels·A + D = {naive} ms")
    assert not passed, f"{sim.tag}: jobs submitted from t0 + levels·A on went first: {passed[:3]}"
    assert start <= bound, \
        (f"{sim.tag}: L waited {start - t0} ms, past its bound {bound - t0} ms "
         f"({ahead} tasks ahead of it at t0 + {levels}·A)")


# --- reservations: a large task amid a stream of small ones ---------------------------------------


TOPOLOGIES = {"3x8cpu-plan-500ms": (3, 500), "2x8cpu-plan-100ms": (2, 100)}
"""(8-cpu clusters, planning interval): with fewer than four clusters a plan keeps one
reservation at most; a leader plans every 100 ms or so."""


@pytest.mark.parametrize("same_tenant", [False, True], ids=["other-tenant", "same-tenant"])
@pytest.mark.parametrize("topology", list(TOPOLOGIES))
@pytest.mark.parametrize("seed", SEEDS)
def test_a_large_task_is_not_starved_by_a_stream_of_small_ones(seed: int, topology: str,
                                                             same_tenant: bool) -> None:
    _large_task_amid_small_ones(seed, topology, same_tenant)


def _large_task_amid_small_ones(seed: int, topology: str, same_tenant: bool) -> None:
    """A backlog of 1-cpu tasks (at least 60 queued, so its head has waited past
    RESERVE_AFTER_MS too) keeps every 8-cpu cluster busy; a task needing a whole cluster (8
    cpus) arrives after a minute (from another tenant, or from the same one, behind its
    backlog). It gets a reservation and starts within
        RESERVE_AFTER_MS + LONG_MS + 2 steps:
    the first plan from RESERVE_AFTER_MS on reserves it a cluster; nothing new lands there, so
    the cluster is empty once its last small task ends (within LONG_MS) and the step after sees
    it (one step of slack more for the planning rounds). Nothing else lands on the reserved
    cluster meanwhile."""
    count, step_ms = TOPOLOGIES[topology]
    sim = Sim(seed, step_ms=step_ms, check_every=100_000 // step_ms)
    clusters = tuple(f"c{i}" for i in range(count))
    for cluster_id in clusters:
        sim.cluster(cluster_id, cpu=8, memory_mb=65_536)

    def feed() -> None:
        sim.keep_queued("many", 60)

    for _ in range(60_000 // step_ms):
        feed()
        sim.step()
    assert all(sim.free_cpu(cluster_id) == 0 for cluster_id in clusters)
    submitted = sim.h.now_ms
    big = sim.submit("many" if same_tenant else "few", [5_000],
                     resources={"cpu": 8, "memory_mb": 64})
    key = (big, "t0")
    held_by_others: list[str] = []
    reserved: set[str] = set()

    def watch() -> None:
        """Before each step: what the last one placed on a cluster reserved for the large
        task before it (none but the large task may land there), then the reservations now."""
        feed()
        held_by_others.extend(f"{k} on {where} at {sim.h.now_ms}"
                              for k, where in sim.last_placed if where in reserved and k != key)
        reserved.clear()
        reserved.update(cluster_id for cluster_id in clusters
                        if sim.h.state.clusters[cluster_id].reserved_for == (big, 0))

    bound = RESERVE_AFTER_MS + LONG_MS + 2 * step_ms
    sim.run_until(lambda: key in sim.placed_ms, submitted + 600_000, watch)

    wait = sim.placed_ms[key] - submitted
    mine = [(at - submitted, r.cluster_id) for at, r in sim.reservations if r.job_id == big]
    small = [f"{r.job_id}/{r.task_id}@{at - submitted}" for at, r in sim.reservations
             if r.job_id != big and submitted + RESERVE_AFTER_MS <= at <= sim.placed_ms[key]]
    print(f"seed {seed}, {topology}, {'same' if same_tenant else 'other'} tenant: the large "
          f"task waited {wait} ms (bound {bound}); its reservations (ms after its submit, "
          f"cluster) {mine}; small tasks reserved from RESERVE_AFTER_MS on: {small}")
    assert mine, f"{sim.tag}: the large task never got a reservation"
    assert not held_by_others, f"{sim.tag}: placed on the reserved cluster: {held_by_others}"
    assert wait <= bound, \
        (f"{sim.tag}: the large task waited {wait} ms, past RESERVE_AFTER_MS + LONG_MS + 2 "
         f"steps = {bound} ms. Its reservations (ms after its submit, cluster): {mine}; from "
         f"RESERVE_AFTER_MS on the one reservation a plan may hold went to small tasks "
         f"(task@ms): {small}")


# --- no head-of-line blocking: a rare capability ------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_tasks_needing_a_rare_capability_block_nothing_and_still_run(seed: int) -> None:
    """One tenant; one of four 8-cpu clusters has the capability `special`. A priority-10
    backlog of 1-cpu tasks fills all four; then 12 priority-90 tasks needing `special` and 2
    cpus each arrive. While any of them waits, after every plan no other cluster has a cpu
    free (the backlog behind them runs on); every one of them runs, on the rare cluster."""
    sim = Sim(seed, step_ms=500, check_every=200)
    sim.cluster("rare", cpu=8, memory_mb=65_536, caps=("linux", "special"))
    others = ("c1", "c2", "c3")
    for cluster_id in others:
        sim.cluster(cluster_id, cpu=8, memory_mb=65_536)

    def feed() -> None:
        sim.keep_queued("solo", 60, priority=10)

    for _ in range(20):
        feed()
        sim.step()
    assert all(sim.free_cpu(cluster_id) == 0 for cluster_id in ("rare", *others))
    submitted = sim.h.now_ms
    rare = sim.submit("solo", sim.draw(12), priority=90, resources={"cpu": 2, "memory_mb": 64},
                      requires=("special",))
    idle: list[str] = []
    samples = [0]

    def watch() -> None:
        feed()
        if any(t.state == TaskState.RUNNABLE for t in sim.h.job(rare).tasks):
            samples[0] += 1
            idle.extend(f"{cluster_id} had {sim.free_cpu(cluster_id)} milli-cpu free at "
                        f"{sim.h.now_ms}" for cluster_id in others
                        if sim.free_cpu(cluster_id) >= SMALL["cpu"] * 1000)

    sim.run_until(lambda: sim.placed(rare), submitted + 600_000, watch)

    waits = sorted(sim.placed_ms[(rare, t.spec.id)] - submitted for t in sim.h.job(rare).tasks)
    where = {sim.placed_on[(rare, t.spec.id)] for t in sim.h.job(rare).tasks}
    print(f"seed {seed}: rare tasks placed after {waits} ms; {samples[0]} plans while they "
          f"waited; {len(sim.reservations)} reservations")
    assert where == {"rare"}, f"{sim.tag}: rare tasks placed on {where}"
    assert samples[0] > 0
    assert not idle, f"{sim.tag}: other clusters idled while the rare tasks waited: {idle[:5]}"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_scarce_custom_resource_is_never_overcommitted_and_fully_used(seed: int) -> None:
    """Three 8-cpu clusters, one offering 2 licenses (`lic`); a backlog of small tasks keeps
    all of them busy, then 10 tasks each needing 1 license arrive. After every plan at most 2
    licenses are held; both are held at once at some point; every licensed task runs on the
    cluster that has them (the invariants, checked as it runs, also hold the cluster's count of
    what is held to a scan of its live attempts)."""
    sim = Sim(seed, step_ms=500, check_every=100)
    assert isinstance(sim.h.run(c.ClusterRegister(
        "licensed", 1, ("linux",), 8_000, 65_536, 0, sim.h.now_ms, (), (("lic", 2),))),
        Applied)
    for cluster_id in ("c1", "c2"):
        sim.cluster(cluster_id, cpu=8, memory_mb=65_536)

    def feed() -> None:
        sim.keep_queued("solo", 40, priority=10)

    for _ in range(10):
        feed()
        sim.step()
    submitted = sim.h.now_ms
    licensed = sim.submit("solo", sim.draw(10), priority=90,
                          resources={"cpu": 1, "memory_mb": 64, "custom": {"lic": 1}})
    held: list[int] = []

    def watch() -> None:
        feed()
        held.append(sim.h.state.clusters["licensed"].reserved_custom.get("lic", 0))

    sim.run_until(lambda: all(t.state.name == "SUCCEEDED"
                              for t in sim.h.job(licensed).tasks),
                  submitted + 1_800_000, watch)
    where = {sim.placed_on[(licensed, t.spec.id)] for t in sim.h.job(licensed).tasks}
    print(f"seed {seed}: licenses held per step, max {max(held)}, {len(held)} steps")
    assert where == {"licensed"}, f"{sim.tag}: licensed tasks placed on {where}"
    assert max(held) == 2, f"{sim.tag}: licenses held at most {max(held)} at once"
    assert all(0 <= n <= 2 for n in held), f"{sim.tag}: {held}"


# --- regressions found by this simulation --------------------------------------------------------


@pytest.mark.parametrize("seed", [368])
def test_small_tasks_do_not_keep_the_one_reservation_from_a_large_task(seed: int) -> None:
    """The large-task run above, with a seed found by sweeping seeds 0-399 of
    2x8cpu-plan-100ms (8 of them past the bound; this one the furthest, 41.5 s against
    40.2 s). With two or three clusters a plan keeps one reservation at most, and
    `placement._starving` counts as starving every shape-queue head that waited
    RESERVE_AFTER_MS and fits no room at that instant, oldest first: in a saturated cluster
    that is the small backlog's head at each plan that finds no cpu free, and it is older than
    the large task. So 1-cpu tasks, which the next ending task makes room for anyway, take the
    one reservation in turn (here four of them from 30.1 s to 31.7 s) before the large task
    gets it, and its cluster's drain starts that much later."""
    _large_task_amid_small_ones(seed, "2x8cpu-plan-100ms", same_tenant=False)


# Two more, deterministic: a plan's reservation pass (`placement._reserve`) runs after
# `_holders` has placed the tasks whose kept cluster has room, and clears `_Room.reserved_for`
# for them, so it saw those rooms and tasks as never reserved (as the planner was first written;
# the fix: `_reserve` skips the holders the plan places, and apply takes the reservations after
# the placements).


MEDIUM: Shape = {"cpu": 2, "memory_mb": 64}


def _crowded(medium_first: bool) -> Harness:
    """east and west (8 cpus each) full of 16 one-cpu tasks of `fill` (tenant `many`); then
    (if `medium_first`) `more` (one two-cpu task `m`, tenant `many`), `big` (one 8-cpu task
    `b`, tenant `few`) and `tiny` (one one-cpu task `t`, tenant `many`) queue, and wait
    RESERVE_AFTER_MS; the plan then made is applied. `tiny` is the smallest waiting task: room
    that frees goes to it first, so only the larger ones are reserved for."""
    h = Harness()
    for cluster_id in ("east", "west"):
        h.register(cluster_id, cpu=8, memory_mb=65_536)
    h.submit("fill", job_doc([task_doc(f"s{i}", resources=SMALL) for i in range(16)],
                             tenant="many"))
    _apply(h)
    assert all(h.task("fill", f"s{i}").state == TaskState.ASSIGNED for i in range(16))
    if medium_first:
        h.submit("more", job_doc([task_doc("m", resources=MEDIUM)], tenant="many"))
    h.submit("big", job_doc([task_doc("b", resources={"cpu": 8, "memory_mb": 64})],
                            tenant="few"))
    h.submit("tiny", job_doc([task_doc("t", resources=SMALL)], tenant="many"))
    h.now_ms += RESERVE_AFTER_MS
    _apply(h)
    return h


def _apply(h: Harness) -> placement.Plan:
    planned = placement.plan(h.state, now_ms=h.now_ms)
    h.expect(c.AssignBatch(h.now_ms, tuple(planned.placements), tuple(planned.reservations)),
             AssignResult)
    return planned


def _finish_on(h: Harness, cluster_id: str, count: int) -> None:
    """End `count` of the `fill` tasks running on `cluster_id`."""
    ended = 0
    for i in range(16):
        attempt = h.current("fill", f"s{i}")
        if ended < count and attempt.cluster_id == cluster_id and attempt.live:
            h.started(cluster_id, "fill", f"s{i}", attempt.fence)
            h.finished(cluster_id, "fill", f"s{i}", attempt.fence)
            ended += 1
    assert ended == count


def test_a_plan_does_not_reserve_again_the_task_it_places_on_its_kept_cluster() -> None:
    """The large task's kept cluster (east) empties while west has one cpu free and small
    tasks wait. The plan places the large task on east and a small one on west, and reserves
    nothing. (It used to reserve west for the large task too, `_starving` seeing a task that
    waited and fit no room now, which closed west to the walk for the round: the small task
    waited, a cpu idled, and the batch carried a reservation for a task it placed.)"""
    h = _crowded(medium_first=False)
    assert h.state.clusters["east"].reserved_for == ("big", 0)
    h.submit("more", job_doc([task_doc("m", resources=SMALL)], tenant="many"))
    _finish_on(h, "east", 8)
    _finish_on(h, "west", 1)
    planned = placement.plan(h.state, now_ms=h.now_ms)
    placed = [(p.job_id, p.task_id, p.cluster_id) for p in planned.placements]
    assert ("big", "b", "east") in placed
    assert planned.reservations == [], f"reserved again the task it places: {planned}"
    on_west = [job_id for job_id, _, cluster_id in placed if cluster_id == "west"]
    assert on_west in (["tiny"], ["more"]), f"west's free cpu idled: {placed}"


def test_a_reservation_planned_on_a_cluster_whose_holder_the_plan_places_takes_effect() -> None:
    """east is kept for a two-cpu task (it waited RESERVE_AFTER_MS, fit no room then, is larger
    than the smallest waiting task and older than the large task: it won the one reservation a
    plan keeps with two clusters). Two cpus free on east: the plan places the two-cpu task
    there and, in the same pass, reserves east (now the closest) for the large task, and that
    reservation takes effect. (Apply used to take the reservations before the placements, find
    east still kept for the two-cpu task and refuse it without a word: the large task lost the
    round.)"""
    h = _crowded(medium_first=True)  # `more` is older than `big`: it wins the one reservation
    assert h.state.clusters["east"].reserved_for == ("more", 0)
    _finish_on(h, "east", 2)
    planned = _apply(h)
    assert ("more", "m", "east") in [(p.job_id, p.task_id, p.cluster_id)
                                     for p in planned.placements]
    assert planned.reservations, "the large task was not reserved a cluster"
    kept = {r.cluster_id: h.state.clusters[r.cluster_id].reserved_for
            for r in planned.reservations}
    assert h.task("big", "b").reserved_on is not None, \
        f"planned {planned.reservations}, applied: {kept}"
