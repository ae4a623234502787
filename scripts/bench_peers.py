"""scripts/bench peers — raftsched against Dask distributed, Celery + Redis and etcd, in one run.

The same seeded workloads run on each system in turn (one at a time, on this machine's 2 cores,
everything on 127.0.0.1), each with 16 slots:
  raftsched  3 replicas + 2 agents, --executor mock --cpu 8 (tasks ask for 1 cpu)
  dask       a scheduler + 2 workers with 8 threads each
  celery     a private redis-server (broker and result backend) + 2 workers, thread pool of 8
  etcd       3 members of Debian's etcd-server 3.4 (the submit rows only: v3 KV puts to the
             leader over gRPC)
Task bodies: raftsched ["mock", "sleep_ms=N"]; Dask and Celery time.sleep(N / 1000).

Workloads (--only takes these names):
  capacity    2,000 independent 50 ms tasks: makespan, efficiency = (work / slots) / makespan
  layered     3 layered DAGs of 6 levels x 48 tasks, 2 parents each, 20-80 ms (seeded):
              makespan vs max(critical path, work / slots), and vs Dask
  fanout      root -> (64 -> join) x 3, 20-80 ms: makespan vs its bound and vs Dask
  noop        no-op tasks/s: one 10,000-task job; 1,000 jobs of 10 tasks
  submit      submit latency p50/p99 (sequential) and submits/s with 16 and 64 in flight from
              2 client processes (raftsched, etcd puts, Celery; Dask has no acknowledged submit)
  turnaround  raftsched only, from the capacity run (which it implies): the agents'
              raftsched_agent_slot_turnaround_seconds histogram when exported, and an estimate
              from the committed attempt history
It prints raw figures and the ratio raftsched / peer for each, then issue 24's targets, each
judged (MET / NOT MET / n/a) on this run's figures.

How long: --scale 0.5 took about a minute for all four systems on this 2-core machine
(2026-12-04; etcd's submit rows a few seconds of it), plus a one-time install of the peers into
.venv-peers (~1 minute) and of redis-server, etcd-server and etcd-client (apt).
Every wait is bounded (--phase-timeout-s each, a bound per runner), every process started is
stopped, also on failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "scripts" / "lib"
sys.path.insert(0, str(LIB))

from peerbench import table, workloads  # noqa: E402
from peerbench.protocol import Plan, parse_result  # noqa: E402

DEFAULT_SEED = 1
DEFAULT_PHASE_TIMEOUT_S = 600.0
RUNNER_SETUP_S = 180.0
"""Per runner, beyond its phases: starting and stopping the system under test."""
STOP_GRACE_S = 15.0
"""A runner told to stop gets this long to stop its own children before SIGKILL of its group."""
BUSY_LOAD_PER_CORE = 1.5
"""This benchmark alone keeps a load average of about 1-2.5 on 2 cores; more means other work."""
PEERS_PYTHON_ENV = "PEERBENCH_PEERS_PYTHON"
PEERS_PROBLEM_ENV = "PEERBENCH_PEERS_PROBLEM"
REDIS_PROBLEM_ENV = "PEERBENCH_REDIS_PROBLEM"
ETCD_PROBLEM_ENV = "PEERBENCH_ETCD_PROBLEM"
RUNNERS = {"raftsched": "peerbench.raftsched_runner", "dask": "peerbench.dask_runner",
           "celery": "peerbench.celery_runner", "etcd": "peerbench.etcd_runner"}
OWN_PYTHON = {"raftsched", "etcd"}
"""Runners that run in raftsched's virtualenv (etcd's needs only grpcio); the others in
.venv-peers."""


def loud(message: str) -> None:
    bar = "#" * 100
    print(f"{bar}\n# {message}\n{bar}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(workloads.NAMES), metavar="NAME[,NAME]",
                        help=f"workloads to run, of: {', '.join(workloads.NAMES)} (default: all)")
    parser.add_argument("--skip-peers", action="store_true",
                        help="run raftsched only (no Dask, no Celery, nothing installed)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="0.1..1: shrink task and job counts for a quick run (DAG levels "
                             "stay 1.5x wider than the slots)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--queue-depth", type=int, default=-1, metavar="N",
                        help="raftsched's agents' --queue-depth (late binding; 0: off; default: "
                             "the agent's own, max(1, cores // 10))")
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    parser.add_argument("--phase-timeout-s", type=float, default=DEFAULT_PHASE_TIMEOUT_S,
                        help="bound of each wait for one workload (default %(default)g)")
    args = parser.parse_args()
    args.workloads = selected(parser, args.only)
    if not workloads.MIN_SCALE <= args.scale <= workloads.MAX_SCALE:
        parser.error(f"--scale must be in {workloads.MIN_SCALE}..{workloads.MAX_SCALE}")
    return args


def selected(parser: argparse.ArgumentParser, only: str) -> tuple[str, ...]:
    names = {name.strip() for name in only.split(",") if name.strip()}
    unknown = names - set(workloads.NAMES)
    if unknown or not names:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(workloads.NAMES)}")
    if "turnaround" in names and "capacity" not in names:
        print("note: turnaround is read from the capacity run: running capacity too",
              file=sys.stderr)
        names.add("capacity")
    return tuple(name for name in workloads.NAMES if name in names)


def peer_systems(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """(peers to run, peer -> why it is skipped)."""
    if args.skip_peers:
        return [], {peer: "--skip-peers" for peer in table.PEERS}
    peers, skipped = python_peers()
    if "submit" not in args.workloads:
        skipped["etcd"] = "--only without submit (etcd runs the submit rows only)"
    elif problem := os.environ.get(ETCD_PROBLEM_ENV) or next(
            (f"{command} is not installed" for command in ("etcd", "etcdctl")
             if not shutil.which(command)), ""):
        skipped["etcd"] = problem
    else:
        peers.append("etcd")
    return peers, skipped


def python_peers() -> tuple[list[str], dict[str, str]]:
    """Dask and Celery: (to run, skipped with why)."""
    problem = os.environ.get(PEERS_PROBLEM_ENV) or (
        "" if Path(peers_python()).exists() else f"no {peers_python()}")
    if problem:
        return [], {peer: f"the peers' virtualenv: {problem}" for peer in ("dask", "celery")}
    redis_problem = os.environ.get(REDIS_PROBLEM_ENV) or (
        "" if shutil.which("redis-server") else "redis-server is not installed")
    if redis_problem:
        return ["dask"], {"celery": redis_problem}
    return ["dask", "celery"], {}


def peers_python() -> str:
    return os.environ.get(PEERS_PYTHON_ENV) or str(ROOT / ".venv-peers" / "bin" / "python")


def run_runner(system: str, plan: Plan) -> dict[str, Any]:
    """Run one system's runner in a session of its own; on a timeout, an error or Ctrl-C its
    whole process group is stopped. Returns its result (or an error)."""
    python = sys.executable if system in OWN_PYTHON else peers_python()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(LIB), os.environ.get("PYTHONPATH", "")]))}
    bound_s = RUNNER_SETUP_S + plan.phase_timeout_s * len(plan.workloads)
    print(f"== {system} (bounded by {bound_s:g} s)", file=sys.stderr, flush=True)
    runner = subprocess.Popen([python, "-m", RUNNERS[system], plan.to_json()], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        stdout, _ = runner.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        return {"system": system, "error": f"runner did not finish within {bound_s:g} s"}
    finally:
        stop_group(runner)
    return parse_result(stdout) or {"system": system,
                                    "error": f"runner exited {runner.returncode}, no result"}


def stop_group(runner: subprocess.Popen[str]) -> None:
    """SIGTERM the runner's group (its children too), SIGKILL what is left after the grace."""
    if runner.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            runner.wait(timeout=STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(runner.pid, signal.SIGKILL)  # whatever of the group outlived the runner
    runner.wait()


def print_report(args: argparse.Namespace, results: dict[str, Any], skipped: dict[str, str],
                 elapsed_s: float) -> None:
    print(f"\nraftsched vs peers: same seeded workloads, one system at a time on the same "
          f"{os.cpu_count()} cores, {workloads.SLOTS} slots each (scale {args.scale:g}, seed "
          f"{args.seed}, {elapsed_s:.0f} s)")
    for system in table.SYSTEMS:
        result = results.get(system)
        if result is None:
            print(f"  {system}: skipped: {skipped.get(system, 'not run')}")
            continue
        versions = ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items())
        before, after = result["load_1min"]
        print(f"  {system}: {result.get('setup', '?')} [{versions}]; load average (1 min) "
              f"{before:.1f} before, {after:.1f} after{noisy(before, after)}")
        if "error" in result:
            print(f"  {system}: FAILED: {result['error']}")
    print("  ratio columns: raftsched / peer (times: lower is better; rates: higher is better)\n")
    print(table.render(results, args.scale, args.seed))
    errors = [(system, name, figures["error"]) for system, result in results.items()
              for name, figures in result.get("workloads", {}).items() if "error" in figures]
    for system, name, error in errors:
        print(f"  error: {system} {name}: {error}")


