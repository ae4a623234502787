"""Integration (issue 25): an `every: 1s` schedule on a real 3-replica cluster. Runs appear;
killing the leader (-9, three times) does not double-fire and leaves no time of the catch-up
window unfired; pause stops runs; resume does not fire the paused span. And the tenant rules."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from raftsched.client.client import Client
from raftsched.errors import Code
from raftsched.state.schedule_times import stamp
from tests.support.cluster import LocalCluster, code_of, plus_one, running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

EVERY_MS = 1_000
KILLS = 3
RUNS_TIMEOUT_S = 60.0
SCHEDULE = """
name: every1s
allow_unschedulable: true
schedule: {every: 1s, overlap: allow, catchup_window_s: 120}
tasks:
  - {id: a, command: [sh, -c, "true"], requires: [nowhere]}
"""


def _runs(cluster: LocalCluster) -> list[str]:
    page = cluster.client().list_jobs(query="every1s-", limit=1000)
    return sorted(job.job_id for job in page.jobs)


def _grid(job_ids: list[str]) -> list[str]:
    return [job_id.removeprefix("every1s-") for job_id in job_ids]


def _more_runs(cluster: LocalCluster, than: int) -> list[str] | None:
    runs = _runs(cluster)
    return runs if len(runs) > than else None


def test_an_every_1s_schedule_fires_once_per_time_across_leader_kills_and_a_pause(
        tmp_path: Path) -> None:
    spec = tmp_path / "every1s.yaml"
    spec.write_text(SCHEDULE)
    with running(tmp_path / "cluster") as cluster:
        created = cluster.cli("schedule", "create", str(spec), "--json")
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout) == {"schedule_id": "every1s", "created": True}
        runs = wait_until(lambda: _more_runs(cluster, 1), "two runs", RUNS_TIMEOUT_S)
        for kill in range(KILLS):
            runs = _kill_the_leader(cluster, kill, runs)
        _check_consecutive(runs)
        _pause_and_resume(cluster, tmp_path)


def _kill_the_leader(cluster: LocalCluster, kill: int, runs: list[str]) -> list[str]:
    """kill -9 the leader, wait for the next and two more runs, restart the killed replica
    (so that a majority stays for the next kill)."""
    old = cluster.wait_leader()
    cluster.replicas[old].kill()
    started = time.monotonic()
    wait_until(lambda: plus_one(_other_leader(cluster, old)), "a new leader", RUNS_TIMEOUT_S)
    print(f"kill {kill + 1}: new leader after {time.monotonic() - started:.1f} s")
    after = wait_until(lambda: _more_runs(cluster, len(runs) + 2), "runs after the kill",
                       RUNS_TIMEOUT_S)
    cluster.replicas[old].start()
    return after


def _check_consecutive(job_ids: list[str]) -> None:
    """One job per nominal time, and no time between the first and the last left out (the
    downtime is far inside the 120 s catch-up window)."""
    times = _grid(job_ids)
    assert len(times) == len(set(times))
    first_ms = _ms(job_ids[0])
    expected = [stamp(first_ms + k * EVERY_MS) for k in range(len(times))]
    assert times == expected, f"runs {times} are not every second from the first"


def _ms(job_id: str) -> int:
    moment = dt.datetime.strptime(job_id.removeprefix("every1s-"), "%Y%m%dT%H%M%SZ")
    return int(moment.replace(tzinfo=dt.UTC).timestamp() * 1000)


def _pause_and_resume(cluster: LocalCluster, tmp_path: Path) -> None:
    paused = cluster.cli("schedule", "pause", "every1s", "--note", "maintenance", "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout)["paused"] is True
    paused_ms = int(time.time() * 1000)
    before = _runs(cluster)
    # the paused span covers at least three fire times
    wait_until(lambda: time.time() * 1000 > paused_ms + 3 * EVERY_MS, "three intervals")
    resumed = cluster.cli("schedule", "resume", "every1s", "--json")
    assert resumed.returncode == 0, resumed.stderr
    resumed_ms = int(time.time() * 1000)
    after = wait_until(lambda: _more_runs(cluster, len(before)), "a run after resume",
                       RUNS_TIMEOUT_S)
    new = [job_id for job_id in after if job_id not in before]
    # Nothing of the paused span runs. In the replicated time (the leader's stamps, which may
    # lag this wall clock after leader changes: raftsched.clock.ProposalClock) the resume came
    # at least 3 intervals after the pause, and the pause after the last run before it: so
    # every later run is at least 3 intervals after that one.
    last_before = max(_ms(job_id) for job_id in before)
    assert all(_ms(job_id) >= last_before + 3 * EVERY_MS for job_id in new), \
        f"a run of the paused span (last before {last_before}, paused at {paused_ms}, " \
        f"resumed at {resumed_ms} on this clock): {new}"
    shown = cluster.cli("schedule", "show", "every1s", "--json")
    document = json.loads(shown.stdout)
    assert document["paused"] is False and len(document["next"]) == 10
    assert [run["job_id"] for run in document["runs"]] == sorted(
        (run["job_id"] for run in document["runs"]), reverse=True)
    assert len(after) == len(set(after))


def _other_leader(cluster: LocalCluster, old: int) -> int | None:
    index = cluster.leader_index()
    return None if index is None or index == old else index


HOURLY = """
name: hourly-{tenant}
tenant: {tenant}
allow_unschedulable: true
schedule: {{every: 1h}}
tasks:
  - {{id: a, command: [sh, -c, "true"], requires: [nowhere]}}
"""


def _as(cluster: LocalCluster, tenant: str) -> Client:
    token = cluster.client().create_token(tenant, "user", f"test {tenant}").token
    return cluster.client(token=str(token), retry_budget_s=5)


def test_a_tenants_token_neither_sees_nor_touches_another_tenants_schedules(
        tmp_path: Path) -> None:
    with running(tmp_path) as cluster:
        alpha, beta = _as(cluster, "alpha"), _as(cluster, "beta")
        assert alpha.create_schedule("a1", HOURLY.format(tenant="alpha")).created
        assert beta.create_schedule("b1", HOURLY.format(tenant="beta")).created
        for call in (lambda: beta.get_schedule("a1"), lambda: beta.set_schedule("a1", True),
                     lambda: beta.trigger_schedule("a1"), lambda: beta.delete_schedule("a1"),
                     lambda: beta.backfill_schedule("a1", 0, 3_600_000),
                     lambda: beta.get_schedule("no-such-schedule")):
            assert code_of(call) == Code.NOT_FOUND  # the same answer as for no such schedule
        assert [s.schedule_id for s in beta.list_schedules().schedules] == ["b1"]
        assert code_of(lambda: beta.list_schedules("alpha")) == Code.PERMISSION_DENIED
        assert code_of(lambda: beta.create_schedule(
            "b2", HOURLY.format(tenant="alpha"))) == Code.PERMISSION_DENIED
        assert alpha.get_schedule("a1").paused is False
        everyone = {s.schedule_id for s in cluster.client().list_schedules().schedules}
        assert everyone == {"a1", "b1"}
        run = alpha.trigger_schedule("a1").job_ids[0]
        assert run.startswith("a1-manual-") and alpha.get_job(run).tenant == "alpha"
