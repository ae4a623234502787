"""SubmitJob and SubmitJobs apply `params` to the spec (document or wire form) before it is
admitted; an unknown name is INVALID_ARGUMENT naming it and proposes nothing."""

from __future__ import annotations

import json

import grpc
import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.spec.job import parse_spec_text
from raftsched.spec.wire import pack_wire
from tests.support.fsmkit import job_doc, task_doc
from tests.unit.replica.test_service import FakeContext, Replica, make_replica, refused

SPEC = {**job_doc([task_doc("a")], tenant="alpha"), "params": {"date": None, "n": 1}}


@pytest.fixture
def replica() -> Replica:
    return make_replica()


def test_params_apply_to_a_document_and_to_a_wire_form(replica: Replica) -> None:
    as_text = replica.scheduler.SubmitJob(pb.SubmitJobRequest(
        spec=json.dumps(SPEC), idempotency_key="k", params={"date": "d"}), FakeContext())
    wire = pack_wire(parse_spec_text(json.dumps(SPEC), params={"date": "x"}))
    as_wire = replica.scheduler.SubmitJob(pb.SubmitJobRequest(
        spec_wire=wire, idempotency_key="k", params={"date": "d"}), FakeContext())
    assert as_text.created and (as_wire.job_id, as_wire.created) == (as_text.job_id, False)
    assert replica.node.state.jobs[as_text.job_id].spec.params == (("date", "d"), ("n", "1"))


@pytest.mark.parametrize("form", ["spec", "spec_wire"])
def test_an_unknown_param_is_refused_naming_it(replica: Replica, form: str) -> None:
    wire = pack_wire(parse_spec_text(json.dumps(SPEC), params={"date": "x"}))
    spec = {"spec": json.dumps(SPEC)} if form == "spec" else {"spec_wire": wire}
    before = len(replica.node.proposed)
    abort, _ = refused(replica.scheduler.SubmitJob, pb.SubmitJobRequest(
        **spec, params={"date": "d", "nope": "1"}))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert abort.details == "--param nope: the job has no param 'nope' (it has: date, n)"
    assert len(replica.node.proposed) == before


def test_submit_jobs_applies_each_items_params(replica: Replica) -> None:
    wire = pack_wire(parse_spec_text(json.dumps(SPEC), params={"date": "x"}))
    jobs = [pb.SubmitJobsItem(spec_wire=wire, idempotency_key="a", params={"n": "2"}),
            pb.SubmitJobsItem(spec_wire=wire, idempotency_key="b", params={"zz": "2"})]
    answers = replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=jobs), FakeContext()).answers
    assert answers[0].created
    assert replica.node.state.jobs[answers[0].job_id].spec.params == (("date", "x"), ("n", "2"))
    assert answers[1].code == "INVALID_ARGUMENT"
    assert "--param zz: the job has no param 'zz'" in answers[1].message


def test_get_job_has_the_params_and_a_list_page_leaves_them_out(replica: Replica) -> None:
    made = replica.scheduler.SubmitJob(pb.SubmitJobRequest(
        spec=json.dumps(SPEC), idempotency_key="k", params={"date": "d"}), FakeContext())
    got = replica.scheduler.GetJob(pb.GetJobRequest(job_id=made.job_id), FakeContext())
    assert dict(got.params) == {"date": "d", "n": "1"}
    page = replica.scheduler.ListJobs(pb.ListJobsRequest(), FakeContext())
    assert [(j.job_id, dict(j.params)) for j in page.jobs] == [(made.job_id, {})]
