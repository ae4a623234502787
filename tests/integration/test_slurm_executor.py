"""A compute cluster that is a real Slurm partition (`agent --executor slurm`): a private
slurmctld + slurmd + munged (tests/support/slurm.py) behind one agent of a real 3-replica
cluster. The agent advertises the partition's capacity; a DAG runs with every task as one Slurm
job (outputs readable with `task logs`, an exit code mapped to a failed task); a cancelled job
is `scancel`ed in Slurm; the agent killed with SIGKILL mid-task and restarted re-adopts the Slurm
job: one result, and no second Slurm job for the fence; a task that runs past its timeout_s
is cancelled in Slurm and TIMED_OUT (to the second, though Slurm's own limit counts minutes); a
leftover job tagged for the cluster with a fence the agent does not watch is cancelled. Skipped,
loudly, where Slurm cannot run."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, running
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

STATE_TIMEOUT_S = 90.0
DAG = """\
name: through-slurm
tasks:
  - {id: hello, command: [sh, -c, 'echo "hello from $RAFTSCHED_TASK_ID fence $RAFTSCHED_FENCE"']}
  - {id: fails, command: [sh, -c, 'echo oops >&2; exit 3'], depends_on: [hello],
     retry: {max_attempts: 1}}
"""
LONG = """\
name: long
tasks:
  - {id: nap, command: [sleep, "600"]}
"""
OVERRUN = """\
name: overrun
tasks:
  - {id: slow, command: [sleep, "600"], timeout_s: 3, retry: {max_attempts: 1}}
"""
SHORT_NAP = """\
name: short-nap
tasks:
  - {id: nap, command: [sh, -c, 'sleep 4; echo rested']}
