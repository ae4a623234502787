"""raftsched side of `scripts/bench peers`: run with raftsched's virtualenv as
`python -m peerbench.raftsched_runner PLAN_JSON`.

Starts 3 replicas + 2 mock agents (8 slots each) through the `raftsched` command line, runs the
planned workloads through the public client, prints one result line, and stops everything.
"""

from __future__ import annotations

import json
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

from raftsched.client.client import Client
from raftsched.spec.job import parse_spec_text
from raftsched.states import TERMINAL_JOB_STATE_NAMES, JobStateName

from . import turnaround, workloads
from .processes import Supervisor, Timeout, raise_on_sigterm, reporting
from .protocol import Figures, Plan, emit, run_each
from .raftsched_cluster import AGENT_IDS, RaftschedCluster
from .stats import pct
from .submitters import START_TIMEOUT_S, concurrent_rate
from .workloads import Node

NOOP_CPU = 0.001
"""No-op tasks ask for this little cpu (and memory_mb 0), so slots never bind."""
SUBMIT_THREADS = 16
"""Threads submitting the 1,000 small jobs of the no-op workload."""
LIST_PAGE = 1_000
MAX_PAGES = 1_000
JOB_POLL_S = 0.05
TERMINAL = TERMINAL_JOB_STATE_NAMES


def job_spec(name: str, nodes: list[Node], cpu: float) -> str:
    """As JSON: generated jobs are large, and JSON parses faster than YAML."""
    def task(node: Node) -> dict[str, Any]:
        command = ["mock", f"sleep_ms={node.duration_ms}"] if node.duration_ms else ["mock"]
        return {"id": node.id, "command": command, "depends_on": list(node.deps),
                "resources": {"cpu": cpu, "memory_mb": 0}}
    return json.dumps({"name": name, "tasks": [task(node) for node in nodes]})


def wait_job(client: Client, job_id: str, timeout_s: float) -> tuple[float, Any]:
    """(perf_counter when the terminal state arrived, the job) through WatchJob, a push stream;
    on a timeout the job is cancelled (so it does not load the next workload) and Timeout
    raised."""
    arrived: queue.Queue[tuple[float, Any] | BaseException] = queue.Queue()

    def follow() -> None:
        try:
            last = None
            for job in client.watch(job_id):
                last = job
            arrived.put((time.perf_counter(), last))
        except BaseException as error:
            arrived.put(error)

    threading.Thread(target=follow, name=f"watch-{job_id}", daemon=True).start()
    try:
        item = arrived.get(timeout=timeout_s)
    except queue.Empty:
        client.cancel(job_id, "benchmark phase timed out")
        raise Timeout(f"job {job_id} not finished after {timeout_s:g} s") from None
    if isinstance(item, BaseException):
        raise item
    return item


def run_job(client: Client, name: str, nodes: list[Node], cpu: float,
            timeout_s: float) -> tuple[float, str]:
    """(makespan: the submit call to the terminal state seen by the client, job id)."""
    started = time.perf_counter()
    job_id = client.submit(job_spec(name, nodes, cpu)).job_id
    finished, job = wait_job(client, job_id, timeout_s)
    if job is None or job.state != JobStateName.SUCCEEDED:
        raise RuntimeError(f"job {name} ended {getattr(job, 'state', '?')}: "
                           f"{getattr(job, 'reason', '')}")
    return finished - started, job_id


def non_terminal(client: Client) -> set[str]:
    """Ids of every job still PENDING or RUNNING (one ListJobs page per 1,000 of them)."""
    ids: set[str] = set()
    for state in (JobStateName.PENDING, JobStateName.RUNNING):
        token = ""
        for _ in range(MAX_PAGES):
            page = client.list_jobs(state=state, limit=LIST_PAGE, page_token=token)
            ids |= {job.job_id for job in page.jobs}
            token = page.next_page_token
            if not token:
                break
    return ids


def wait_jobs(client: Client, job_ids: list[str], timeout_s: float) -> float:
    """perf_counter when none of `job_ids` is PENDING or RUNNING any more."""
    deadline = time.monotonic() + timeout_s
    ours = set(job_ids)
    while ours & non_terminal(client):
        if time.monotonic() > deadline:
            for job_id in ours & non_terminal(client):
                client.cancel(job_id, "benchmark phase timed out")
            raise Timeout(f"jobs not finished after {timeout_s:g} s")
        time.sleep(JOB_POLL_S)
    return time.perf_counter()


