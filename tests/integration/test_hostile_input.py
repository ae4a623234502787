"""Integration: hostile input to a real replica over real gRPC. Bytes that are no protobuf
message, sent to any RPC of any of our services, a malformed ListJobs page and a YAML alias bomb
are each answered INVALID_ARGUMENT at once, with a message naming the problem, no traceback in
the replica's log, and nothing changed. A refused spec's problems also come as
google.rpc.BadRequest field violations, for clients in any language."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from grpc_status import rpc_status  # type: ignore[import-untyped]

from raftsched import limits, rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster, running, with_token

pytestmark = [pytest.mark.integration]

CALL_TIMEOUT_S = 10.0
"""Every refusal here must come well within this (they take milliseconds)."""
GARBAGE = (b"\xff\xff\xff", b"\x0a\x05ab", b"\x08")
"""Not a message of any type: a bad tag, a length past the end, a tag without its value."""
JOB = """
name: bystander
allow_unschedulable: true
tasks:
  - {id: a, command: [sh, -c, "true"], requires: [nowhere]}
"""
SERVICES = [pb.DESCRIPTOR.services_by_name[name] for name in pb.DESCRIPTOR.services_by_name]
METHODS = [pytest.param(service, method, id=f"{service.name}.{method.name}")
           for service in SERVICES for method in service.methods]


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One replica (its own leader) holding one job that no cluster can run."""
    with running(tmp_path_factory.mktemp("hostile"), replica_count=1) as local:
        local.client().submit(JOB)
        yield local


@pytest.fixture
def channel(replica: LocalCluster) -> Iterator[grpc.Channel]:
    """A user's channel (mutual TLS, as the cluster serves): the refusals come before any check
    of who calls, so the AgentGateway's are tested through it too."""
    assert replica.admin_token is not None
    with tls.open_channel(replica.grpc[0], replica.user_tls, rpc.CHANNEL_OPTIONS) as opened:
        yield with_token(opened, replica.admin_token)


def observed(channel: grpc.Channel) -> tuple[Any, ...]:
    """What a refused request must not change: the jobs and their states, the registered
    clusters and the replica members."""
    jobs = pb_grpc.SchedulerStub(channel).ListJobs(
        pb.ListJobsRequest(limit=limits.MAX_PAGE_SIZE), timeout=CALL_TIMEOUT_S)
    status = pb_grpc.AdminStub(channel).ClusterStatus(pb.ClusterStatusRequest(),
                                                      timeout=CALL_TIMEOUT_S)
    return ([(job.job_id, job.state, dict(job.tasks)) for job in jobs.jobs],
            [cluster.cluster_id for cluster in status.clusters],
            sorted(member.raft_address for member in status.replicas))


def assert_quiet_log(replica: LocalCluster) -> None:
    """The replica logged no traceback (gRPC's own "Exception deserializing request!" is one)."""
    log = (replica.root / "logs" / "r0.log").read_text(errors="replace")
    assert "Traceback" not in log and "deserializing" not in log, log[-2000:]


def refusal(call: Any) -> grpc.RpcError:
    """The error `call()` fails with (it must fail)."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def raw_call(channel: grpc.Channel, service: Any, method: Any, payload: bytes) -> Any:
    """A call of `method` that sends `payload` as the request's bytes, unserialized."""
    path = f"/{service.full_name}/{method.name}"
    if method.client_streaming:
        factory = channel.stream_stream if method.server_streaming else channel.stream_unary
        argument: Any = iter([payload])
    else:
        factory = channel.unary_stream if method.server_streaming else channel.unary_unary
        argument = payload
    stub = factory(path, request_serializer=None, response_deserializer=None)

    def call() -> None:
        answer = stub(argument, timeout=CALL_TIMEOUT_S)
        if method.server_streaming:
            list(answer)

    return call


@pytest.mark.parametrize(("service", "method"), METHODS)
def test_every_rpc_answers_undecodable_bytes_invalid_argument_and_changes_nothing(
    replica: LocalCluster, channel: grpc.Channel, service: Any, method: Any
) -> None:
    before = observed(channel)
    for payload in GARBAGE:
        error = refusal(raw_call(channel, service, method, payload))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (payload, error)
        assert error.details() == f"request is not a valid {method.input_type.full_name}"
        trailing = dict(error.trailing_metadata() or ())
        assert trailing.get(rpc.REPLICA_METADATA_KEY) == replica.grpc[0]
    assert observed(channel) == before
    assert_quiet_log(replica)


STANDARD = [health_pb2.DESCRIPTOR.services_by_name["Health"],
            reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]]


@pytest.mark.parametrize(("service", "method"), [
    pytest.param(service, method, id=f"{service.name}.{method.name}")
    for service in STANDARD for method in service.methods])
