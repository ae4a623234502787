"""Integration: what a submit may cost the replicas, on a real cluster of three over mutual TLS.

A YAML or JSON document is parsed by the leader in a thread beside its Raft thread, holding the
interpreter lock that thread needs: 22 MB of YAML held it ~10 s and cost the leadership every
time. The replicas now parse small documents only (limits.MAX_YAML_SPEC_BYTES,
MAX_JSON_SPEC_BYTES) and decode the wire form the CLI and the client send within bounds; a
submit the applied state would refuse for a queue limit is refused before it is proposed. Each
availability check reads every replica's Raft term before and after, once a later commit has
gone through (an election the stall caused would have raised it by then)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched import limits, rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.applied_log import read_applied_log
from raftsched.state.commands import JobSubmit, Tag, decode
from raftsched.state.policy import BACKPRESSURE_RETRY_AFTER_MS
from tests.support.cluster import START_TIMEOUT_S, LocalCluster, running, with_token
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALL_TIMEOUT_S = 60.0
"""A refusal comes in milliseconds; the bound only keeps a broken replica from hanging us."""
HUGE_YAML_BYTES = 22 * 1024 * 1024
"""The probe's spec: 22 MB of YAML forced an election 3 times in 3."""
BIG_YAML_BYTES = 10 * 1024 * 1024
"""A careless user's file: `raftsched submit` of 10 MB of YAML forced elections too."""
REFUSED_SUBMITS = 10
REFUSED_SPEC_TASKS = 5_000
"""Tasks of each refused job: some 300 KB of wire form, each of which was written to every
replica's log before the refusal."""
SMALL = "name: later\nallow_unschedulable: true\ntasks:\n  - {id: a, command: [x]}\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running(tmp_path_factory.mktemp("submit-bounds")) as local:
        yield local


@pytest.fixture(scope="module")
def user_token(cluster: LocalCluster) -> str:
    """A user's token (role user, every tenant): what the probe held."""
    return str(cluster.client().create_token("*", "user", "submit-bounds").token)


def terms(cluster: LocalCluster) -> list[int]:
    """Each replica's own Raft term, once every one answers (a replica that knows no leader,
    e.g. while an earlier test's election settles on a busy machine, answers UNAVAILABLE)."""
    client = cluster.client(retry_budget_s=CALL_TIMEOUT_S)

    def answered() -> list[int] | None:
        try:
            return [int(client.cluster_status(address).term) for address in cluster.grpc]
        except RaftschedError as error:
            if error.code != Code.UNAVAILABLE:
                raise
            return None
    return wait_until(answered, "every replica to answer with its term", START_TIMEOUT_S)


def term_after_a_later_commit(cluster: LocalCluster) -> list[int]:
    """The replicas' terms once a later submit has committed (and been applied)."""
    cluster.client(retry_budget_s=CALL_TIMEOUT_S).submit(SMALL)
    return terms(cluster)


def leader_channel(cluster: LocalCluster, token: str) -> grpc.Channel:
    assert cluster.user_tls is not None
    channel = tls.open_channel(cluster.grpc[cluster.wait_leader()], cluster.user_tls,
                               rpc.CHANNEL_OPTIONS)
    return with_token(channel, token)


