"""Dask distributed side of `scripts/bench peers`: run with .venv-peers as
`python -m peerbench.dask_runner PLAN_JSON`.

A `dask scheduler` and 2 `dask worker` processes (8 threads each, no nanny) on 127.0.0.1; every
task is `peer_tasks.sleep_ms` (time.sleep) or `peer_tasks.noop`, and each job or DAG goes to the
scheduler as one graph whose tasks take their upstream results as arguments, so Dask orders
them by the same DAG. Prints one result line.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from distributed import Client, Future, wait

from . import workloads
from .peer_tasks import noop, sleep_ms
from .processes import HOST, Supervisor, Timeout, free_port, log, raise_on_sigterm, reporting
from .protocol import Figures, Plan, emit, run_each
from .workloads import Node

READY_TIMEOUT_S = 60.0
_keys = itertools.count()


def dask_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


def start(supervisor: Supervisor, port: int) -> None:
    supervisor.start("dask-scheduler", dask_command(
        "scheduler", "--host", HOST, "--port", str(port), "--no-dashboard"))
    for index in range(workloads.WORKERS):
        supervisor.start(f"dask-worker{index}", dask_command(
            "worker", f"tcp://{HOST}:{port}", "--host", HOST, "--name", f"worker{index}",
            "--nthreads", str(workloads.SLOTS_PER_WORKER), "--no-nanny", "--no-dashboard"))


def submit_dag(client: Client, name: str, nodes: list[Node],
               body: Callable[..., Any] = sleep_ms) -> list[Future[Any]]:
    """The whole DAG as one graph in one call, as raftsched gets a whole job in one submit:
    each node a task whose arguments name its upstream keys (unique keys per run)."""
    run = next(_keys)
    key = {node.id: f"{name}-{run}-{node.id}" for node in nodes}
    graph: dict[str, tuple[Any, ...]] = {}
    for node in nodes:
        upstream = tuple(key[dep] for dep in node.deps)
        args = (node.duration_ms, *upstream) if body is sleep_ms else upstream
        graph[key[node.id]] = (body, *args)
    futures: list[Future[Any]] = client.get(graph, list(graph), sync=False)
    return futures


def wait_all(futures: list[Future[Any]], timeout_s: float) -> float:
    """perf_counter when every future is done; raises if one failed or the wait timed out."""
    done, not_done = wait(futures, timeout=timeout_s, return_when="ALL_COMPLETED")
    finished = time.perf_counter()
    if not_done:
        raise Timeout(f"{len(not_done)} tasks not finished after {timeout_s:g} s")
    failed = [f for f in done if f.status != "finished"]
    if failed:
        raise RuntimeError(f"{len(failed)} tasks failed, e.g. {failed[0].key}")
    return finished


class Runner:
    def __init__(self, plan: Plan, client: Client) -> None:
        self.plan = plan
        self.client = client

    def table(self) -> dict[str, Callable[[], Figures]]:
        return {"capacity": self.capacity, "layered": self.layered, "fanout": self.fanout,
                "noop": self.noop, "submit": self.submit}

    def makespan(self, name: str, nodes: list[Node]) -> float:
        started = time.perf_counter()
        futures = submit_dag(self.client, name, nodes)
        finished = wait_all(futures, self.plan.phase_timeout_s)
        self.client.cancel(futures)  # release results
        return finished - started

    def capacity(self) -> Figures:
        return {"makespan_s": self.makespan("capacity", workloads.capacity(self.plan.scale))}

    def layered(self) -> Figures:
        makespans = [self.makespan("layered", nodes)
                     for nodes in workloads.layered_dags(self.plan.seed, self.plan.scale)]
        return {"makespan_s": sum(makespans), "per_dag_s": makespans}

    def fanout(self) -> Figures:
        nodes = workloads.fanout(self.plan.seed, self.plan.scale)
        return {"makespan_s": self.makespan("fanout", nodes)}

    def noop(self) -> Figures:
        tasks = workloads.scaled(workloads.NOOP_WIDE_TASKS, self.plan.scale)
        started = time.perf_counter()
        futures = self.client.map(noop, range(tasks), key=[f"wide-{i}" for i in range(tasks)])
        wide_s = wait_all(futures, self.plan.phase_timeout_s) - started
        self.client.cancel(futures)
        jobs = workloads.scaled(workloads.NOOP_JOBS, self.plan.scale)
        started = time.perf_counter()
        futures = [f for _ in range(jobs)
                   for f in submit_dag(self.client, "job", workloads.small_job(), noop)]
        many_s = wait_all(futures, self.plan.phase_timeout_s) - started
        self.client.cancel(futures)
        return {"wide_tasks": tasks, "wide_tasks_per_s": tasks / wide_s,
                "jobs": jobs, "many_tasks_per_s": jobs * workloads.NOOP_TASKS_PER_JOB / many_s}

    def submit(self) -> Figures:
        return {"note": "n/a: Client.submit is asynchronous (no acknowledged submit to time)"}


def versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in ("dask", "distributed")}


def main() -> None:
    raise_on_sigterm()
    plan = Plan.from_argv(sys.argv)
    result: dict[str, Any] = {"system": "dask", "versions": versions(),
                              "setup": f"dask scheduler + {workloads.WORKERS} workers "
                                       f"--nthreads {workloads.SLOTS_PER_WORKER} --no-nanny"}
    with tempfile.TemporaryDirectory(prefix="dask-", dir=plan.workdir) as tmp:
        supervisor = Supervisor(Path(tmp))
        with reporting(result, supervisor):
            port = free_port()
            start(supervisor, port)
            with Client(f"tcp://{HOST}:{port}", timeout=READY_TIMEOUT_S) as client:
                client.wait_for_workers(workloads.WORKERS, timeout=READY_TIMEOUT_S)
                log(f"dask: scheduler + {workloads.WORKERS} workers ready (port {port})")
                result["workloads"] = run_each(plan, Runner(plan, client).table())
        emit(result)


if __name__ == "__main__":
    main()
