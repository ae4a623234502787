"""The job index (what ListJobs pages and counts by) against a recount of the jobs, under random
command streams that also forget finished jobs (time jumps past JOB_RETENTION_MS): the Harness
runs `check_invariants` after every apply (the index equals a scan, order by order), and every
few steps each listing — per tenant, state, query, in both orders, paged in small pages — and
its counts equal a scan. A failing seed is printed and replays exactly:
`SIM_SEED=<n> pytest tests/sim/test_job_index_properties.py`."""

from __future__ import annotations

import os
import random

import pytest

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.replica import views
from raftsched.state import invariants, snapshot
from raftsched.state.model import JobState, State
from tests.support.fsmgen import TENANTS, RandomChooser, next_command, setup
from tests.support.fsmkit import Harness

SEEDS = [int(os.environ["SIM_SEED"])] if "SIM_SEED" in os.environ else list(range(6))
QUERIES = ("", "j1", "J2", "gen", "zz")


def scanned(state: State, tenant: str, job_state: str, query: str, newest: bool) -> list[str]:
    jobs = sorted(state.jobs.values(), key=lambda j: j.seq, reverse=newest)
    return [j.id for j in jobs if tenant in ("", j.spec.tenant)
            and job_state in ("", j.state.name)
            and (query.casefold() in j.id.casefold() or query.casefold() in j.spec.name)]


def recount(state: State, tenant: str, query: str) -> dict[str, int]:
    counts = {s.name: 0 for s in JobState}
    for job_id in scanned(state, tenant, "", query, False):
        counts[state.jobs[job_id].state.name] += 1
    return counts


def listed(fsm_state: State, rng: random.Random,
           **fields: object) -> tuple[list[str], dict[str, int]]:
    """Every job of a listing, paged in random small pages; the first page's counts."""
    seen: list[str] = []
    token, counts = "", None
    for _ in range(len(fsm_state.jobs) + 2):
        answer = views.list_jobs(fsm_state, pb.ListJobsRequest(
            limit=rng.randint(1, 7), page_token=token, **fields))  # type: ignore[arg-type]
        seen += [j.job_id for j in answer.jobs]
        counts = counts or dict(answer.state_counts)
        token = answer.next_page_token
        if not token:
            return seen, counts
    raise AssertionError(f"the listing {fields} did not end")


def check_listings(state: State, rng: random.Random) -> None:
    for tenant in ("", *TENANTS):
        query = rng.choice(QUERIES)
        job_state = rng.choice(["", *JobState.__members__])
        newest = rng.random() < 0.5
        seen, counts = listed(state, rng, tenant=tenant, state=job_state, query=query,
                              newest_first=newest)
        assert seen == scanned(state, tenant, job_state, query, newest), (tenant, job_state,
                                                                         query, newest)
        assert counts == recount(state, tenant, query), (tenant, query)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_job_index_equals_a_recount_under_random_commands(seed: int) -> None:
    h = Harness()
    setup(h)
    chooser, rng, jobs = RandomChooser(seed), random.Random(seed), [0]
    forgotten = 0
    try:
        for n in range(1_500):
            if rng.randrange(80) == 0:  # past retention: every finished job is forgotten
                before = len(h.state.jobs)
                h.tick(limits.JOB_RETENTION_MS)
                forgotten += before - len(h.state.jobs)
            else:
                h.run(next_command(chooser, h, jobs))
            if n % 50 == 0:
                check_listings(h.state, rng)
        restored = snapshot.load(snapshot.dump(h.state))  # the index is rebuilt on load
        invariants.check_invariants(restored)
        check_listings(restored, rng)
    except AssertionError as exc:
        raise AssertionError(f"job index diverged; replay with SIM_SEED={seed}: {exc}") from exc
    assert forgotten > 0 and h.state.jobs, f"seed {seed}: the walk forgot nothing or kept nothing"

