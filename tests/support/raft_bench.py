"""Raft adapter figures on a 3-replica loopback cluster (printed, never asserted).

    .venv/bin/python tests/support/raft_bench.py [--sequential 500] [--pipelined 2000] [--trials 3]
                                         [--no-fsync]

- sequential propose latency p50/p99, measured inside the leader process (`bench_seq`);
- pipelined throughput: one `propose_many` of N entries inside the leader (`bench_pipe`);
- failover: kill -9 the leader, then time until a surviving replica accepts a proposal
  (polled every 10 ms through the control protocol), over several trials.
Also reports pysyncobj's "truncating already-applied" alarms and our journal counters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raft_harness import Cluster, ReplicaProcess

FAILOVER_POLL_S = 0.01
FAILOVER_TIMEOUT_S = 30.0
FAILOVER_PROPOSE_TIMEOUT_S = 0.25
"""Each probe's own propose timeout: a probe stuck on a deposed leader costs at most this."""


def accept_time_s(survivors: list[ReplicaProcess], job_id: str, started: float) -> float:
    """Seconds from `started` until one survivor accepts `job_id` (retrying the same id)."""
    deadline = started + FAILOVER_TIMEOUT_S
    while time.monotonic() < deadline:
        for replica in survivors:
            try:
                kind, _ = replica.request(f"submit {job_id} {FAILOVER_PROPOSE_TIMEOUT_S}",
                                          timeout_s=5)
            except OSError:
                continue
            if kind == "ok":
                return time.monotonic() - started
        time.sleep(FAILOVER_POLL_S)
    raise RuntimeError(f"no replica accepted a proposal within {FAILOVER_TIMEOUT_S} s")


def failover_trials(cluster: Cluster, trials: int) -> list[float]:
    times_s = []
    for trial in range(trials):
        leader = cluster.wait_leader()
        survivors = [r for r in cluster.replicas if r is not leader]
        cluster.wait_converged()
        started = time.monotonic()
        leader.kill()
        times_s.append(accept_time_s(survivors, f"failover-{trial}", started))
        leader.start()
        cluster.wait_converged(timeout_s=30)
    return times_s


def journal_counters(cluster: Cluster) -> list[dict[str, Any]]:
    out = []
    for replica in cluster.alive():
        status = replica.status()
        out.append({"replica": replica.address, "alarms": status["library_alarms"],
                    "replication": status["replication"],
                    **{k: status["durability"][k] for k in
                       ("data_syncs", "readopted", "skipped_compactions", "unsynced_applies")}})
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequential", type=int, default=500)
    parser.add_argument("--pipelined", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep the replica logs")
    args = parser.parse_args(argv)
    extra = ["--no-fsync"] if args.no_fsync else []
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as scratch:
        cluster = Cluster(Path(args.keep or scratch), 3, extra_args=extra)
        try:
            cluster.start()
            leader = cluster.wait_leader()
            leader.ok("bench_seq 50")  # warm-up
            sequential = leader.ok(f"bench_seq {args.sequential}")
            pipelined = [leader.ok(f"bench_pipe {args.pipelined}", timeout_s=120)
                         for _ in range(3)]
            cluster.wait_converged(timeout_s=60)
            counters = journal_counters(cluster)
            failovers_s = failover_trials(cluster, args.trials)
            truncations = cluster.truncations()
        finally:
            cluster.close()
    report = {
        "fsync": not args.no_fsync,
        "sequential": sequential,
        "pipelined": pipelined,
        "failover_s": {"trials": [round(t, 3) for t in failovers_s],
                       "median": round(statistics.median(failovers_s), 3)},
        "journal": counters,
        "truncating_already_applied_log_lines": truncations,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