def yaml_spec(size: int, task_padding: int, *, broken: bool = False) -> str:
    """A valid YAML job spec of about `size` bytes (tasks no cluster needs to take), or, with
    `broken`, one whose last task has an unknown field."""
    lines = ["name: huge", "allow_unschedulable: true", "tasks:"]
    written, index = 0, 0
    while written < size and index < limits.MAX_TASKS_PER_JOB:
        line = (f"  - {{id: t{index}, command: [sh, -c, 'echo {'x' * task_padding}'], "
                f"resources: {{cpu: 0.01, memory_mb: 1}}}}")
        lines.append(line)
        written += len(line) + 1
        index += 1
    if broken:
        lines.append("  - {id: last, command: [x], colour: blue}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("broken", [False, True], ids=["valid", "invalid"])
def test_a_22_mb_yaml_spec_is_refused_at_once_and_no_election_follows(
        cluster: LocalCluster, user_token: str, broken: bool) -> None:
    spec = yaml_spec(HUGE_YAML_BYTES, 200, broken=broken)
    assert len(spec) > HUGE_YAML_BYTES
    before = terms(cluster)
    assert len(set(before)) == 1, before
    stub = pb_grpc.SchedulerStub(leader_channel(cluster, user_token))
    with pytest.raises(grpc.RpcError) as caught:
        stub.SubmitJob(pb.SubmitJobRequest(spec=spec, idempotency_key=f"huge-{broken}"),
                       timeout=CALL_TIMEOUT_S)
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.details() == (
        f"spec is {len(spec)} bytes of YAML; YAML specs over {limits.MAX_YAML_SPEC_BYTES} bytes "
        f"are not parsed by the replicas: send JSON (up to {limits.MAX_JSON_SPEC_BYTES} bytes) "
        "or the wire form (SubmitJobRequest.spec_wire; the raftsched CLI and Python client send "
        "it)")
    assert [field for field, _ in rpc.field_violations(error)] == ["spec"]
    assert term_after_a_later_commit(cluster) == before


def test_the_cli_submits_a_10_mb_yaml_file_as_its_wire_form_and_no_election_follows(
        cluster: LocalCluster, tmp_path: Path) -> None:
    """The file is 10 MB of YAML that takes seconds to parse (millions of nodes), but most of
    them are repeats the parse folds (`requires` and exit codes are sets): what the CLI sends
    and the replicas apply is small. (Applying a job of tens of thousands of tasks costs the
    replicas more than a small fraction of an election timeout on a busy machine on its own:
    see the README's limits.)"""
    path = tmp_path / "big.yaml"
    spec = folded_yaml_spec(BIG_YAML_BYTES)
    path.write_text(spec)
    assert path.stat().st_size > BIG_YAML_BYTES
    before = terms(cluster)
    assert len(set(before)) == 1, before
    submitted = cluster.cli("submit", str(path), "--idempotency-key", "big-yaml", "--json")
    assert submitted.returncode == 0, submitted.stderr
    document = json.loads(submitted.stdout)
    assert (document["created"], document["idempotency_key"]) == (True, "big-yaml")
    job = cluster.client().get_job(document["job_id"])
    assert sum(job.tasks.values()) == spec.count("\n  - {id: ")
    assert term_after_a_later_commit(cluster) == before


def folded_yaml_spec(size: int) -> str:
    """A valid YAML job spec of about `size` bytes whose tasks each list one capability 64 times
    and one exit code 256 times."""
    requires = ", ".join(["linux"] * limits.MAX_REQUIRES_PER_TASK)
    codes = ", ".join(["1"] * limits.MAX_NON_RETRYABLE_EXIT_CODES)
    lines = ["name: folded", "allow_unschedulable: true", "tasks:"]
    written, index = 0, 0
    while written < size:
        line = (f"  - {{id: t{index}, command: [sh, -c, 'true'], requires: [{requires}], "
                f"retry: {{non_retryable_exit_codes: [{codes}]}}}}")
        lines.append(line)
        written += len(line) + 1
        index += 1
    return "\n".join(lines) + "\n"


def test_submits_refused_by_max_queued_are_not_written_to_the_log(
        cluster: LocalCluster) -> None:
    made = cluster.cli("admin", "tenant", "set", "capped", "--max-queued", "1", "--json")
    assert made.returncode == 0, made.stderr
    client = cluster.client()
    client.submit("name: fills\ntenant: capped\nallow_unschedulable: true\n"
                  "tasks:\n  - {id: a, command: [x]}\n")
    tasks = "\n".join(f"  - {{id: t{i}, command: [x]}}" for i in range(REFUSED_SPEC_TASKS))
    spec = f"name: refused\ntenant: capped\nallow_unschedulable: true\ntasks:\n{tasks}\n"
    for attempt in range(REFUSED_SUBMITS):
        with pytest.raises(RaftschedError) as caught:
            client.submit(spec, idempotency_key=f"refused-{attempt}")
        refusal = caught.value
        assert refusal.code == Code.RESOURCE_EXHAUSTED, refusal
        assert refusal.message == (
            f"tenant capped has 1 task(s) queued; {REFUSED_SPEC_TASKS} more would pass its "
            f"max_queued=1 (see `raftsched admin tenant list`); retry after "
            f"{BACKPRESSURE_RETRY_AFTER_MS} ms")
        assert refusal.retry_after_ms == BACKPRESSURE_RETRY_AFTER_MS
    later = client.submit(SMALL).job_id
    for i in range(len(cluster.grpc)):
        names = wait_until(lambda i=i: applied_through(cluster, i, later),
                           f"replica {i} to apply {later}", CALL_TIMEOUT_S)
        assert "refused" not in names.values(), f"replica {i} applied a refused submit"


def applied_through(cluster: LocalCluster, replica: int, job_id: str) -> dict[str, str] | None:
    """job id -> job name of every JOB_SUBMIT the replica has applied (its `--applied-log`),
    once it has applied `job_id`'s (and so every entry written before it); None until then."""
    entries = read_applied_log(str(cluster.applied_log(replica))).entries.values()
    commands = [decode(entry) for entry in entries if entry and entry[0] == Tag.JOB_SUBMIT]
    names = {command.job_id: command.spec[1] for command in commands
             if isinstance(command, JobSubmit)}
    return names if job_id in names else None


@pytest.mark.parametrize(("text", "message"), [
    pytest.param('{"name": "x", "tasks": [}', "invalid JSON in spec at line 1, column 25: "
                 "Expecting value", id="one-line"),
    pytest.param('\ufeff  {\n  "name": "x",\n  "tasks": []\n  "priority": 1\n}',
                 "invalid JSON in spec at line 4, column 3: Expecting ',' delimiter",
                 id="bom-and-lines"),
])
def test_a_json_spec_that_is_not_json_is_reported_as_invalid_json(
        cluster: LocalCluster, user_token: str, text: str, message: str) -> None:
    stub = pb_grpc.SchedulerStub(leader_channel(cluster, user_token))
    with pytest.raises(grpc.RpcError) as caught:
        stub.SubmitJob(pb.SubmitJobRequest(spec=text), timeout=CALL_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == message


def test_a_submit_carries_exactly_one_of_the_document_and_the_wire_form(
        cluster: LocalCluster, user_token: str) -> None:
    stub = pb_grpc.SchedulerStub(leader_channel(cluster, user_token))
    for request in (pb.SubmitJobRequest(),
                    pb.SubmitJobRequest(spec=SMALL, spec_wire=b"\x90")):
        with pytest.raises(grpc.RpcError) as caught:
            stub.SubmitJob(request, timeout=CALL_TIMEOUT_S)
        error: Any = caught.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("exactly one of spec (a YAML or JSON document) and "
                                          "spec_wire (its wire form) must be set")
        assert [field for field, _ in rpc.field_violations(error)] == ["spec", "spec_wire"]
