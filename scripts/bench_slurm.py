"""scripts/bench slurm — what the agent's Slurm executor adds on top of Slurm alone.

One private single-node Slurm (tests/support/slurm.py: munged, slurmctld, slurmd in a temp
dir; the node advertises --slots cpus), measured in one run, twice over:
  Slurm alone: `sbatch --wrap true` for each of --tasks jobs (1 cpu, 10 MB each), then until
               squeue is empty: makespan and tasks/s; and, one job at a time, submit → RUNNING
               (polling `scontrol show job`) for --probes jobs;
  raftsched:   3 replicas + one agent with --executor slurm in front of the same partition;
               one job of --tasks independent `true` tasks: makespan and tasks/s; and one
               single-task job at a time, submit → its Slurm job RUNNING for --probes jobs.
               (The scheduler calls an attempt RUNNING once sbatch has answered, while Slurm
               may still hold the job PENDING.)
Ratios are raftsched ÷ Slurm alone. The machine is shared by everything (2 cores): both sides
pay for the same controller. Every phase has a deadline; everything started is stopped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raftsched.states import JobStateName  # noqa: E402
from tests.support.cluster import LocalCluster  # noqa: E402
from tests.support.slurm import LocalSlurm, slurm_available  # noqa: E402

PHASE_TIMEOUT_S = 900.0
POLL_S = 0.05
MEMORY_MB = 10


def wait(condition: Callable[[], bool], what: str, timeout_s: float = PHASE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


def slurm_alone(slurm: LocalSlurm, tasks: int, probes: int) -> tuple[float, list[float]]:
    started = time.monotonic()
    for _ in range(tasks):
        slurm.run("sbatch", "--parsable", f"--mem={MEMORY_MB}M", "--cpus-per-task=1",
                  "--output=/dev/null", "--wrap=true", check=True)
    wait(lambda: not slurm.run("squeue", "-h", "-o", "%i").stdout.strip(), "squeue to empty")
    makespan = time.monotonic() - started
    latencies = []
    for _ in range(probes):
        t0 = time.monotonic()
        job_id = slurm.run("sbatch", "--parsable", f"--mem={MEMORY_MB}M", "--output=/dev/null",
                           "--wrap=sleep 1", check=True).stdout.strip().split(";")[0]
        wait(lambda job=job_id: slurm.job(job).get("JobState") in ("RUNNING", "COMPLETED"),
             f"job {job_id} to run")
        latencies.append(time.monotonic() - t0)
    wait(lambda: not slurm.run("squeue", "-h", "-o", "%i").stdout.strip(), "squeue to empty")
    return makespan, latencies


def through_raftsched(slurm: LocalSlurm, root: Path, tasks: int,
                      probes: int) -> tuple[float, list[float]]:
    import os

    os.environ["SLURM_CONF"] = str(slurm.conf)
    cluster = LocalCluster(root)
    try:
        cluster.start()
        cluster.add_agent("hpc", executor="slurm", extra=("--slurm-partition", slurm.partition))
        cluster.wait_clusters_ready("hpc")
        client = cluster.client(timeout_s=60, retry_budget_s=60)
        lines = [f"  - {{id: t{i}, command: [\"true\"], resources: {{cpu: 1, memory_mb: "
                 f"{MEMORY_MB}}}}}" for i in range(tasks)]
        spec = "name: wide\ntasks:\n" + "\n".join(lines) + "\n"
        started = time.monotonic()
        job_id = client.submit(spec).job_id
        ended = (JobStateName.SUCCEEDED, JobStateName.FAILED)
        wait(lambda: client.get_job(job_id).state in ended, "the wide job")
        makespan = time.monotonic() - started
        state = client.get_job(job_id).state
        if state != JobStateName.SUCCEEDED:
            raise SystemExit(f"the wide job ended {state}")
        latencies = []
        probe = ("name: probe\ntasks:\n  - {id: p, command: [sleep, \"1\"], "
                 f"resources: {{cpu: 1, memory_mb: {MEMORY_MB}}}}}\n")
        for _ in range(probes):
            t0 = time.monotonic()
            probe_id = client.submit(probe).job_id
            # The attempt is RUNNING for the scheduler once sbatch has answered; the task runs
            # once Slurm starts the job: wait for that, as for Slurm alone.
            wait(lambda job=probe_id: client.list_tasks(job).tasks[0].fence > 0,
                 f"probe {probe_id} to be placed")
            fence = client.list_tasks(probe_id).tasks[0].fence
            wait(lambda f=fence: _slurm_started(slurm, f"rs-{f}"), f"rs-{fence} to run")
            latencies.append(time.monotonic() - t0)
        return makespan, latencies
    finally:
        cluster.close()


def _slurm_started(slurm: LocalSlurm, name: str) -> bool:
    """The Slurm job named `name` runs (or already ran: it left squeue after being seen)."""
    states = slurm.run("squeue", "-h", f"--name={name}", "-o", "%T").stdout.split()
    if states:
        return states[0] in ("RUNNING", "COMPLETING")
    return slurm.jobcomp.exists() and f"Name={name} " in slurm.jobcomp.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500, help="short tasks in the wide phase")
    parser.add_argument("--probes", type=int, default=10,
                        help="one-at-a-time submit -> running measurements")
    parser.add_argument("--slots", type=int, default=16,
                        help="cpus the Slurm node advertises (jobs run at once)")
    args = parser.parse_args()
    reason = slurm_available()
    if reason is not None:
        raise SystemExit(f"cannot run: {reason}")
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-slurm-") as name:
        root = Path(name)
        with LocalSlurm(root / "slurm", cpus=args.slots,
                        memory_mb=args.slots * 1000) as slurm:
            print(f"raftsched slurm benchmark: a private Slurm node of {args.slots} cpus "
                  f"(ready in {slurm.startup_s or 0:.1f} s), {args.tasks} tasks of `true`, "
                  f"{args.probes} probes")
            alone, alone_lat = slurm_alone(slurm, args.tasks, args.probes)
            ours, ours_lat = through_raftsched(slurm, root / "cluster", args.tasks,
                                               args.probes)
    rows = [("Slurm alone (sbatch loop)", alone, alone_lat),
            ("raftsched --executor slurm", ours, ours_lat)]
    for label, makespan, latencies in rows:
        print(f"{label:28} makespan {makespan:7.1f} s  {args.tasks / makespan:7.1f} tasks/s  "
              f"submit -> running p50 {statistics.median(latencies):5.2f} s, "
              f"max {max(latencies):5.2f} s")
    print(f"ratio raftsched / Slurm alone: makespan {ours / alone:.2f}x, submit -> running p50 "
          f"{statistics.median(ours_lat) / statistics.median(alone_lat):.2f}x")


if __name__ == "__main__":
    main()
