"""Celery + Redis side of `scripts/bench peers`: run with .venv-peers as
`python -m peerbench.celery_runner PLAN_JSON`.

A private redis-server (no persistence) and 2 Celery workers (thread pool, concurrency 8) on
127.0.0.1. Independent tasks go as one `group` whose results come back through the Redis result
backend; DAGs go through the counters described in `celery_app`. Prints one result line.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import celery
import kombu
import redis
from celery import group

from . import celery_app, workloads
from .processes import (
    HOST,
    Supervisor,
    Timeout,
    free_port,
    log,
    raise_on_sigterm,
    reporting,
    wait_until,
)
from .protocol import Figures, Plan, emit, run_each
from .stats import pct
from .submitters import START_TIMEOUT_S, concurrent_rate
from .workloads import Node, children

READY_TIMEOUT_S = 60.0
PING_TIMEOUT_S = 1.0
_batches = itertools.count()


def start(supervisor: Supervisor, port: int, directory: Path) -> str:
    supervisor.start("redis-server", [
        "redis-server", "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no",
        "--dir", str(directory), "--protected-mode", "no"])
    url = f"redis://{HOST}:{port}/0"
    wait_until(lambda: _pings(url), READY_TIMEOUT_S, "redis-server")
    celery_bin = str(Path(sys.executable).parent / "celery")
    for index in range(workloads.WORKERS):
        supervisor.start(f"celery-worker{index}", [
            celery_bin, "-A", "peerbench.celery_app", "worker", "--pool", "threads",
            "--concurrency", str(workloads.SLOTS_PER_WORKER), "--hostname", f"worker{index}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "WARNING"], env={celery_app.URL_ENV: url})
    return url


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False


def wait_workers(supervisor: Supervisor) -> None:
    def answered() -> bool:
        supervisor.check_alive()
        return len(celery_app.app.control.ping(timeout=PING_TIMEOUT_S)) >= workloads.WORKERS
    wait_until(answered, READY_TIMEOUT_S, "celery workers")


def store_dag(pipe: Any, dag: str, nodes: list[Node]) -> None:
    below = children(nodes)
    pipe.hset(f"{dag}:ms", mapping={n.id: n.duration_ms for n in nodes})
    kids = {parent: ",".join(kids) for parent, kids in below.items() if kids}
    if kids:
        pipe.hset(f"{dag}:children", mapping=kids)
    waiting = {n.id: len(n.deps) for n in nodes if n.deps}
    if waiting:
        pipe.hset(f"{dag}:waiting", mapping=waiting)
    pipe.set(f"{dag}:left", len(nodes))


def run_dags(dags: list[list[Node]], timeout_s: float) -> float:
    """Store and start every DAG, then wait until each has pushed its id on the done list:
    seconds from the first write to the last DAG's end."""
    batch = f"pb{next(_batches)}"
    done_key = f"{batch}:done"
    redis_store = celery_app.store()
    started = time.perf_counter()
    pipe = redis_store.pipeline(transaction=False)
    for index, nodes in enumerate(dags):
        store_dag(pipe, f"{batch}:{index}", nodes)
    pipe.execute()
    for index, nodes in enumerate(dags):
        for node in nodes:
            if not node.deps:
                celery_app.dag_node.delay(f"{batch}:{index}", node.id, node.duration_ms,
                                          done_key)
    deadline = time.monotonic() + timeout_s
    for _ in dags:
        if not redis_store.blpop([done_key], timeout=max(1, round(deadline - time.monotonic()))):
            raise Timeout(f"DAGs of {batch} not finished after {timeout_s:g} s")
    return time.perf_counter() - started


def run_group(signatures: list[Any], timeout_s: float) -> float:
    started = time.perf_counter()
    group(signatures).apply_async().get(timeout=timeout_s)
    return time.perf_counter() - started