"""


@pytest.fixture
def slurm() -> Iterator[LocalSlurm]:
    """In a short temp dir: slurmd's step sockets must fit in a socket path, and tmp_path is
    longer in a pytest-xdist worker (its base dir gains popen-gwN)."""
    with tempfile.TemporaryDirectory(prefix="rs-slurm-") as name, \
            local_slurm(Path(name) / "slurm") as local:
        yield local


@pytest.fixture
def cluster(tmp_path: Path, slurm: LocalSlurm,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))  # the agent's client commands find it
    with running(tmp_path / "cluster") as local:
        local.add_agent("hpc", executor="slurm", extra=("--slurm-partition", slurm.partition))
        local.wait_clusters_ready("hpc")
        yield local


def tasks_of(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    return {t.task_id: t for t in cluster.client(retry_budget_s=5).list_tasks(job_id).tasks}


def slurm_jobs_named(slurm: LocalSlurm, name: str) -> list[str]:
    """Slurm job ids with this job name, running or finished (squeue and the jobcomp log)."""
    queued = slurm.run("squeue", "-h", f"--name={name}", "-o", "%i").stdout.split()
    done = [line.split("JobId=")[1].split()[0] for line in
            (slurm.jobcomp.read_text().splitlines() if slurm.jobcomp.exists() else [])
            if f"Name={name} " in line]
    return sorted(set(queued) | set(done))


def test_a_dag_runs_through_slurm_with_outputs_and_exit_codes(cluster: LocalCluster,
                                                              slurm: LocalSlurm) -> None:
    status = json.loads(cluster.cli("admin", "status", "--json").stdout)
    hpc = {c["cluster"]: c for c in status["clusters"]}["hpc"]
    assert hpc["capacity"]["cpu_milli"] == 8_000  # the partition's cpus, read with sinfo
    client = cluster.client()
    job_id = client.submit(DAG).job_id
    wait_until(lambda: client.get_job(job_id).state in ("FAILED", "SUCCEEDED") or None,
               "the DAG to end", STATE_TIMEOUT_S)
    tasks = tasks_of(cluster, job_id)
    hello, fails = tasks["hello"], tasks["fails"]
    assert (hello.state, fails.state) == ("SUCCEEDED", "FAILED")
    assert fails.exit_code == 3
    fence = hello.fence
    assert slurm_jobs_named(slurm, f"rs-{fence}")  # it was a Slurm job
    out = cluster.cli("task", "logs", job_id, "hello")
    assert out.returncode == 0 and out.stdout == f"hello from hello fence {fence}\n", out.stderr
    err = cluster.cli("task", "logs", job_id, "fails", "--stream", "stderr")
    assert err.stdout == "oops\n", err.stderr


def test_a_cancelled_job_is_cancelled_in_slurm(cluster: LocalCluster, slurm: LocalSlurm) -> None:
    client = cluster.client()
    job_id = client.submit(LONG).job_id
    wait_until(lambda: tasks_of(cluster, job_id)["nap"].state == "RUNNING" or None,
               "the task to run in Slurm", STATE_TIMEOUT_S)
    fence = tasks_of(cluster, job_id)["nap"].fence
    (slurm_id,) = slurm_jobs_named(slurm, f"rs-{fence}")
    client.cancel(job_id)
    wait_until(lambda: slurm.job(slurm_id).get("JobState") == "CANCELLED" or None,
               "Slurm to cancel the job", STATE_TIMEOUT_S)
    wait_until(lambda: client.get_job(job_id).state == "CANCELLED" or None,
               "the job to be CANCELLED", STATE_TIMEOUT_S)


def test_an_agent_killed_mid_task_re_adopts_its_slurm_job(cluster: LocalCluster,
                                                          slurm: LocalSlurm) -> None:
    client = cluster.client()
    job_id = client.submit(SHORT_NAP).job_id
    wait_until(lambda: tasks_of(cluster, job_id)["nap"].state == "RUNNING" or None,
               "the task to run in Slurm", STATE_TIMEOUT_S)
    fence = tasks_of(cluster, job_id)["nap"].fence
    agent = cluster.agents["hpc"]
    agent.kill()  # SIGKILL while Slurm runs the job
    agent.start()
    wait_until(lambda: client.get_job(job_id).state == "SUCCEEDED" or None,
               "the task to succeed after the agent's restart", STATE_TIMEOUT_S)
    nap = tasks_of(cluster, job_id)["nap"]
    assert nap.fence == fence and nap.attempts == 1  # one result
    assert len(slurm_jobs_named(slurm, f"rs-{fence}")) == 1  # no second Slurm job
    out = cluster.cli("task", "logs", job_id, "nap")
    assert out.stdout == "rested\n", out.stderr


def test_a_task_past_its_timeout_is_cancelled_in_slurm_and_timed_out(cluster: LocalCluster,
                                                                      slurm: LocalSlurm) -> None:
    client = cluster.client()
    job_id = client.submit(OVERRUN).job_id
    wait_until(lambda: client.get_job(job_id).state == "FAILED" or None,
               "the overrunning task to fail", STATE_TIMEOUT_S)
    (attempt,) = client.task_history(job_id, "slow").attempts
    assert attempt.state == "TIMED_OUT"
    (slurm_id,) = slurm_jobs_named(slurm, f"rs-{attempt.fence}")
    job = slurm.job(slurm_id)
    assert job.get("JobState") == "CANCELLED", job  # by the agent, long before Slurm's minute
    assert job.get("TimeLimit") == "00:01:00", job  # Slurm's own limit: the backstop


def test_a_leftover_job_of_the_cluster_is_cancelled_and_no_other(cluster: LocalCluster,
                                                                  slurm: LocalSlurm) -> None:
    """Jobs tagged for this cluster with a fence the agent does not watch (an attempt it gave
    up, a lost data dir) are stale: cancelled. Another cluster's job is left alone."""
    def sbatch(name: str, comment: str) -> str:
        done = slurm.run("sbatch", "--parsable", f"--partition={slurm.partition}",
                         f"--job-name={name}", f"--comment={comment}", "--output=/dev/null",
                         "--wrap=sleep 600")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]

    stale = sbatch("rs-987654", "raftsched hpc lost/task fence 987654")
    other = sbatch("rs-987655", "raftsched west some/task fence 987655")
    wait_until(lambda: slurm.job(stale).get("JobState") == "CANCELLED" or None,
               "the agent to cancel the stale job", STATE_TIMEOUT_S)
    assert slurm.job(other).get("JobState") in ("PENDING", "RUNNING")
    slurm.run("scancel", other)
