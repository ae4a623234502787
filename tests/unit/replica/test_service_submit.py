"""SubmitJob's two forms of a spec (the document, `spec`; the wire form, `spec_wire`) and its
refusals before anything is proposed, through the servicer with the in-memory node of
test_service: exactly one form per request; the same job either way (one idempotency key, one
job); bounded parsing; a submit past a queue limit refused with JOB_SUBMIT's own answer and
nothing proposed; a follower decodes nothing."""

from __future__ import annotations

import json
from dataclasses import replace

import grpc
import msgpack
import pytest
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.spec.job import parse_spec_text
from raftsched.spec.wire import pack_wire, to_wire
from raftsched.state import commands as c
from raftsched.state.policy import BACKPRESSURE_RETRY_AFTER_MS
from tests.support.fsmkit import job_doc, task_doc
from tests.unit.replica.test_service import (
    FakeContext,
    Replica,
    follower_of_peer,
    make_replica,
    refused,
)

SPEC = job_doc([task_doc("a"), task_doc("b", depends_on=["a"])], tenant="alpha")


@pytest.fixture
def replica() -> Replica:
    return make_replica()


def violations(metadata: dict[str, object]) -> list[tuple[str, str]]:
    """The BadRequest field violations in a refusal's trailing metadata."""
    status = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
    found: list[tuple[str, str]] = []
    for detail in status.details:
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            found += [(v.field, v.description) for v in bad_request.field_violations]
    return found


def wire_of(doc: dict[str, object]) -> bytes:
    return pack_wire(parse_spec_text(json.dumps(doc)))


def test_the_same_spec_as_a_document_or_its_wire_form_is_one_job(replica: Replica) -> None:
    as_text = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec=json.dumps(SPEC), idempotency_key="k"), FakeContext())
    as_wire = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec_wire=wire_of(SPEC), idempotency_key="k"), FakeContext())
    assert as_text.created and (as_wire.job_id, as_wire.created) == (as_text.job_id, False)
    other = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec_wire=wire_of(SPEC), idempotency_key="k2"), FakeContext())
    jobs = replica.node.state.jobs
    assert other.created
    assert jobs[other.job_id].spec == replace(jobs[as_text.job_id].spec, idempotency_key="k2")


@pytest.mark.parametrize("request_", [
    pb.SubmitJobRequest(),
    pb.SubmitJobRequest(idempotency_key="k"),
    pb.SubmitJobRequest(spec=json.dumps(SPEC), spec_wire=wire_of(SPEC)),
], ids=["neither", "key-only", "both"])
def test_a_request_carries_exactly_one_form(replica: Replica,
                                            request_: pb.SubmitJobRequest) -> None:
    abort, metadata = refused(replica.scheduler.SubmitJob, request_)
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    both = "both are set" if request_.spec else "neither is set"
    message = ("exactly one of spec (a YAML or JSON document) and spec_wire (its wire form) "
               f"must be set; {both}")
    assert abort.details == message
    assert violations(metadata) == [("spec", message), ("spec_wire", message)]
    assert replica.node.proposed == ["Barrier"]


def test_a_bad_wire_form_is_refused_naming_its_fields_under_spec_wire(replica: Replica) -> None:
    wire = to_wire(parse_spec_text(json.dumps(job_doc([task_doc("a"), task_doc("b")]))))
    wire[7][0][4] = -1000  # cpu_milli
    wire[7][1][9] = ["ghost"]  # depends_on
    abort, metadata = refused(replica.scheduler.SubmitJob,
                              pb.SubmitJobRequest(spec_wire=msgpack.packb(wire)))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert abort.details == ("tasks[0] (a).resources.cpu: must be a number > 0, got -1.0; "
                             "tasks[1] (b).depends_on[0]: unknown dependency 'ghost'")
    assert [field for field, _ in violations(metadata)] == [
        "spec_wire.tasks[0].resources.cpu", "spec_wire.tasks[1].depends_on[0]"]
    assert replica.node.proposed == ["Barrier"]


def test_bytes_that_are_no_wire_form_are_refused_saying_so(replica: Replica) -> None:
    abort, metadata = refused(replica.scheduler.SubmitJob,
                              pb.SubmitJobRequest(spec_wire=b"\x93\x01\x02"))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert abort.details == "malformed wire-form job spec: a job is a list of 8, 13 or 14 " \
                            "fields, got 3"
    assert violations(metadata) == [("spec_wire", abort.details)]


def test_a_large_yaml_document_is_refused_unparsed(replica: Replica) -> None:
    text = "name: big\ntasks:\n" + "  - {id: a, command: [x]}\n" + "#" * limits.MAX_YAML_SPEC_BYTES
    abort, _ = refused(replica.scheduler.SubmitJob, pb.SubmitJobRequest(spec=text))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert abort.details.startswith(f"spec is {len(text)} bytes of YAML; YAML specs over "
                                    f"{limits.MAX_YAML_SPEC_BYTES} bytes are not parsed")


def test_a_submit_past_max_queued_is_refused_before_it_is_proposed(replica: Replica) -> None:
    replica.node.propose(c.encode(c.TenantSet("alpha", 1, 2, 0, 0)), 1)
    replica.scheduler.SubmitJob(pb.SubmitJobRequest(spec_wire=wire_of(SPEC)), FakeContext())
    proposed = list(replica.node.proposed)
    abort, metadata = refused(replica.scheduler.SubmitJob,
                              pb.SubmitJobRequest(spec_wire=wire_of(SPEC), idempotency_key="x"))
    assert abort.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert abort.details == ("tenant alpha has 2 task(s) queued; 2 more would pass its "
                             "max_queued=2 (see `raftsched admin tenant list`); retry after "
                             f"{BACKPRESSURE_RETRY_AFTER_MS} ms")
    assert "grpc-status-details-bin" in metadata  # the RetryInfo (rpc.abort)
    assert replica.node.proposed == proposed, "a refused submit was proposed"


def test_a_resubmit_of_an_accepted_key_is_the_same_job_past_max_queued(replica: Replica) -> None:
    replica.node.propose(c.encode(c.TenantSet("alpha", 1, 2, 0, 0)), 1)
    first = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec_wire=wire_of(SPEC), idempotency_key="k"), FakeContext())
    again = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec=json.dumps(SPEC), idempotency_key="k"), FakeContext())
    assert (again.job_id, again.created) == (first.job_id, False)


def test_a_follower_decodes_nothing() -> None:
    replica = follower_of_peer()
    abort, _ = refused(replica.scheduler.SubmitJob, pb.SubmitJobRequest(spec_wire=b"\xc1"))
    assert abort.code == grpc.StatusCode.UNAVAILABLE
