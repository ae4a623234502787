"""The printed comparison: one row per figure, raftsched and each peer side by side, and the
ratio raftsched / peer. Standard library only."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import workloads

PEERS = ("dask", "celery", "etcd")
"""etcd runs the submit rows only (puts to a 3-member cluster)."""
SYSTEMS = ("raftsched", *PEERS)
LABEL_CHARS = 46
CELL_CHARS = 11
NOTE_CHARS = 110

Results = dict[str, Any]
"""system -> that runner's result (see protocol.emit)."""


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    workload: str
    value: Callable[[dict[str, Any]], float | None]
    """From one system's figures of `workload`; None when the system has no such figure."""
    digits: int = 2
    ratio: bool = True


def figure(key: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda figures: figures.get(key)


def per_bound(bound_s: float) -> Callable[[dict[str, Any]], float | None]:
    return lambda f: f["makespan_s"] / bound_s if "makespan_s" in f else None


def per_makespan(bound_s: float) -> Callable[[dict[str, Any]], float | None]:
    return lambda f: bound_s / f["makespan_s"] if "makespan_s" in f else None


def cell(value: float | str | None, digits: int) -> str:
    if value is None:
        return "-".rjust(CELL_CHARS)
    if isinstance(value, str):
        return value[:CELL_CHARS].rjust(CELL_CHARS)
    return f"{value:,.{digits}f}".rjust(CELL_CHARS)


def value_of(results: Results, system: str, row: Row) -> float | str | None:
    figures = results.get(system, {}).get("workloads", {}).get(row.workload)
    if figures is None:
        return None
    if "error" in figures:
        return "error"
    return row.value(figures)


def render_row(results: Results, row: Row) -> str:
    values = {system: value_of(results, system, row) for system in SYSTEMS}
    line = f"  {row.label:<{LABEL_CHARS}}" + "".join(cell(values[s], row.digits) for s in SYSTEMS)
    ours = values["raftsched"]
    for peer in PEERS:
        theirs = values[peer]
        ok = (row.ratio and isinstance(ours, float | int) and isinstance(theirs, float | int)
              and theirs > 0 and math.isfinite(ours))
        line += cell(f"{ours / theirs:.2f}x" if ok else None, 2)  # type: ignore[operator]
    return line


def header() -> str:
    names = "".join(s.rjust(CELL_CHARS) for s in SYSTEMS)
    ratios = "".join(f"rs/{p}".rjust(CELL_CHARS) for p in PEERS)
    return f"  {'figure':<{LABEL_CHARS}}{names}{ratios}"


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    rows: list[Row]
    notes: list[str]


TASK_MS_RANGE = "{}-{} ms".format(*workloads.DAG_TASK_MS)


def capacity_section(scale: float) -> Section:
    nodes = workloads.capacity(scale)
    bound_s = workloads.lower_bound_s(nodes)
    title = (f"1 capacity: {len(nodes):,} independent tasks x {workloads.CAPACITY_TASK_MS} ms on "
             f"{workloads.SLOTS} slots; bound = work / slots = {bound_s:.2f} s")
    return Section(title, [
        Row("makespan s (lower is better)", "capacity", figure("makespan_s")),
        Row("efficiency = bound / makespan (target >= 0.95)", "capacity",
            per_makespan(bound_s), ratio=False)], [])


def layered_section(scale: float, seed: int) -> Section:
    dags = workloads.layered_dags(seed, scale)
    bound_s = sum(workloads.lower_bound_s(nodes) for nodes in dags)
    critical_s = sum(workloads.critical_path_ms(nodes) for nodes in dags) / 1000
    width = len(dags[0]) // workloads.LAYERED_LEVELS
    title = (f"2 layered DAGs: {len(dags)}, run one after another, each {workloads.LAYERED_LEVELS} "
             f"levels x {width} tasks, {workloads.LAYERED_PARENTS} parents each, {TASK_MS_RANGE}"
             f" (seed {seed})\n  bound = sum of max(critical path, work / slots) = "
             f"{bound_s:.2f} s (critical paths alone {critical_s:.2f} s)")
    return Section(title, [
        Row("makespan s, all DAGs", "layered", figure("makespan_s")),
        Row("makespan / bound (1.00 is perfect)", "layered", per_bound(bound_s), ratio=False)], [])


def fanout_section(scale: float, seed: int) -> Section:
    nodes = workloads.fanout(seed, scale)
    bound_s = workloads.lower_bound_s(nodes)
    width = workloads.dag_width(workloads.FANOUT_WIDTH, scale)
    title = (f"3 fan-out/fan-in: root -> ({width} tasks -> join) x {workloads.FANOUT_STAGES}, "
             f"depth {2 * workloads.FANOUT_STAGES + 1}, {len(nodes)} tasks, {TASK_MS_RANGE}; "
             f"bound {bound_s:.2f} s")
    return Section(title, [
        Row("makespan s", "fanout", figure("makespan_s")),
        Row("makespan / bound", "fanout", per_bound(bound_s), ratio=False)], [])


def noop_section(scale: float) -> Section:
    wide = workloads.scaled(workloads.NOOP_WIDE_TASKS, scale)
    jobs = workloads.scaled(workloads.NOOP_JOBS, scale)
    return Section("4 no-op throughput, first submit to last completion (higher is better)", [
        Row(f"one {wide:,}-task job: tasks/s", "noop", figure("wide_tasks_per_s"), 0),
        Row(f"{jobs:,} jobs of 10 (5 roots + 5 joins): tasks/s", "noop",
            figure("many_tasks_per_s"), 0)], [
        'raftsched no-op = ["mock"] with resources {cpu: 0.001, memory_mb: 0}, so slots never '
        "bind; dask: a function returning None; celery: a task returning its argument",
        f"raftsched's {jobs:,} jobs are submitted by 16 threads; dask's and celery's from one "
        "thread (their submits do not wait for a commit)"])


def submit_section() -> Section:
    levels = " and ".join(str(n) for n in workloads.SUBMIT_IN_FLIGHT_LEVELS)
    return Section(f"5 submit: sequential, then {levels} in flight from "
                   f"{workloads.SUBMIT_PROCESSES} client processes", [
        Row("sequential p50 ms (lower is better)", "submit", figure("p50_ms")),
        Row("sequential p99 ms", "submit", figure("p99_ms")),
        *(Row(f"submits/s, {n} in flight (higher is better)", "submit",
              figure(workloads.rate_key(n)), 0) for n in workloads.SUBMIT_IN_FLIGHT_LEVELS),
        Row("batch: one-task jobs/s in one SubmitJobs call", "submit",
            figure("batch_jobs_per_s"), 0)], [
        "raftsched: SubmitJob of a 1-task job, acknowledged once committed by a Raft majority "
        "(a client per thread); batch: one SubmitJobs call of "
        f"{workloads.SUBMIT_BATCH_JOBS:,} one-task jobs (at --scale 1), answered once all are "
        "committed (split into entries of MAX_JOBS_PER_BATCH_ENTRY)",
        "etcd: a 256-byte v3 KV Put to the leader over gRPC, acknowledged once committed by a "
        "Raft majority (a channel per thread): the like-for-like reference",
        "celery: apply_async, acknowledged once Redis has the message (no fsync, no "
        "replication): a reference, not a like-for-like figure",
        "dask: n/a (Client.submit is asynchronous: there is no acknowledged submit)"])


def sections(scale: float, seed: int) -> list[Section]:
    return [capacity_section(scale), layered_section(scale, seed), fanout_section(scale, seed),
            noop_section(scale), submit_section()]


def notes(note: str, first: str = "    note: ") -> list[str]:
    return textwrap.wrap(note, NOTE_CHARS, initial_indent=first,
                         subsequent_indent=" " * len(first))


@dataclass(frozen=True, slots=True)
class Target:
    label: str
    measured: str
    met: bool | None
    """None: not measured in this run (the reason is in `measured`)."""


def raftsched_figure(results: Results, workload: str, key: str) -> float | None:
    return number(value_of(results, "raftsched", Row("", workload, figure(key))))


def number(value: float | str | None) -> float | None:
    return float(value) if isinstance(value, float | int) and math.isfinite(value) else None


def vs_peer(results: Results, workload: str, key: str, peer: str, limit: float,
            higher_is_better: bool = False) -> tuple[str, bool | None]:
    """(the ratio raftsched / peer as text, whether it is within `limit`)."""
    ours = raftsched_figure(results, workload, key)
    theirs = number(value_of(results, peer, Row("", workload, figure(key))))
    if ours is None or not theirs:
        return f"n/a (no {peer} figure in this run)" if ours else "n/a (not run)", None
    ratio = ours / theirs
    met = ratio >= limit if higher_is_better else ratio <= limit
    return f"{ours:,.4g} / {peer} {theirs:,.4g} = {ratio:.2f}x", met


def at_most(value: float | None, limit: float, unit: str) -> tuple[str, bool | None]:
    return ("n/a (not run)", None) if value is None else (f"{value:,.4g} {unit}", value <= limit)


def at_least(value: float | None, limit: float, unit: str) -> tuple[str, bool | None]:
    return ("n/a (not run)", None) if value is None else (f"{value:,.0f} {unit}", value >= limit)


def turnaround_ms(results: Results, quantile: str) -> float | None:
    """The agents' histogram when exported, else the estimate from the history."""
    metric = raftsched_figure(results, "turnaround", f"metric_{quantile}_ms")
    return metric if metric is not None else raftsched_figure(
        results, "turnaround", f"finish_to_started_{quantile}_ms")


def issue_targets(results: Results, scale: float) -> list[Target]:
    """Issue 24's targets, each judged on this run's figures."""
    bound_s = workloads.lower_bound_s(workloads.capacity(scale))
    efficiency = number(value_of(results, "raftsched", Row("", "capacity",
                                                           per_makespan(bound_s))))
    batch = raftsched_figure(results, "submit", "batch_jobs_per_s")
    rows = [
        ("capacity efficiency >= 0.95", at_least_ratio(efficiency, 0.95)),
        ("capacity makespan <= 1.0x dask", vs_peer(results, "capacity", "makespan_s", "dask", 1)),
        ("layered makespan <= 1.0x dask", vs_peer(results, "layered", "makespan_s", "dask", 1)),
        ("fan-out makespan <= 1.0x dask", vs_peer(results, "fanout", "makespan_s", "dask", 1)),
        ("slot turnaround p50 <= 1 ms", at_most(turnaround_ms(results, "p50"), 1, "ms")),
        ("slot turnaround p99 <= 5 ms", at_most(turnaround_ms(results, "p99"), 5, "ms")),
        ("submit p50 <= 2x etcd put p50", vs_peer(results, "submit", "p50_ms", "etcd", 2)),
        ("submit p99 <= 5 ms", at_most(raftsched_figure(results, "submit", "p99_ms"), 5, "ms")),
        ("submits/s at 16 >= 0.6x etcd puts/s at 16",
         vs_peer(results, "submit", workloads.rate_key(16), "etcd", 0.6, higher_is_better=True)),
        ("batch submit >= 20,000 one-task jobs/s",
         at_least(batch, 20_000, "jobs/s") if batch is not None
         else ("n/a (no batch submit in this build)", None)),
        ("no-op: one 10,000-task job >= 10,000 tasks/s",
         at_least(raftsched_figure(results, "noop", "wide_tasks_per_s"), 10_000, "tasks/s")),
        ("no-op: 1,000 jobs of 10 >= 6,000 tasks/s",
         at_least(raftsched_figure(results, "noop", "many_tasks_per_s"), 6_000, "tasks/s"))]
    return [Target(label, measured, met) for label, (measured, met) in rows]


def at_least_ratio(value: float | None, limit: float) -> tuple[str, bool | None]:
    return ("n/a (not run)", None) if value is None else (f"{value:.3f}", value >= limit)


def targets(results: Results, scale: float) -> list[str]:
    """The targets table: one line each, MET / NOT MET / n/a, and a count of each."""
    judged = issue_targets(results, scale)
    lines = [f"  {'target':<{LABEL_CHARS}}{'verdict':>9}   measured (ratios: raftsched / peer)"]
    for target in judged:
        verdict = "n/a" if target.met is None else ("MET" if target.met else "NOT MET")
        lines.append(f"  {target.label:<{LABEL_CHARS}}{verdict:>9}   {target.measured}")
    met = sum(t.met is True for t in judged)
    missed = sum(t.met is False for t in judged)
    lines.append(f"  {met} met, {missed} not met, {len(judged) - met - missed} not measured")
    if scale < 1:
        lines += notes(f"at --scale {scale:g} the no-op jobs and the workloads are smaller than "
                       "the targets name; judge the targets on a --scale 1 run", "  note: ")
    return lines


HOW_TURNAROUND = (
    f"per agent ({workloads.SLOTS_PER_WORKER} slots), sort workload 1's attempts by finish and, "
    "separately, by start; while the agent is full the i-th start can only reuse the slot of the "
    f"(i-{workloads.SLOTS_PER_WORKER})-th finish, so turnaround_i = start_i - "
    f"finish_(i-{workloads.SLOTS_PER_WORKER}). Times are the leader's clock in the committed "
    "history: finish and start are when the agent's FINISHED and STARTED reports were proposed, "
    "assigned when the ASSIGN_BATCH was.")


def turnaround(results: Results) -> list[str]:
    figures = results.get("raftsched", {}).get("workloads", {}).get("turnaround")
    if figures is None:
        return []
    if "error" in figures:
        return [f"  error: {figures['error']}"]
    if figures.get("metric_p50_ms") is None:
        metric = figures.get("metric_note", "n/a")
    else:
        metric = (f"p50 {figures['metric_p50_ms']:.1f} ms  p99 {figures['metric_p99_ms']:.1f} ms"
                  f" ({figures['metric_count']} observations)")
    lines = [f"  agents' raftsched_agent_slot_turnaround_seconds: {metric}"]
    if "estimate_samples" not in figures:
        return [*lines, f"  estimate: {figures.get('estimate_note', 'n/a')}"]
    return [*lines,
            f"  estimate, slot freed -> next attempt STARTED:  p50 "
            f"{figures['finish_to_started_p50_ms']:.0f} ms  p99 "
            f"{figures['finish_to_started_p99_ms']:.0f} ms ({figures['estimate_samples']} slot "
            f"reuses)",
            f"  estimate, slot freed -> next attempt ASSIGNED: p50 "
            f"{figures['finish_to_assigned_p50_ms']:.0f} ms  p99 "
            f"{figures['finish_to_assigned_p99_ms']:.0f} ms",
            f"  (recorded attempt duration p50 {figures['recorded_duration_p50_ms']:.0f} ms for "
            f"{workloads.CAPACITY_TASK_MS} ms tasks)",
*notes(HOW_TURNAROUND, "    how: ")]


def render(results: Results, scale: float, seed: int) -> str:
    lines = [header()]
    for section in sections(scale, seed):
        if all(value_of(results, s, row) is None for s in SYSTEMS for row in section.rows):
            continue  # not run
        lines += ["", section.title, *(render_row(results, row) for row in section.rows),
                  *(wrapped for note in section.notes for wrapped in notes(note))]
    if turnaround(results):
        lines += ["", "6 slot turnaround (raftsched only, from workload 1)", *turnaround(results)]
    lines += ["", "targets of issue 24 (each judged within this run)", *targets(results, scale)]
    return "\n".join(lines)
