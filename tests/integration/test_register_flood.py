"""Integration (issue 21, findings 1 and 11): what one agent certificate can do through Register
on a real cluster over mutual TLS.

The probe: 100 Registers of 10,000 phantom "running" attempts each from one agent certificate
filled the global bound of kill directives in 6.8 s; a job cancelled on another cluster then
kept running, and the attacker's cluster could not be removed while its kills were pending. And
Register took an empty cluster id and capabilities with control characters."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched import procfs, rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.client.client import Client
from raftsched.replica.raft.applied_log import read_applied_log
from raftsched.state import commands as c
from tests.support.cluster import LocalCluster, running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLOOD_REGISTERS = 105
PHANTOMS_PER_REGISTER = 10_000
"""What the probe sent (100 x 10,000), and a little more: over a million distinct phantom
attempts, past the old global bound of kill directives (MAX_KILL_DIRECTIVES was 1,000,000)."""
KILL_DEADLINE_S = 2.0
"""A cancelled task's process is gone this soon after the cancel commits (the issue's bound)."""
CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        yield local


def _gateway(cluster: LocalCluster, cluster_id: str) -> tuple[grpc.Channel, Any]:
    """A channel to the leader holding an agent certificate for `cluster_id`, and its stub."""
    files = cluster.agent_tls(cluster_id)
    channel = tls.open_channel(cluster.grpc[cluster.wait_leader()], files, rpc.CHANNEL_OPTIONS)
    return channel, pb_grpc.AgentGatewayStub(channel)


def _phantoms(rng: random.Random, victim: tuple[str, str, int]) -> list[Any]:
    """Running attempts no scheduler ever placed on the attacker's cluster: random fences of
    made-up jobs, the victim's task with fences near its own, and the victim's very fence."""
    job_id, task_id, fence = victim
    known = [pb.KnownAttempt(job_id=job_id, task_id=task_id, fence=fence, running=True)]
    for i in range(PHANTOMS_PER_REGISTER - 1):
        if i % 100 == 0:
            known.append(pb.KnownAttempt(job_id=job_id, task_id=task_id,
                                         fence=fence + 1 + rng.randrange(1_000), running=True))
        else:
            known.append(pb.KnownAttempt(job_id=f"phantom-{rng.randrange(10**6)}", task_id="t",
                                         fence=rng.randrange(1, 2**62), running=True))
    return known


def _register(stub: Any, known: list[Any]) -> Any:
    return stub.Register(pb.RegisterRequest(cluster_id="mallory", incarnation=1,
                                            capacity=pb.Resources(), known=known),
                         timeout=CALL_TIMEOUT_S)


def _clusters(client: Client) -> dict[str, Any]:
    return {c.cluster_id: c for c in client.cluster_status().clusters}


def _running_task(cluster: LocalCluster, client: Client, pid_file: Path) -> tuple[str, int, int]:
    """A job pinned to east whose one task is a real process: (job id, fence, its pid)."""
    job_id = client.submit(
        "name: victim\ntasks:\n  - id: t\n    cluster: east\n    command: [sh, -c, "
        f"'echo $$ > {pid_file}; exec sleep 600']\n").job_id
    wait_until(lambda: client.list_tasks(job_id).tasks[0].state == "RUNNING" or None,
               "the victim's task to run on east", START_TIMEOUT_S)
    text: str = wait_until(lambda: pid_file.read_text().strip() if pid_file.exists() else None,
                           "the task to write its pid", START_TIMEOUT_S)
    pid = int(text)
    return job_id, client.list_tasks(job_id).tasks[0].fence, pid


def test_a_register_flood_of_phantom_attempts_leaves_another_clusters_kills_working(
        cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.add_agent("east", executor="subprocess", extra=("--task-user", ""))
    cluster.wait_clusters_ready("east")
    client = cluster.client()
    job_id, fence, pid = _running_task(cluster, client, tmp_path / "task.pid")
    stat = procfs.process_stat(pid)
    assert stat is not None
    rng = random.Random(21)
    channel, stub = _gateway(cluster, "mallory")
    stop = threading.Event()
    flood_errors: list[grpc.RpcError] = []

    def flood() -> None:
        known = _phantoms(random.Random(22), (job_id, "t", fence))
        while not stop.is_set():
            try:
                _register(stub, known)
            except grpc.RpcError as error:  # an election: the test's own checks decide
                flood_errors.append(error)
                stop.wait(0.1)

    flooder = threading.Thread(target=flood, name="flood", daemon=True)
    with channel:
        started = time.monotonic()
        for _ in range(FLOOD_REGISTERS):
            answer = _register(stub, _phantoms(rng, (job_id, "t", fence)))
        print(f"{FLOOD_REGISTERS} Registers of {PHANTOMS_PER_REGISTER:,} phantom attempts in "
              f"{time.monotonic() - started:.1f} s")
        assert len(answer.stop) == PHANTOMS_PER_REGISTER  # every one: "not ours, stop it"
        flooder.start()
        try:
            client.cancel(job_id, reason="the victim is cancelled during the flood")
            cancelled = time.monotonic()
            wait_until(lambda: not procfs.is_alive(pid, stat.start_ticks),
                       f"the cancelled task's process {pid} to die", KILL_DEADLINE_S)
            print(f"the cancelled task died {time.monotonic() - cancelled:.2f} s after the "
                  f"cancel committed, {len(flood_errors)} flood calls refused meanwhile")
            seen = _clusters(client)
            assert seen["mallory"].pending_kills == 0 and seen["mallory"].kills_unrecorded == 0
        finally:
            stop.set()
            flooder.join(CALL_TIMEOUT_S)
    wait_until(lambda: _clusters(client)["east"].pending_kills == 0 or None,
               "east's agent to confirm the kill", START_TIMEOUT_S)
    removed = cluster.cli("admin", "remove-cluster", "mallory", "--json")
    assert removed.returncode == 0, removed.stderr
    assert "mallory" not in _clusters(client) and _clusters(client)["east"].status == "READY"


@pytest.mark.parametrize(("cluster_id", "capabilities", "field"), [
    ("", ["linux"], "cluster_id: must use only letters"),
    ("east", ["linux", "gpu\x1b[31m"], "capabilities[1]: must use only"),
    ("east", ["\x1b]0;owned\x07"], "capabilities[0]: must use only"),
])
def test_a_register_with_a_bad_cluster_id_or_capability_is_refused_and_changes_nothing(
        cluster: LocalCluster, cluster_id: str, capabilities: list[str], field: str) -> None:
    cluster.add_agent("east")
    cluster.wait_clusters_ready("east")
    client = cluster.client()
    before = {c.cluster_id: list(c.capabilities) for c in client.cluster_status().clusters}
    channel, stub = _gateway(cluster, cluster_id)
    with channel, pytest.raises(grpc.RpcError) as refused:
        stub.Register(pb.RegisterRequest(cluster_id=cluster_id, incarnation=2,
                                         capabilities=capabilities,
                                         capacity=pb.Resources(cpu_milli=1000, memory_mb=64)),
                      timeout=CALL_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or ""), refused.value.details()
    after = {c.cluster_id: list(c.capabilities) for c in client.cluster_status().clusters}
    assert after == before == {"east": ["linux"]}
    status = _clusters(client)["east"]
    assert status.incarnation == 1 and status.status == "READY"
    cluster.wait_all_applied()  # a follower may not have applied east's own register yet
    seen = []
    for i in range(len(cluster.replicas)):  # refused before it was proposed: not in the log
        registers = [(command.cluster_id, command.incarnation)
                     for command in _commands(cluster.applied_log(i))
                     if isinstance(command, c.ClusterRegister)]
        # east's own register only (a follower that caught up from a snapshot has none)
        assert registers in ([("east", 1)], []), (i, registers)
        seen += registers
    assert seen, "no replica's applied log holds east's own register"


def _commands(path: Path) -> list[c.Command]:
    if not path.exists():
        return []
    return [c.decode(entry) for entry in read_applied_log(str(path)).entries.values() if entry]
