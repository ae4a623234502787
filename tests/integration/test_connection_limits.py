"""Integration: connections that never authenticate, on a real replica process (mutual TLS, the
dev certificates). The probe held 1,000 half-done TLS ClientHellos on the gRPC port for 25 s and
more; now grpc closes them past the replica's --handshake-timeout-s
(`grpc.server_handshake_timeout_ms`) and closes one past --max-grpc-connections at accept
(`grpc.max_allowed_incoming_connections`), while an authenticated connection, idle or holding a
watch, is never cut. The Raft port of the same process closes a silent connection too, and
/metrics counts it. (The Raft port's caps per address: tests/integration/test_raft_node.py.)"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftsched import rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.dev.ports import port_open
from tests.support import raw_sockets
from tests.support.cluster import START_TIMEOUT_S, LocalCluster, free_port, with_token
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

HANDSHAKE_TIMEOUT_S = 3.0
"""The replica's --handshake-timeout-s here (limits.HANDSHAKE_TIMEOUT_S by default)."""
MAX_CONNECTIONS = 24
"""The replica's --max-grpc-connections here (limits.MAX_GRPC_CONNECTIONS by default)."""
OVER_CAP = 4
CLOSE_SLACK_S = 10.0
"""How long after its deadline a connection may still be open on a busy machine."""
CALL_TIMEOUT_S = 10.0
JOB = 'name: watched\nallow_unschedulable: true\ntasks:\n  - {id: t, command: ["true"]}\n'


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[tuple[LocalCluster, int]]:
    """One replica (it leads alone) and its metrics port. Started without LocalCluster's leader
    probes, which open a client per poll: past --max-grpc-connections they would lock it out."""
    metrics_port = free_port()
    flags = ["--handshake-timeout-s", str(HANDSHAKE_TIMEOUT_S),
             "--max-grpc-connections", str(MAX_CONNECTIONS), "--metrics-port", str(metrics_port)]
    local = LocalCluster(tmp_path, replica_count=1, replica_flags=flags)
    try:
        local.replicas[0].start()
        address = local.grpc[0]
        wait_until(lambda: port_open(address), f"{address} to listen", START_TIMEOUT_S)
        probe = local.client(retry_budget_s=START_TIMEOUT_S)
        wait_until(lambda: probe.cluster_status(address).leader == address, "the replica to lead",
                   START_TIMEOUT_S)
        probe.close()
        yield local, metrics_port
    except BaseException:
        print(local.logs())
        raise
    finally:
        local.close()


def test_half_open_tls_handshakes_are_closed_and_an_authenticated_watch_is_not(
        replica: tuple[LocalCluster, int]) -> None:
    cluster, _ = replica
    address = cluster.grpc[0]
    assert cluster.user_tls is not None and cluster.admin_token is not None
    channel = with_token(tls.open_channel(address, cluster.user_tls, rpc.CHANNEL_OPTIONS),
                         cluster.admin_token)
    states: list[grpc.ChannelConnectivity] = []
    channel.subscribe(states.append, try_to_connect=True)
    scheduler = pb_grpc.SchedulerStub(channel)
    job_id = scheduler.SubmitJob(pb.SubmitJobRequest(spec=JOB), timeout=CALL_TIMEOUT_S).job_id
    watch = scheduler.WatchJob(pb.WatchJobRequest(job_id=job_id), timeout=60.0)
    first = next(watch)
    assert first.job_id == job_id

    port = int(address.rsplit(":", 1)[1])
    with contextlib.ExitStack() as stack:
        opened = time.monotonic()
        socks = [stack.enter_context(raw_sockets.connect(
            port, send=raw_sockets.PARTIAL_CLIENT_HELLO if i % 2 else b""))
            for i in range(MAX_CONNECTIONS + OVER_CAP)]
        # Past the cap (the watch's connection counts too) they are closed at accept: long
        # before the deadline, while the others are still held.
        at_once = wait_until(lambda: (lambda closed: closed if len(closed) >= OVER_CAP else None)(
            [s for s in socks if not raw_sockets.is_open(s)]),
            f"{OVER_CAP} connections closed at accept", HANDSHAKE_TIMEOUT_S + CLOSE_SLACK_S)
        still_held = [s for s in socks if raw_sockets.is_open(s)]
        assert len(still_held) >= MAX_CONNECTIONS // 2, (len(at_once), len(still_held))
        # The authenticated connection is served while the half-open ones fill the cap.
        assert scheduler.GetJob(pb.GetJobRequest(job_id=job_id),
                                timeout=CALL_TIMEOUT_S).job_id == job_id
        for sock in still_held:
            raw_sockets.wait_closed(
                sock, opened + HANDSHAKE_TIMEOUT_S + CLOSE_SLACK_S - time.monotonic())
        held_s = time.monotonic() - opened
    assert held_s >= HANDSHAKE_TIMEOUT_S, f"closed after {held_s:.1f} s: before the deadline"

    # The watch's connection outlived the deadline idle, and still carries the watch.
    scheduler.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="done"),
                        timeout=CALL_TIMEOUT_S)
    assert next(watch).job_id == job_id
    watch.cancel()
    assert states.count(grpc.ChannelConnectivity.READY) == 1, states
    assert grpc.ChannelConnectivity.TRANSIENT_FAILURE not in states, states
    channel.close()
    # A new client connects again once the half-open ones are gone.
    assert cluster.client().cluster_status(address).leader == address


def test_a_silent_raft_connection_is_closed_and_counted_on_metrics(
        replica: tuple[LocalCluster, int]) -> None:
    cluster, metrics_port = replica
    raft_port = int(cluster.raft[0].rsplit(":", 1)[1])
    with raw_sockets.connect(raft_port, source="127.0.0.2") as silent:
        waited_s = raw_sockets.wait_closed(silent, HANDSHAKE_TIMEOUT_S + CLOSE_SLACK_S)
    assert waited_s >= HANDSHAKE_TIMEOUT_S - 0.5, waited_s
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                timeout=CALL_TIMEOUT_S) as response:
        text = response.read().decode()
    closed = {sample.labels["reason"]: sample.value
              for family in text_string_to_metric_families(text) for sample in family.samples
              if sample.name == "raftsched_raft_connections_closed_total"}
    assert closed == {"frame_too_large": 0, "over_cap": 0, "handshake_timeout": 1}
