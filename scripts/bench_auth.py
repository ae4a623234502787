"""What the identity check of one call costs a replica (raftsched/replica/identity.py), in one
process (figures: docs/benchmarks.md, `scripts/bench auth`).

1. `check_user` alone: a real State holding one token, read through a lock as the Raft node's
   apply lock (`RaftNode.read`), µs per call (the best of --repeat rounds of --calls calls).
2. The whole check of a real call (`IdentityCheck.admit`: the certificate's name and
   fingerprint, its revocation, the token) inside the handler of a mutual-TLS gRPC server on
   127.0.0.1, µs per check (best round), beside the whole call as the client sees it.
3. `check_user` while an applier thread holds the lock --apply-ms at a time with a 1 ms gap (a
   replica applying large entries back to back): p50 and p99 of one check's wall time.

Usage: scripts/bench auth [--calls N] [--repeat N] [--apply-ms MS]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import grpc

from raftsched import rpc, tls, tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.dev import pki
from raftsched.replica import identity
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord

T = TypeVar("T")
USER = tls.user_name("bench")
LIST_JOBS = "/raftsched.v1.Scheduler/ListJobs"
NO_CONTEXT: Any = None
"""check_user's call context: only a current read (an unknown token on a follower) uses it."""


class LockedState:
    """A state read as the Raft node reads its own (raft/node.py): `read` under the apply lock,
    `read_unlocked` without it."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.lock = threading.Lock()

    def read(self, fn: Callable[[State], T]) -> T:
        with self.lock:
            return fn(self.state)

    def read_unlocked(self, fn: Callable[[State], T]) -> T:
        return fn(self.state)

    def current_read(self, context: Any, fn: Callable[[State], T]) -> T:
        raise AssertionError("the bench's token is applied: no current read")

    def leads(self) -> bool:
        return True


def one_token() -> tuple[LockedState, tuple[tuple[str, str], ...]]:
    made = tokens.new_token()
    state = State()
    state.tokens[made.token_id] = TokenRecord(made.token_id, made.digest, ALL_TENANTS,
                                              Role.USER, 0, "bench")
    return LockedState(state), ((identity.AUTHORIZATION, f"{identity.BEARER}{made.token}"),)


def best_us(fn: Callable[[], object], calls: int, repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - started) / calls)
    return min(rounds) * 1e6


def bench_check_user(calls: int, repeat: int) -> None:
    reader, metadata = one_token()
    per_call = best_us(lambda: identity.check_user(identity.Rule.USER, USER, metadata, reader,
                                                   NO_CONTEXT), calls, repeat)
    print(f"check_user, one token in the state:          {per_call:7.2f} µs per call", flush=True)


@contextmanager
def tls_server(directory: Path, reader: LockedState, timings: list[float],
               checks: list[int]) -> Iterator[tuple[str, tls.TlsFiles]]:
    """A mutual-TLS server whose ListJobs runs the check `checks[0]` times and records the
    time per check in `timings`."""
    authority = pki.create_authority(directory)
    check = identity.IdentityCheck([pb.DESCRIPTOR.services_by_name["Scheduler"]], reader)

    def list_jobs(request: pb.ListJobsRequest, context: grpc.ServicerContext) -> Any:
        started = time.perf_counter()
        for _ in range(checks[0]):
            check.admit(identity.Rule.USER, "Scheduler.ListJobs", request, context)
        timings.append((time.perf_counter() - started) / checks[0])
        return pb.ListJobsResponse()

    class Handlers(grpc.GenericRpcHandler):  # type: ignore[misc]
        def service(self, details: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                list_jobs, request_deserializer=pb.ListJobsRequest.FromString,
                response_serializer=pb.ListJobsResponse.SerializeToString)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([Handlers()])
    port = server.add_secure_port(
        "127.0.0.1:0", pki.issue_replica(authority, []).server_credentials())
    server.start()
    try:
        yield f"127.0.0.1:{port}", pki.issue_user(authority, "bench")
    finally:
        server.stop(grace=None)


def bench_admit(calls: int, repeat: int) -> None:
    reader, metadata = one_token()
    timings: list[float] = []
    checks = [calls]
    with tempfile.TemporaryDirectory() as directory, \
            tls_server(Path(directory), reader, timings, checks) as (address, user):
        channel = tls.open_channel(address, user, rpc.CHANNEL_OPTIONS)
        call = channel.unary_unary(LIST_JOBS,
                                   request_serializer=pb.ListJobsRequest.SerializeToString,
                                   response_deserializer=pb.ListJobsResponse.FromString)
        call(pb.ListJobsRequest(), metadata=metadata)  # the handshake, outside the figures
        timings.clear()
        for _ in range(repeat):
            call(pb.ListJobsRequest(), metadata=metadata)
        print(f"the whole check of a mutual-TLS call (admit): {min(timings) * 1e6:7.2f} µs per "
              "call", flush=True)
        checks[0] = 1
        round_trips = []
        for _ in range(min(calls, 2_000)):
            started = time.perf_counter()
            call(pb.ListJobsRequest(), metadata=metadata)
            round_trips.append(time.perf_counter() - started)
        print(f"one such call, client to answer:             "
              f"{statistics.median(round_trips) * 1e6:7.0f} µs (median)", flush=True)
        channel.close()


def bench_contended(calls: int, apply_ms: float) -> None:
    reader, metadata = one_token()
    stop = threading.Event()

    def applier() -> None:
        while not stop.is_set():
            with reader.lock:
                time.sleep(apply_ms / 1e3)
            time.sleep(1e-3)

    thread = threading.Thread(target=applier, daemon=True)
    thread.start()
    walls = []
    try:
        for _ in range(calls):
            started = time.perf_counter()
            identity.check_user(identity.Rule.USER, USER, metadata, reader, NO_CONTEXT)
            walls.append(time.perf_counter() - started)
            time.sleep(1e-4)
    finally:
        stop.set()
        thread.join()
    walls.sort()
    print(f"check_user beside an applier holding the lock {apply_ms:g} ms at a time: "
          f"p50 {walls[len(walls) // 2] * 1e6:8.1f} µs, "
          f"p99 {walls[len(walls) * 99 // 100] * 1e6:8.1f} µs", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the best is shown")
    parser.add_argument("--apply-ms", type=float, default=2.0,
                        help="how long the contended case's applier holds the lock")
    args = parser.parse_args()
    bench_check_user(args.calls, args.repeat)
    bench_admit(args.calls, args.repeat)
    bench_contended(min(args.calls, 2_000), args.apply_ms)


if __name__ == "__main__":
    main()
