"""`raftsched dev up --slurm` end to end, through the real entry point (`python -m raftsched`): a
private single-node Slurm (munged, slurmctld, slurmd) recorded in DIR/cluster.json beside 3
replicas and 2 agents, cpu-east's agent in front of its partition. A job pinned to cpu-east
succeeds as a Slurm job (its attempt dir's slurm.json and Slurm's completion log name it
rs-FENCE, and its output is readable with `task logs`); `dev add-agent --executor slurm
--resources` adds a second Slurm agent with the partition's size and a custom resource; `dev
down` cancels, then stops the Slurm daemons by their recorded identities. Whatever a failure
leaves recorded is stopped by identity in a finally. Skipped, loudly, where Slurm cannot run
(not root, or slurm-wlm and munge not installed: scripts/test installs them as root)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched.dev import record
from raftsched.dev import slurm as private_slurm
from raftsched.dev.supervisor import log_tail, stop_all
from tests.support.cli import parsed_ok, run_cli
from tests.support.waiting import wait_until

pytest.importorskip("raftsched.replica.main")
pytest.importorskip("agent.main")

pytestmark = pytest.mark.integration

UP_TIMEOUT_S = 60.0
"""`dev up --timeout`: the private Slurm, a leader and every agent READY (about 6 s here)."""
COMMAND_TIMEOUT_S = 90.0
"""One CLI command's wall clock (`dev up` included)."""
JOB_TIMEOUT_S = 30.0
PINNED = """\
name: through-slurm
tenant: demo
tasks:
  - id: hello
    command: [sh, -c, 'echo "hello from Slurm job $SLURM_JOB_ID"']
    resources: {cpu: 0.5, memory_mb: 64}
    requires: [linux]
    cluster: cpu-east
    timeout_s: 60
"""


def raftsched(dev_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_cli(dev_dir, *argv, timeout_s=COMMAND_TIMEOUT_S, hidden=("SLURM_",))


parsed = parsed_ok


@pytest.fixture
def dev_dir() -> Iterator[Path]:
    """A short directory in the temp dir (slurmd's step sockets must fit in a socket path; not
    below pytest's 0700 base dir, which gpu-west's task account could not pass through) whose
    recorded processes are stopped, and which is removed, at the end whatever happened."""
    reason = private_slurm.slurm_available()
    if reason is not None:
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="rs-dev-"))
    try:
        yield directory
    finally:
        reap(directory)
        shutil.rmtree(directory, ignore_errors=True)


def reap(directory: Path) -> None:
    """`dev down`, then, by recorded identity, whatever it left recorded (it failed or timed
    out)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        raftsched(directory, "dev", "down")
    state = record.load_state(directory)
    if state is not None:
        stop_all(state.processes())
        if state.slurm is not None:
            private_slurm.stop_daemons(state.slurm.processes(), Path(state.slurm.conf))


def test_dev_up_slurm_runs_cpu_easts_tasks_as_slurm_jobs_and_down_stops_its_daemons(
        dev_dir: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    cluster = parsed(raftsched(dev_dir, "dev", "up", "--slurm", "--executor", "subprocess",
                               "--dir", str(dev_dir), "--timeout", str(UP_TIMEOUT_S), "--json"))
    up_s = time.monotonic() - started
    slurm = cluster["slurm"]
    assert [(d["name"], d["alive"]) for d in slurm["daemons"]] == [
        ("munged", True), ("slurmctld", True), ("slurmd", True)]
    agents = {agent["cluster"]: agent for agent in cluster["agents"]}
    east = agents["cpu-east"]
    assert (east["executor"], east["slurm_partition"], east["capabilities"], east["status"]) == (
        "slurm", slurm["partition"], ["linux"], "READY")
    assert agents["gpu-west"]["executor"] == "subprocess"
    state = record.load_state(dev_dir)
    assert state is not None and all(d.alive() for d in state.slurm_daemons())

    spec = tmp_path / "pinned.yaml"
    spec.write_text(PINNED)
    job_id = parsed(raftsched(dev_dir, "submit", str(spec), "--json"))["job_id"]
    job: dict[str, Any] = {}

    def ended() -> bool:
        job.update(parsed(raftsched(dev_dir, "job", "status", job_id, "--json")))
        return job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")

    wait_until(ended, lambda: f"job {job_id} is {job.get('state')}; cpu-east's log:\n"
                              + "\n".join(log_tail(east["log"])), JOB_TIMEOUT_S)
    assert job["state"] == "SUCCEEDED", job
    (hello,) = parsed(raftsched(dev_dir, "job", "tasks", job_id, "--json"))
    assert hello["cluster"] == "cpu-east"
    fence = hello["fence"]

    # It went through Slurm: the attempt dir records the Slurm job, Slurm logged its end.
    (record_file,) = [path for path in Path(east["data_dir"]).rglob("slurm.json")
                      if json.loads(path.read_text())["fence"] == fence]
    slurm_job = json.loads(record_file.read_text())["job_id"]
    jobcomp = Path(slurm["jobcomp"])
    wait_until(lambda: jobcomp.exists() and f"Name=rs-{fence} " in jobcomp.read_text(),
               lambda: f"no line for rs-{fence} in {jobcomp}", JOB_TIMEOUT_S)
    (line,) = [line for line in jobcomp.read_text().splitlines() if f"Name=rs-{fence} " in line]
    assert line.startswith(f"JobId={slurm_job} ") and "JobState=COMPLETED" in line, line
    logs = raftsched(dev_dir, "task", "logs", job_id, "hello")
    assert logs.stdout == f"hello from Slurm job {slurm_job}\n", logs.stderr

    # One more Slurm agent, on the dev cluster's own Slurm, with a custom resource.
    added = parsed(raftsched(dev_dir, "dev", "add-agent", "--cluster-id", "hpc", "--executor",
                             "slurm", "--slurm-partition", slurm["partition"], "--resources",
                             "lic=2", "--json"))
    assert {key: added[key] for key in ("status", "executor", "resources", "cpu",
                                        "capabilities")} == {
        "status": "READY", "executor": "slurm", "resources": {"lic": 2}, "cpu": 4,
        "capabilities": ["linux"]}
    status = parsed(raftsched(dev_dir, "admin", "status", "--json"))
    hpc = {c["cluster"]: c for c in status["clusters"]}["hpc"]
    assert hpc["capacity"]["cpu_milli"] == 4000 and hpc["custom"] == {"lic": 2}, hpc

    down = parsed(raftsched(dev_dir, "dev", "down", "--json"))
    assert [(s["name"], s["outcome"]) for s in down["stopped"]][-3:] == [
        ("slurmd", "stopped"), ("slurmctld", "stopped"), ("munged", "stopped")]
    assert not any(d.alive() for d in state.slurm_daemons())
    assert state.slurm is not None
    assert private_slurm.job_processes(Path(state.slurm.conf), set()) == []
    assert record.load_state(dev_dir) is None
    print(f"\ndev up --slurm ready in {up_s:.1f} s; the whole test "
          f"{time.monotonic() - started:.1f} s")