class Runner:
    def __init__(self, plan: Plan, url: str) -> None:
        self.plan = plan
        self.url = url

    def table(self) -> dict[str, Callable[[], Figures]]:
        return {"capacity": self.capacity, "layered": self.layered, "fanout": self.fanout,
                "noop": self.noop, "submit": self.submit}

    def capacity(self) -> Figures:
        nodes = workloads.capacity(self.plan.scale)
        signatures = [celery_app.sleep_ms.s(node.duration_ms) for node in nodes]
        return {"makespan_s": run_group(signatures, self.plan.phase_timeout_s)}

    def layered(self) -> Figures:
        makespans = [run_dags([nodes], self.plan.phase_timeout_s)
                     for nodes in workloads.layered_dags(self.plan.seed, self.plan.scale)]
        return {"makespan_s": sum(makespans), "per_dag_s": makespans}

    def fanout(self) -> Figures:
        nodes = workloads.fanout(self.plan.seed, self.plan.scale)
        return {"makespan_s": run_dags([nodes], self.plan.phase_timeout_s)}

    def noop(self) -> Figures:
        tasks = workloads.scaled(workloads.NOOP_WIDE_TASKS, self.plan.scale)
        wide_s = run_group([celery_app.noop.s(i) for i in range(tasks)],
                           self.plan.phase_timeout_s)
        jobs = workloads.scaled(workloads.NOOP_JOBS, self.plan.scale)
        many_s = run_dags([workloads.small_job() for _ in range(jobs)],
                          self.plan.phase_timeout_s)
        return {"wide_tasks": tasks, "wide_tasks_per_s": tasks / wide_s,
                "jobs": jobs, "many_tasks_per_s": jobs * workloads.NOOP_TASKS_PER_JOB / many_s}

    def submit(self) -> Figures:
        count = workloads.scaled(workloads.SUBMIT_SEQUENTIAL, self.plan.scale, floor=20)
        latencies_ms = []
        for _ in range(count):
            started = time.perf_counter()
            celery_app.noop_ignored.delay()
            latencies_ms.append((time.perf_counter() - started) * 1000)
        per_thread = workloads.scaled(workloads.SUBMIT_PER_THREAD, self.plan.scale, floor=5)
        threads = workloads.SUBMIT_IN_FLIGHT // workloads.SUBMIT_PROCESSES
        rate = concurrent_rate(submit_process, (self.url, threads, per_thread),
                               self.plan.phase_timeout_s)
        return {"sequential": count, "p50_ms": pct(latencies_ms, 0.5),
                "p99_ms": pct(latencies_ms, 0.99),
                "in_flight": threads * workloads.SUBMIT_PROCESSES,
                "processes": workloads.SUBMIT_PROCESSES, "submits_per_s": rate}


def submit_process(args: tuple[str, int, int], barrier: Any, out: Any) -> None:
    """One submitting process: `threads` threads, each sends `per_thread` tasks (apply_async
    returns once Redis has the message)."""
    url, threads, per_thread = args
    celery_app.configure(url)
    celery_app.noop_ignored.delay()  # connect
    barrier.wait(timeout=START_TIMEOUT_S)
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: [celery_app.noop_ignored.delay() for _ in range(per_thread)],
                      range(threads)))
    out.put((started, time.monotonic(), threads * per_thread))


def versions() -> dict[str, str]:
    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                            check=False, timeout=10).stdout.split()
    return {"celery": celery.__version__, "kombu": kombu.__version__,
            "redis-py": redis.__version__,
            "redis-server": next((w[2:] for w in server if w.startswith("v=")), "?")}


def main() -> None:
    raise_on_sigterm()
    plan = Plan.from_argv(sys.argv)
    result: dict[str, Any] = {"system": "celery", "versions": versions(),
                              "setup": f"redis-server + {workloads.WORKERS} celery workers "
                                       f"--pool threads --concurrency "
                                       f"{workloads.SLOTS_PER_WORKER}"}
    with tempfile.TemporaryDirectory(prefix="celery-", dir=plan.workdir) as tmp:
        supervisor = Supervisor(Path(tmp))
        with reporting(result, supervisor):
            url = start(supervisor, free_port(), Path(tmp))
            celery_app.configure(url)
            os.environ[celery_app.URL_ENV] = url  # for the submitting processes' imports
            wait_workers(supervisor)
            log(f"celery: redis-server + {workloads.WORKERS} workers ready ({url})")
            result["workloads"] = run_each(plan, Runner(plan, url).table())
        emit(result)


if __name__ == "__main__":
    main()
