"""A test helper process: runs one RaftNode and serves a line protocol on a loopback socket.

    python tests/support/raft_proc.py --address 127.0.0.1:7001 --peers 127.0.0.1:7002 \
        --data-dir /tmp/r1 --secret s3cret

Prints `ready <control port>` on stdout once the replica is up (or `error <CODE> <message>` and
exits 2). Each connection to the control port carries requests, one per line, each answered by
one line: `ok <json>`, `notleader <address or ->`, `unknown <message>` or `error <CODE> <message>`.

    propose <hex> [timeout_s]          submit <job id> [timeout_s]
    submit_many <prefix> <n> [timeout_s]   -> ok {"acked": [...], "unknown": n, "notleader": n}
    confirm [timeout_s]    status    digest    jobs    compact
    add <address> [timeout_s [catch_up_s]]    remove <address> [timeout_s]    transfer [timeout_s]
    bench_seq <n>    bench_pipe <n>    quit
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import socketserver
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from raftsched.errors import RaftschedError
from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown
from raftsched.replica.raft.node import RaftNode
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state.outcome import Applied, Outcome, Rejected

JOB_DOC: dict[str, Any] = {"name": "n", "allow_unschedulable": True,
                           "tasks": [{"id": "a", "command": ["true"]}]}
"""Raft-level tests register no compute cluster: the job waits, accepted."""
JOB_WIRE = doc_to_wire(JOB_DOC)
DEFAULT_TIMEOUT_S = 5.0


def submit_entry(job_id: str) -> bytes:
    return c.encode(c.JobSubmit(job_id, JOB_WIRE, int(time.time() * 1000)))


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Applied):
        return {"applied": dataclasses.asdict(outcome.result)}
    return {"rejected": outcome.code.value, "reason": outcome.reason}


class Replica:
    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self.handlers: dict[str, Callable[[list[str]], str]] = {
            "propose": self.propose, "submit": self.submit, "submit_many": self.submit_many,
            "confirm": self.confirm, "status": self.status, "digest": self.digest,
            "jobs": self.jobs, "compact": self.compact, "add": self.add, "remove": self.remove,
            "transfer": self.transfer, "bench_seq": self.bench_seq,
            "bench_pipe": self.bench_pipe,
        }

    def handle(self, line: str) -> str:
        words = line.split()
        if not words or words[0] not in self.handlers:
            return f"error INVALID_ARGUMENT unknown request {line!r}"
        try:
            return self.handlers[words[0]](words[1:])
        except NotLeader as exc:
            return f"notleader {exc.leader or '-'}"
        except OutcomeUnknown as exc:
            return f"unknown {exc.message}"
        except RaftschedError as exc:
            return f"error {exc.code.value} {exc.message}"

    def _propose(self, data: bytes, args: list[str]) -> str:
        timeout_s = float(args[0]) if args else DEFAULT_TIMEOUT_S
        return "ok " + json.dumps(outcome_json(self.node.propose(data, timeout_s)))

    def propose(self, args: list[str]) -> str:
        return self._propose(bytes.fromhex(args[0]), args[1:])

    def submit(self, args: list[str]) -> str:
        return self._propose(submit_entry(args[0]), args[1:])

    def submit_many(self, args: list[str]) -> str:
        prefix, count = args[0], int(args[1])
        timeout_s = float(args[2]) if len(args) > 2 else DEFAULT_TIMEOUT_S
        ids = [f"{prefix}{i}" for i in range(count)]
        results = self.node.propose_many([submit_entry(j) for j in ids], timeout_s)
        acked = [j for j, r in zip(ids, results, strict=True) if isinstance(r, Applied)]
        return "ok " + json.dumps({
            "acked": acked,
            "unknown": sum(isinstance(r, OutcomeUnknown) for r in results),
            "notleader": sum(isinstance(r, NotLeader) for r in results),
            "rejected": sorted({r.reason for r in results if isinstance(r, Rejected)})[:3],
        })

    def confirm(self, args: list[str]) -> str:
        timeout_s = float(args[0]) if args else DEFAULT_TIMEOUT_S
        return "ok " + json.dumps(self.node.is_leader_confirmed(timeout_s))

    def status(self, args: list[str]) -> str:
        return "ok " + json.dumps(self.node.status(include_digest=True).as_dict())

    def digest(self, args: list[str]) -> str:
        return "ok " + json.dumps(self.node.status().state_digest)

    def jobs(self, args: list[str]) -> str:
        return "ok " + json.dumps(self.node.read(lambda state: sorted(state.jobs)))

    def compact(self, args: list[str]) -> str:
        self.node.force_compaction()
        return "ok null"

    def add(self, args: list[str]) -> str:
        self.node.add_replica(args[0], float(args[1]) if len(args) > 1 else DEFAULT_TIMEOUT_S,
                              *(float(a) for a in args[2:3]))
        return "ok null"

    def remove(self, args: list[str]) -> str:
        self.node.remove_replica(args[0], float(args[1]) if len(args) > 1 else DEFAULT_TIMEOUT_S)
        return "ok null"

    def transfer(self, args: list[str]) -> str:
        timeout_s = float(args[0]) if args else DEFAULT_TIMEOUT_S
        return "ok " + json.dumps(self.node.transfer_leadership(timeout_s))

    def bench_seq(self, args: list[str]) -> str:
        """Sequential proposals measured inside the leader: latency percentiles in ms."""
        latencies_ms = []
        for i in range(int(args[0])):
            started = time.perf_counter()
            self.node.propose(submit_entry(f"seq-{time.time_ns()}-{i}"), DEFAULT_TIMEOUT_S)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        latencies_ms.sort()
        return "ok " + json.dumps({
            "count": len(latencies_ms),
            "p50_ms": statistics.median(latencies_ms),
            "p99_ms": latencies_ms[min(len(latencies_ms) - 1, int(len(latencies_ms) * 0.99))],
        })

    def bench_pipe(self, args: list[str]) -> str:
        """One propose_many of n entries measured inside the leader: entries per second."""
        count = int(args[0])
        entries = [submit_entry(f"pipe-{time.time_ns()}-{i}") for i in range(count)]
        started = time.perf_counter()
        results = self.node.propose_many(entries, 60.0)
        elapsed_s = time.perf_counter() - started
        applied = sum(isinstance(r, Applied) for r in results)
        return "ok " + json.dumps({"count": count, "applied": applied, "elapsed_s": elapsed_s,
                                   "per_s": applied / elapsed_s,
                                   "other": sorted({repr(r)[:80] for r in results
                                                    if not isinstance(r, Applied)})[:3]})


def serve(replica: Replica) -> None:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for raw in self.rfile:
                line = raw.decode().strip()
                if line == "quit":
                    self.wfile.write(b"ok null\n")
                    self.wfile.flush()
                    replica.node.close()
                    os._exit(0)
                self.wfile.write((replica.handle(line) + "\n").encode())
                self.wfile.flush()

    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        print(f"ready {server.server_address[1]}", flush=True)
        server.serve_forever()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--peers", default="")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--secret", default=None)
    parser.add_argument("--insecure-dev", action="store_true")
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--compaction-entries", type=int, default=None)
    parser.add_argument("--compaction-time-s", type=float, default=None)
    parser.add_argument("--handshake-timeout-s", type=float, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    tuning: dict[str, Any] = {"fsync": not args.no_fsync}
    if args.compaction_entries is not None:
        tuning["compaction_min_entries"] = args.compaction_entries
    if args.compaction_time_s is not None:
        tuning["compaction_min_time_s"] = args.compaction_time_s
    if args.handshake_timeout_s is not None:
        tuning["handshake_timeout_s"] = args.handshake_timeout_s
    try:
        node = RaftNode(args.address, [p for p in args.peers.split(",") if p], args.data_dir,
                        args.secret, insecure_dev=args.insecure_dev, **tuning)
    except RaftschedError as exc:
        print(f"error {exc.code.value} {exc.message}", flush=True)
        return 2
    serve(Replica(node))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
