"""etcd side of `scripts/bench peers` (the submit rows only): run with raftsched's virtualenv as
`python -m peerbench.etcd_runner PLAN_JSON`.

Starts 3 etcd members (Debian's etcd-server 3.4) on 127.0.0.1 with ephemeral ports and data dirs
in the run's temp dir, finds the leader with `etcdctl endpoint status`, and measures v3 KV puts
against it over gRPC: sequential p50/p99, then puts/s at 16 and at 64 in flight from 2 client
processes (the same shape as raftsched's submits). Prints one result line and stops the members.

The client is grpcio (already in raftsched's virtualenv) calling `/etcdserverpb.KV/Put` with a
hand-encoded PutRequest (key = field 1, value = field 2, both bytes; the answer is not decoded):
the `etcd3` package on PyPI is unmaintained and its generated code needs protobuf 3, and Debian's
etcd-client ships etcdctl but not etcd's `benchmark` tool. One process, one request per call,
as raftsched's client does.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from . import workloads
from .processes import HOST, Supervisor, free_port, log, raise_on_sigterm, reporting, wait_until
from .protocol import Figures, Plan, emit, run_each
from .stats import pct
from .submitters import START_TIMEOUT_S, concurrent_rate

MEMBERS = 3
READY_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 5.0
ETCDCTL_TIMEOUT_S = 10.0
PUT_METHOD = "/etcdserverpb.KV/Put"
VALUE_BYTES = 256
"""About the size of the 1-task job spec raftsched's submit rows send."""


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def put_request(key: bytes, value: bytes) -> bytes:
    """etcdserverpb.PutRequest{key, value} in protobuf wire form."""
    return b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(value)) + value


class Members:
    """3 etcd members, started by `supervisor` (which stops them)."""

    def __init__(self, supervisor: Supervisor, directory: Path) -> None:
        self.supervisor = supervisor
        self.directory = directory
        self.client_ports = [free_port() for _ in range(MEMBERS)]
        self.peer_ports = [free_port() for _ in range(MEMBERS)]
        self.endpoints = [f"{HOST}:{port}" for port in self.client_ports]

    def start(self) -> None:
        cluster = ",".join(f"m{i}=http://{HOST}:{port}" for i, port in enumerate(self.peer_ports))
        for index in range(MEMBERS):
            client = f"http://{self.endpoints[index]}"
            peer = f"http://{HOST}:{self.peer_ports[index]}"
            self.supervisor.start(f"etcd-m{index}", [
                "etcd", "--name", f"m{index}", "--data-dir", str(self.directory / f"m{index}"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"peerbench-{self.peer_ports[0]}",
                "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"])
        leader = wait_until(self._leader, READY_TIMEOUT_S, "an etcd leader", interval_s=0.2)
        log(f"etcd: {MEMBERS} members ready, leader {leader}")

    def _leader(self) -> str | None:
        """The client endpoint of the leader (None while there is none)."""
        self.supervisor.check_alive()
        done = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(self.endpoints), "endpoint", "status", "-w",
             "json"], capture_output=True, text=True, check=False, timeout=ETCDCTL_TIMEOUT_S,
            env={**os.environ, "ETCDCTL_API": "3"})
        if done.returncode != 0:
            return None
        for entry in json.loads(done.stdout):
            status = entry["Status"]
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                return str(entry["Endpoint"]).removeprefix("http://")
        return None

    def leader(self) -> str:
        found = self._leader()
        if found is None:
            raise RuntimeError("etcd has no leader")
        return found


def putter(endpoint: str) -> tuple[grpc.Channel, Callable[[bytes], Any]]:
    channel = grpc.insecure_channel(endpoint)
    return channel, channel.unary_unary(PUT_METHOD)


class Runner:
    def __init__(self, plan: Plan, members: Members) -> None:
        self.plan = plan
        self.members = members

    def table(self) -> dict[str, Callable[[], Figures]]:
        return {"submit": self.submit}

    def submit(self) -> Figures:
        leader = self.members.leader()
        channel, put = putter(leader)
        value = b"x" * VALUE_BYTES
        put(put_request(b"warm", value), timeout=CALL_TIMEOUT_S)
        count = workloads.scaled(workloads.SUBMIT_SEQUENTIAL, self.plan.scale, floor=20)
        latencies_ms = []
        for i in range(count):
            started = time.perf_counter()
            put(put_request(f"seq/{i}".encode(), value), timeout=CALL_TIMEOUT_S)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        channel.close()
        figures: Figures = {"sequential": count, "p50_ms": pct(latencies_ms, 0.5),
                            "p99_ms": pct(latencies_ms, 0.99), "leader": leader,
                            "processes": workloads.SUBMIT_PROCESSES}
        for in_flight in workloads.SUBMIT_IN_FLIGHT_LEVELS:
            threads = in_flight // workloads.SUBMIT_PROCESSES
            calls = workloads.per_thread(in_flight, self.plan.scale)
            figures[workloads.rate_key(in_flight)] = concurrent_rate(
                put_process, (leader, threads, calls), self.plan.phase_timeout_s)
        return figures


def put_process(args: tuple[str, int, int], barrier: Any, out: Any) -> None:
    """One client process: `threads` threads, each with its own channel, `per_thread` puts each
    (a channel per thread, as each raftsched submitting thread has its own client)."""
    endpoint, threads, per_thread = args
    value = b"x" * VALUE_BYTES
    putters = [putter(endpoint) for _ in range(threads)]
    for _, put in putters:
        put(put_request(b"warm", value), timeout=CALL_TIMEOUT_S)
    counter = itertools.count()
    barrier.wait(timeout=START_TIMEOUT_S)
    started = time.monotonic()

    def run(put: Callable[[bytes], Any]) -> None:
        for _ in range(per_thread):
            put(put_request(f"c/{next(counter)}".encode(), value), timeout=CALL_TIMEOUT_S)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, [put for _, put in putters]))
    out.put((started, time.monotonic(), threads * per_thread))
    for channel, _ in putters:
        channel.close()


def versions() -> dict[str, str]:
    done = subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=False,
                          timeout=ETCDCTL_TIMEOUT_S)
    first = done.stdout.splitlines()[0] if done.stdout else "?"
    return {"etcd": first.split(":")[-1].strip(), "grpcio": grpc.__version__}


def main() -> None:
    raise_on_sigterm()
    plan = Plan.from_argv(sys.argv)
    result: dict[str, Any] = {"system": "etcd", "versions": versions(),
                              "setup": f"{MEMBERS} members (v3 gRPC KV Put to the leader, "
                                       f"{VALUE_BYTES}-byte values)"}
    with tempfile.TemporaryDirectory(prefix="etcd-", dir=plan.workdir) as tmp:
        supervisor = Supervisor(Path(tmp))
        with reporting(result, supervisor):
            members = Members(supervisor, Path(tmp))
            members.start()
            result["workloads"] = run_each(plan, Runner(plan, members).table())
        emit(result)


if __name__ == "__main__":
    main()
