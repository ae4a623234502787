"""scripts/bench hops — where a submit's and a freed slot's time goes: a CPU profile of every
raftsched process (yappi, all threads) while it serves one kind of work at a time.

The same cluster as `scripts/bench peers` (3 replicas + 2 mock agents, 8 slots each,
--insecure-dev), every process run under `scripts/lib/peerbench/profiled.py`. Phases, each
profiled on its own (SIGUSR1 saves and restarts every process's profile between them):
  submit    N sequential SubmitJob calls of a 1-task no-op job, then 16 in flight from 2 client
            processes
  capacity  the capacity workload (independent 50 ms tasks on 16 slots), through which every
            freed slot passes from "finished" to "next attempt started"
First, in process and without the profiler, the agent's own hop (a slot frees -> the queued
attempt starts) over its real lmdb stores, both ways the core can take it (peerbench.agent_hop).
Then it prints, per phase, each process's CPU seconds by thread and the functions with the most CPU
(self time and cumulative), and the phase's figures (submit p50/p99 and submits/s, the agents'
slot-turnaround histogram) as measured under the profiler (slower than without it: read the
shares, not the absolute times). yappi is installed into .venv-profile (never into .venv).
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
sys.path.insert(0, str(ROOT))

from peerbench import agent_hop, turnaround, workloads  # noqa: E402
from peerbench.processes import Supervisor, log, raise_on_sigterm, wait_until  # noqa: E402
from peerbench.raftsched_cluster import RaftschedCluster  # noqa: E402
from peerbench.raftsched_runner import NOOP_CPU, job_spec, run_job, submit_process  # noqa: E402
from peerbench.stats import pct  # noqa: E402
from peerbench.submitters import concurrent_rate  # noqa: E402
from peerbench.workloads import Node  # noqa: E402

PHASES = ("submit", "capacity")
SAVE_TIMEOUT_S = 30.0
PHASE_TIMEOUT_S = 300.0
TOP = 18
WIDTH = 100


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench hops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submits", type=int, default=1_000,
                        help="sequential submits of the submit phase (default %(default)s)")
    parser.add_argument("--scale", type=float, default=0.5,
                        help="of the capacity workload, 0.1..1 (default %(default)s: 1,000 tasks)")
    parser.add_argument("--queue-depth", type=int, default=-1, metavar="N",
                        help="the agents' --queue-depth (default: theirs)")
    parser.add_argument("--top", type=int, default=TOP, help="functions listed per process")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: where the CPU goes; wall: how long each call took, waits "
                             "included (per call: cumulative / calls)")
    parser.add_argument("--agent-only", action="store_true",
                        help="only the agent's in-process hop (seconds; no cluster, no profiler)")
    args = parser.parse_args()
    os.environ["PEERBENCH_YAPPI_CLOCK"] = args.clock
    return args


def save_profiles(cluster: RaftschedCluster, supervisor: Supervisor, phase: int,
                  profile_dir: Path) -> None:
    """SIGUSR1 to every process; wait until each has written its `<name>.<phase>.pstat`."""
    for _, child in supervisor.children:
        child.send_signal(signal.SIGUSR1)
    names = [name for name, _ in supervisor.children]
    wait_until(lambda: all((profile_dir / f"{n}.{phase}.pstat").exists() for n in names),
               SAVE_TIMEOUT_S, f"profiles of phase {phase}")
    time.sleep(0.5)  # the .threads file is written right after the .pstat


def submit_phase(cluster: RaftschedCluster, count: int) -> dict[str, float]:
    client = cluster.client()
    spec = job_spec("hops", [Node("t", 0)], NOOP_CPU)
    latencies_ms = []
    for _ in range(count):
        started = time.perf_counter()
        client.submit(spec)
        latencies_ms.append((time.perf_counter() - started) * 1000)
    threads = 16 // workloads.SUBMIT_PROCESSES
    rate = concurrent_rate(submit_process, (cluster.servers, threads, count // 16),
                           PHASE_TIMEOUT_S)
    client.close()
    return {"submits": count, "p50_ms": pct(latencies_ms, 0.5),
            "p99_ms": pct(latencies_ms, 0.99), "submits_per_s_16": rate}


def capacity_phase(cluster: RaftschedCluster, scale: float) -> dict[str, float]:
    client = cluster.client()
    nodes = workloads.capacity(scale)
    makespan_s, _ = run_job(client, "capacity", nodes, 1.0, PHASE_TIMEOUT_S)
    client.close()
    metric = turnaround.from_agent_metrics(cluster.metrics_ports)
    return {"tasks": len(nodes), "makespan_s": makespan_s,
            "efficiency": workloads.lower_bound_s(nodes) / makespan_s,
            "turnaround_p50_ms": metric.get("metric_p50_ms") or float("nan"),
            "turnaround_p99_ms": metric.get("metric_p99_ms") or float("nan")}


def short(location: tuple[str, int, str]) -> str:
    path, line, name = location
    for marker in ("/raftsched/", "/agent/", "site-packages/", "lib/python3.11/"):
        if marker in path:
            path = path[path.index(marker) + len(marker):]
            break
    return f"{name} ({path}:{line})"[:WIDTH - 24]


def print_profile(profile_dir: Path, name: str, phase: int, top: int) -> None:
    threads = profile_dir / f"{name}.{phase}.threads"
    seconds = [float(line.rsplit(" ", 1)[1]) for line in threads.read_text().splitlines()
               if line.strip()]
    total = sum(seconds)
    print(f"\n  {name}: {total:.2f} s in {len(seconds)} threads; the busiest: "
          + ", ".join(f"{s:.2f}" for s in sorted(seconds, reverse=True)[:5]))
    stats = pstats.Stats(str(profile_dir / f"{name}.{phase}.pstat"))
    table = stats.stats  # type: ignore[attr-defined]
    by_self = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    by_total = sorted(table.items(), key=lambda kv: kv[1][3], reverse=True)[:top]
    print(f"    {'self s':>10} {'share':>6}  function (most self time first)")
    for location, (_, calls, self_s, _, _) in by_self:
        print(f"    {self_s:>10.3f} {self_s / total:>6.1%}  {short(location)} x{calls}")
    print(f"    {'cum s':>10} {'ms/call':>8}  function (most cumulative time first)")
    for location, (_, calls, _, cum_s, _) in by_total:
        print(f"    {cum_s:>10.3f} {cum_s / calls * 1000:>8.3f}  {short(location)} x{calls}")


def main() -> None:
    raise_on_sigterm()
    args = parse_args()
    hop = agent_hop.measure()
    print("agent, slot freed -> queued attempt started (in process, real lmdb, "
          f"{agent_hop.ROUNDS} x 3 each): two synced writes p50 {hop['two_writes_p50_ms']:.3f} "
          f"ms p99 {hop['two_writes_p99_ms']:.3f} ms; one write (collect_and_start) p50 "
          f"{hop['one_write_p50_ms']:.3f} ms p99 {hop['one_write_p99_ms']:.3f} ms", flush=True)
    if args.agent_only:
        return
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-hops-") as tmp:
        profile_dir = Path(tmp) / "profiles"
        profile_dir.mkdir()
        supervisor = Supervisor(Path(tmp))
        try:
            cluster = RaftschedCluster(supervisor, Path(tmp), args.queue_depth, profile_dir)
            cluster.start()
            leader = cluster.servers.index(cluster.wait_leader())
            save_profiles(cluster, supervisor, 0, profile_dir)  # start-up, not reported
            log("submit phase ...")
            figures["submit"] = submit_phase(cluster, args.submits)
            save_profiles(cluster, supervisor, 1, profile_dir)
            log("capacity phase ...")
            figures["capacity"] = capacity_phase(cluster, args.scale)
            save_profiles(cluster, supervisor, 2, profile_dir)
            report(figures, profile_dir, leader, args.top)
        finally:
            supervisor.stop_all()


def report(figures: dict[str, dict[str, float]], profile_dir: Path, leader: int,
           top: int) -> None:
    print(f"raftsched hop profile (yappi, {os.environ['PEERBENCH_YAPPI_CLOCK']} clock, every "
          f"thread; {os.cpu_count()} cores; figures are slower under the profiler)")
    for phase, name in enumerate(PHASES, start=1):
        shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures[name].items())
        print(f"\n== phase {name}: {shown}")
        processes = [f"replica{leader}"] + (["agent-east"] if name == "capacity" else [])
        for process in processes:
            print_profile(profile_dir, process, phase, top)


if __name__ == "__main__":
    main()