def noisy(*loads: float) -> str:
    """A warning when the machine was busy with more than this benchmark (a shared machine)."""
    cores = os.cpu_count() or 1
    if max(loads) <= cores * BUSY_LOAD_PER_CORE:
        return ""
    return (f" -- BUSY (above {cores * BUSY_LOAD_PER_CORE:g}): other work may be sharing these "
            f"cores, figures are noisy")


def raise_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    raise_on_sigterm()
    args = parse_args()
    peers, skipped = peer_systems(args)
    for peer, reason in skipped.items():
        if reason != "--skip-peers" and not reason.startswith("--only"):
            loud(f"skipping {peer}: {reason}")
    started = time.monotonic()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-peers-") as workdir:
        plan = Plan(args.workloads, args.scale, args.seed, workdir, args.phase_timeout_s,
                    args.queue_depth)
        for system in ["raftsched", *peers]:
            load_before = os.getloadavg()[0]
            results[system] = run_runner(system, plan)
            results[system]["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    elapsed_s = time.monotonic() - started
    print_report(args, results, skipped, elapsed_s)
    if args.json:
        document = {"scale": args.scale, "seed": args.seed, "workloads": args.workloads,
                    "elapsed_s": elapsed_s, "skipped": skipped, "systems": results}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\ninterrupted: every process the benchmark started has been stopped",
              file=sys.stderr)
        sys.exit(130)
