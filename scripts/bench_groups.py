"""`scripts/bench groups`: no-op throughput of one scheduler group against several, real
processes on this machine, in the same run (issue 27's last target: "total no-op throughput
beats one group's in the same run").

For each group count it starts `raftsched dev up --groups K` (3 replicas per group, plaintext
like `bench peers`) and adds 2 mock agents of 64 slots serving every group
(`dev add-agent`), submits JOBS jobs of 10 no-op tasks
from 16 threads through the client of every group (each job to its key's group), waits until
every job is terminal (reading ListJobs pages), reports tasks/s from the first submit to the
last completion, and stops the cluster (also on failure). Prints one line per K and the ratio
to one group.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raftsched.client.client import Client
from raftsched.client.groups import GroupedClient
from raftsched.spec.job import parse_spec_text
from raftsched.states import TERMINAL_JOB_STATE_NAMES

PHASE_TIMEOUT_S = 600.0
UP_TIMEOUT_S = 180.0
SUBMIT_THREADS = 16
AGENTS = 2
AGENT_CPUS = 64
"""Each agent's slots: enough that a freed slot's round trip does not bound the run."""


def _job(name: str) -> str:
    tasks = "\n".join(f"  - {{id: t{i}, command: [\"true\"]}}" for i in range(10))
    return f"name: {name}\ntasks:\n{tasks}\n"


def dev_json(*argv: str, timeout_s: float = UP_TIMEOUT_S + 30) -> dict[str, Any]:
    """`raftsched dev ARGV --json`'s document, waited for at most `timeout_s` (SystemExit with
    its stderr when it fails)."""
    done = subprocess.run([sys.executable, "-m", "raftsched", "dev", *argv, "--json"],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise SystemExit(f"raftsched dev {' '.join(argv)} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _client(groups: list[list[str]]) -> Any:
    clients = [Client(group, timeout_s=10, retry_budget_s=60) for group in groups]
    return clients[0] if len(clients) == 1 else GroupedClient(clients)


def wait_terminal(client: Any, count: int, timeout_s: float = PHASE_TIMEOUT_S) -> None:
    """Until at least `count` jobs are terminal (ListJobs' state counts), at most
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page = client.list_jobs(limit=1)
        done = sum(page.state_counts.get(state, 0) for state in TERMINAL_JOB_STATE_NAMES)
        if done >= count:
            return
        time.sleep(0.05)
    raise SystemExit(f"jobs not terminal after {timeout_s} s")


def run_once(groups: int, jobs: int, root: Path) -> float:
    directory = root / f"groups-{groups}"
    directory.mkdir()
    try:
        dev_json("up", "--dir", str(directory), "--groups", str(groups), "--agents", "0",
             "--executor", "mock", "--insecure-dev", "--timeout", str(UP_TIMEOUT_S))
        for index in range(AGENTS):  # wide ones: the groups, not the slots, are what is measured
            dev_json("add-agent", "--dir", str(directory), "--cluster-id", f"wide-{index}",
                 "--cpu", str(AGENT_CPUS), "--memory-mb", str(AGENT_CPUS * 1024),
                 "--executor", "mock", "--timeout", str(UP_TIMEOUT_S))
        from raftsched.dev import record

        state = record.load_state(directory)
        assert state is not None
        client = _client(state.groups or [state.servers])
        spec = parse_spec_text(_job("noop"))
        started = time.perf_counter()
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            list(pool.map(lambda i: client.submit_spec(spec, f"bench-{groups}-{i}"),
                          range(jobs)))
        wait_terminal(client, jobs)
        elapsed = time.perf_counter() - started
        client.close()
        return jobs * 10 / elapsed
    finally:
        subprocess.run([sys.executable, "-m", "raftsched", "dev", "down", "--dir",
                        str(directory)], capture_output=True, timeout=120, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench groups", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", default="1,2", help="group counts to compare (default 1,2)")
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs of 10 no-op tasks per run "
                                                                "(default 1,000)")
    args = parser.parse_args()
    counts = sorted({int(part) for part in args.groups.split(",")} | {1})
    if args.jobs < 1 or any(k < 1 or k > 4 for k in counts):
        parser.error("--jobs must be at least 1 and each group count 1..4")
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as root:
        for groups in counts:
            print(f"  {groups} group(s): {args.jobs:,} jobs of 10 no-op tasks ...", end="",
                  flush=True, file=sys.stderr)
            rates[groups] = run_once(groups, args.jobs, Path(root))
            print(f" {rates[groups]:,.0f} tasks/s", file=sys.stderr)
    for groups, rate in rates.items():
        print(f"{groups} group(s) x 3 replicas, {AGENTS} agents of {AGENT_CPUS} slots serving "
              f"all: {rate:8,.0f} no-op "
              f"tasks/s ({rate / rates[1]:.2f}x one group)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