def test_health_and_reflection_refuse_undecodable_bytes_too(
    replica: LocalCluster, channel: grpc.Channel, service: Any, method: Any
) -> None:
    for payload in GARBAGE:
        error = refusal(raw_call(channel, service, method, payload))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (payload, error)
    assert_quiet_log(replica)


def test_the_services_checked_are_every_service_the_api_defines() -> None:
    assert {service.name for service in SERVICES} == {"Scheduler", "AgentGateway", "Admin",
                                                      "Schedules"}


@pytest.mark.parametrize(("fields", "named"), [
    pytest.param({"limit": -1}, "limit", id="negative-limit"),
    pytest.param({"page_token": "\u00b2"}, "page_token", id="superscript-two-token"),
    pytest.param({"page_token": "next-please"}, "page_token", id="word-token"),
    pytest.param({"page_token": "9" * 5000}, "page_token", id="5000-digit-token"),
])
def test_list_jobs_a_malformed_page_is_invalid_argument_naming_the_field(
    replica: LocalCluster, channel: grpc.Channel, fields: dict[str, Any], named: str
) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    error = refusal(lambda: stub.ListJobs(pb.ListJobsRequest(**fields), timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.details().startswith(named), error.details()
    assert_quiet_log(replica)


@pytest.mark.parametrize("limit", [limits.MAX_PAGE_SIZE, limits.MAX_PAGE_SIZE + 1, 2**31 - 1])
def test_list_jobs_a_limit_up_to_and_past_the_maximum_is_a_page(channel: grpc.Channel,
                                                                limit: int) -> None:
    page = pb_grpc.SchedulerStub(channel).ListJobs(
        pb.ListJobsRequest(limit=limit), timeout=CALL_TIMEOUT_S)
    assert 1 <= len(page.jobs) <= limits.MAX_PAGE_SIZE


def laughs() -> str:
    """A "billion laughs" job spec: 9 levels of 9 aliases, 9**9 strings once expanded."""
    lines = ["name: laughs", 'x0: &x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, 9)]
    lines += ["tasks:", "  - {id: t, command: *x8}"]
    return "\n".join(lines)


def amplified() -> str:
    """A valid job spec of about 60 KB whose 300 tasks alias one 1,000-argument command: 14 MB
    once expanded (such a spec once became a 12 MB log entry)."""
    args = ", ".join(f"arg-{i:05d}-{'x' * 36}" for i in range(1_000))
    lines = ["name: amplified", "tasks:", f"  - {{id: t0, command: &c [{args}]}}"]
    lines += [f"  - {{id: t{i}, command: *c}}" for i in range(1, 300)]
    return "\n".join(lines)


@pytest.mark.parametrize("spec", [pytest.param(laughs(), id="laughs"),
                                  pytest.param(amplified(), id="amplified")])
def test_submit_job_a_yaml_alias_bomb_is_refused_at_once_and_nothing_is_committed(
    replica: LocalCluster, channel: grpc.Channel, spec: str
) -> None:
    assert len(spec.encode()) < 100_000
    before = observed(channel)
    stub = pb_grpc.SchedulerStub(channel)
    started_s = time.monotonic()
    error = refusal(lambda: stub.SubmitJob(pb.SubmitJobRequest(spec=spec, idempotency_key="bomb"),
                                           timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "YAML aliases" in error.details(), error.details()
    assert time.monotonic() - started_s < CALL_TIMEOUT_S
    [(field, description)] = rpc.field_violations(error)
    assert field == "spec" and description.startswith("spec: YAML aliases ")
    assert observed(channel) == before
    assert_quiet_log(replica)


BAD_SPEC = """
name: bad
tasks:
  - {id: a, command: [x], resources: {cpu: -1}}
  - {id: b, command: [x], depends_on: [ghost]}
"""


def test_submit_job_a_bad_spec_carries_its_problems_as_field_violations(
    channel: grpc.Channel
) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    error = refusal(lambda: stub.SubmitJob(pb.SubmitJobRequest(spec=BAD_SPEC),
                                           timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    status = rpc_status.from_call(error)  # what any gRPC client decodes, in any language
    assert (status.code, status.message) == (grpc.StatusCode.INVALID_ARGUMENT.value[0],
                                             error.details())
    bad_request = error_details_pb2.BadRequest()
    [detail] = status.details
    assert detail.Unpack(bad_request)
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("spec.tasks[0].resources.cpu", "must be a number > 0, got -1"),
        ("spec.tasks[1].depends_on[0]", "unknown dependency 'ghost'"),
    ]


def test_submit_job_a_bad_idempotency_key_is_a_violation_of_that_request_field(
    channel: grpc.Channel
) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    request = pb.SubmitJobRequest(spec=JOB,
                                  idempotency_key="k" * (limits.MAX_IDEMPOTENCY_KEY_CHARS + 1))
    error = refusal(lambda: stub.SubmitJob(request, timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert [field for field, _ in rpc.field_violations(error)] == ["idempotency_key"]