class Runner:
    def __init__(self, plan: Plan, cluster: RaftschedCluster) -> None:
        self.plan = plan
        self.cluster = cluster
        self.client = cluster.client()
        self.capacity_job = ""
        self.turnaround_metric: Figures = {}

    def table(self) -> dict[str, Callable[[], Figures]]:
        return {"capacity": self.capacity, "layered": self.layered, "fanout": self.fanout,
                "noop": self.noop, "submit": self.submit, "turnaround": self.turnaround}

    def capacity(self) -> Figures:
        nodes = workloads.capacity(self.plan.scale)
        makespan_s, self.capacity_job = run_job(self.client, "capacity", nodes, 1.0,
                                                self.plan.phase_timeout_s)
        # Read the agents' histogram now, before later workloads add to it.
        self.turnaround_metric = turnaround.from_agent_metrics(self.cluster.metrics_ports)
        return {"makespan_s": makespan_s}

    def layered(self) -> Figures:
        makespans = [run_job(self.client, f"layered-{i}", nodes, 1.0, self.plan.phase_timeout_s)[0]
                     for i, nodes in enumerate(workloads.layered_dags(self.plan.seed,
                                                                      self.plan.scale))]
        return {"makespan_s": sum(makespans), "per_dag_s": makespans}

    def fanout(self) -> Figures:
        nodes = workloads.fanout(self.plan.seed, self.plan.scale)
        return {"makespan_s": run_job(self.client, "fanout", nodes, 1.0,
                                      self.plan.phase_timeout_s)[0]}

    def noop(self) -> Figures:
        tasks = workloads.scaled(workloads.NOOP_WIDE_TASKS, self.plan.scale)
        wide_s, _ = run_job(self.client, "noop-wide", [Node(f"t{i}", 0) for i in range(tasks)],
                            NOOP_CPU, self.plan.phase_timeout_s)
        jobs = workloads.scaled(workloads.NOOP_JOBS, self.plan.scale)
        many_s = self._many_jobs(jobs)
        return {"wide_tasks": tasks, "wide_tasks_per_s": tasks / wide_s,
                "jobs": jobs, "many_tasks_per_s": jobs * workloads.NOOP_TASKS_PER_JOB / many_s}

    def _many_jobs(self, jobs: int) -> float:
        clients = [self.cluster.client() for _ in range(SUBMIT_THREADS)]
        nodes = workloads.small_job()
        started = time.perf_counter()
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            job_ids = list(pool.map(
                lambda i: clients[i % SUBMIT_THREADS].submit(
                    job_spec(f"many-{i}", nodes, NOOP_CPU)).job_id, range(jobs)))
        finished = wait_jobs(self.client, job_ids, self.plan.phase_timeout_s)
        for client in clients:
            client.close()
        return finished - started

    def submit(self) -> Figures:
        count = workloads.scaled(workloads.SUBMIT_SEQUENTIAL, self.plan.scale, floor=20)
        latencies_ms = []
        for i in range(count):
            started = time.perf_counter()
            self.client.submit(job_spec(f"seq-{i}", [Node("t", 0)], NOOP_CPU))
            latencies_ms.append((time.perf_counter() - started) * 1000)
        return {"sequential": count, "p50_ms": pct(latencies_ms, 0.5),
                "p99_ms": pct(latencies_ms, 0.99), **self._concurrent_submits(),
                **self._batch_submit()}

    def _batch_submit(self) -> Figures:
        """One SubmitJobs call of SUBMIT_BATCH_JOBS one-task jobs (each its own key): jobs/s from
        the call to its answer, every job committed. The specs are parsed before the clock
        starts, as a program holding its jobs would."""
        count = workloads.scaled(workloads.SUBMIT_BATCH_JOBS, self.plan.scale, floor=100)
        specs = [parse_spec_text(job_spec(f"batch-{i}", [Node("t", 0)], NOOP_CPU),
                                 source=f"batch-{i}") for i in range(count)]
        started = time.perf_counter()
        answers = self.client.submit_jobs(specs)
        elapsed = time.perf_counter() - started
        refused = [a for a in answers if isinstance(a, Exception)]
        if refused:
            return {"batch_error": f"{len(refused)} of {count} refused: {refused[0]}"}
        return {"batch_jobs": count, "batch_jobs_per_s": count / elapsed}

    def _concurrent_submits(self) -> Figures:
        """Submits/s at each level of workloads.SUBMIT_IN_FLIGHT_LEVELS (a client per thread)."""
        figures: Figures = {"processes": workloads.SUBMIT_PROCESSES}
        for in_flight in workloads.SUBMIT_IN_FLIGHT_LEVELS:
            threads = in_flight // workloads.SUBMIT_PROCESSES
            calls = workloads.per_thread(in_flight, self.plan.scale)
            figures[workloads.rate_key(in_flight)] = concurrent_rate(
                submit_process, (self.cluster.servers, threads, calls), self.plan.phase_timeout_s)
        return figures

    def turnaround(self) -> Figures:
        if not self.capacity_job:
            return {"error": "needs a finished capacity run (none in this run)"}
        estimate = turnaround.from_histories(self.client, self.capacity_job,
                                             workloads.SLOTS_PER_WORKER)
        return {**self.turnaround_metric, **estimate}


# --- concurrent submits from several processes ---------------------------------------------------

SubmitArgs = tuple[list[str], int, int]


def submit_process(args: SubmitArgs, barrier: Any, out: Any) -> None:
    """One submitting process: `threads` clients, each submits `per_thread` small jobs."""
    servers, threads, per_thread = args
    clients = [Client(servers) for _ in range(threads)]
    spec = job_spec("concurrent", [Node("t", 0)], NOOP_CPU)
    clients[0].submit(spec)  # connect, find the leader
    barrier.wait(timeout=START_TIMEOUT_S)
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda c: [c.submit(spec) for _ in range(per_thread)], clients))
    out.put((started, time.monotonic(), threads * per_thread))


def versions() -> dict[str, str]:
    return {"raftsched": metadata.version("raftsched"), "python": sys.version.split()[0]}


def main() -> None:
    raise_on_sigterm()
    plan = Plan.from_argv(sys.argv)
    with tempfile.TemporaryDirectory(prefix="raftsched-", dir=plan.workdir) as tmp:
        supervisor = Supervisor(Path(tmp))
        result: dict[str, Any] = {"system": "raftsched", "versions": versions(),
                                  "setup": f"3 replicas + {len(AGENT_IDS)} agents "
                                           f"--executor mock --cpu {workloads.SLOTS_PER_WORKER}"
                                           + (f" --queue-depth {plan.queue_depth}"
                                              if plan.queue_depth >= 0 else "")}
        with reporting(result, supervisor):
            cluster = RaftschedCluster(supervisor, Path(tmp), plan.queue_depth)
            cluster.start()
            result["workloads"] = run_each(plan, Runner(plan, cluster).table())
        emit(result)


if __name__ == "__main__":
    main()
