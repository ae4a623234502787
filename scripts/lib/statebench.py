"""A replicated state holding N jobs, built as a replica builds it: through the state machine's
apply of real, encoded commands (submit, assign, started and finished reports, cancel). For
benchmarks of the read side: `scripts/bench list` (ListJobs), and the console's `/jobs` later.

Jobs have one task each, spread over a few tenants, named from a small vocabulary (so a query
matches some), and end up in every job state: per 20 submitted, 12 SUCCEEDED, 1 FAILED,
1 CANCELLED, 3 RUNNING and 3 PENDING, interleaved in submission order.
"""

from __future__ import annotations

import random

from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm
from raftsched.state.model import State
from raftsched.state.outcome import Applied
from raftsched.state.results import AssignResult

TENANTS = ("alpha", "beta", "gamma", "delta")
WORDS = ("etl", "train", "render", "backup", "report", "ingest", "score", "index")
CLUSTER = "bench"
CHUNK = 1_000
"""Jobs submitted, then moved to their state, at a time (the live-jobs bound is never near)."""


def _apply(state: State, cmd: c.Command) -> object:
    outcome = fsm.apply(state, c.encode(cmd))
    assert isinstance(outcome, Applied), outcome
    return outcome.result


def job_name(rng: random.Random, number: int) -> str:
    return f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{number}"


def state_with_jobs(count: int, seed: int = 1, tenants: tuple[str, ...] = TENANTS) -> State:
    """A State with `count` jobs (see the module docstring); the same seed, the same state."""
    rng = random.Random(seed)
    state = State()
    now_ms = 1_000
    _apply(state, c.ClusterRegister(CLUSTER, 1, ("linux",), 10**9, 10**9, 0, now_ms, ()))
    for start in range(0, count, CHUNK):
        now_ms += 1_000
        ids = [f"job-{n:07d}" for n in range(start, min(count, start + CHUNK))]
        for job_id in ids:
            doc = {"name": job_name(rng, int(job_id[4:])), "tenant": rng.choice(tenants),
                   "tasks": [{"id": "t", "command": ["true"], "retry": {"max_attempts": 1},
                              "resources": {"cpu": 0.001, "memory_mb": 1}}]}
            _apply(state, c.JobSubmit(job_id, doc_to_wire(doc), now_ms))
        _advance(state, ids, rng, now_ms)
    return state


def _advance(state: State, ids: list[str], rng: random.Random, now_ms: int) -> None:
    """Move each job to its share's state: 3 in 20 stay PENDING, 1 is cancelled, the rest run
    (3 stay RUNNING, 1 fails, 12 succeed)."""
    fate = {job_id: rng.randrange(20) for job_id in ids}
    for job_id in ids:
        if fate[job_id] == 3:
            _apply(state, c.JobCancel(job_id, now_ms, "bench"))
    placed = tuple(c.Placement(j, "t", CLUSTER) for j in ids if fate[j] >= 4)
    if not placed:
        return
    result = _apply(state, c.AssignBatch(now_ms, placed))
    assert isinstance(result, AssignResult) and len(result.assigned) == len(placed), result
    fences = {p.job_id: fence for p, fence in result.assigned}
    started = tuple(c.Report(c.ReportKind.STARTED, j, "t", f) for j, f in fences.items())
    _apply(state, c.ReportBatch(CLUSTER, now_ms, now_ms, started))
    finished = tuple(c.Report(c.ReportKind.FINISHED, j, "t", f, 1 if fate[j] == 4 else 0)
                     for j, f in fences.items() if fate[j] == 4 or fate[j] >= 8)
    _apply(state, c.ReportBatch(CLUSTER, now_ms, now_ms + 1, finished))
