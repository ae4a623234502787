"""SubmitJobs (issue 24) through the servicer with the in-memory node of test_service: one
answer per job in request order, each refusal naming its job (and label) and refusing no
other; the admitted jobs committed in one JOB_SUBMIT_BATCH; the call's own bounds refused before
anything is parsed; a resubmit with the same keys creates nothing."""

from __future__ import annotations

import json
import logging

import grpc
import pytest

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.spec.job import parse_spec_text
from raftsched.spec.wire import pack_wire
from tests.support.fsmkit import job_doc, task_doc
from tests.unit.replica.test_service import FakeContext, Replica, make_replica, refused


@pytest.fixture
def replica() -> Replica:
    return make_replica()


def item(key: str, label: str = "", tasks: list[dict[str, object]] | None = None,
         **fields: object) -> pb.SubmitJobsItem:
    tasks = tasks or [task_doc("a"), task_doc("b", ["a"])]
    doc = job_doc(tasks, tenant="alpha", **fields)
    wire = pack_wire(parse_spec_text(json.dumps(doc)))
    return pb.SubmitJobsItem(spec_wire=wire, idempotency_key=key, label=label)


def test_each_job_gets_its_answer_and_a_refusal_refuses_no_other(replica: Replica) -> None:
    jobs = [item("k1", "file a.yaml"),
            pb.SubmitJobsItem(spec_wire=b"\x93\x01\x02", label="file junk.json"),
            item("k1", "file again.yaml"),
            item("k1", "file clash.yaml", priority=7),
            item("k2")]
    before = len(replica.node.proposed)
    answers = replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=jobs), FakeContext()).answers
    assert answers[0].created and answers[0].job_id and not answers[0].code
    assert (answers[1].code, answers[1].job_id) == ("INVALID_ARGUMENT", "")
    assert answers[1].message == ("jobs[1] (file junk.json) malformed wire-form job spec: a job "
                                  "is a list of 8, 13 or 14 fields, got 3")
    assert (answers[2].job_id, answers[2].created) == (answers[0].job_id, False)
    assert answers[3].code == "ALREADY_EXISTS"
    assert answers[3].message.startswith("jobs[3] (file clash.yaml) idempotency key 'k1'")
    assert answers[4].created and not answers[4].code
    assert replica.node.proposed[before:] == ["JobSubmitBatch"]  # one entry for all four
    assert sorted(replica.node.state.jobs) == sorted([answers[0].job_id, answers[4].job_id])
    again = replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=jobs), FakeContext()).answers
    assert [(a.job_id, a.created, a.code) for a in again] == [
        (answers[0].job_id, False, ""), ("", False, "INVALID_ARGUMENT"),
        (answers[0].job_id, False, ""), ("", False, "ALREADY_EXISTS"),
        (answers[4].job_id, False, "")]
    assert len(replica.node.state.jobs) == 2


def test_a_job_no_cluster_could_take_is_refused_alone(replica: Replica) -> None:
    def too_big() -> pb.SubmitJobsItem:
        return item("k9", "file big.yaml", tasks=[task_doc("t", resources={"cpu": 64})],
                    allow_unschedulable=False)
    answers = replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=[too_big(), item("k1")]),
                                           FakeContext()).answers
    assert answers[0].code == "FAILED_PRECONDITION"
    assert answers[0].message.startswith("jobs[0] (file big.yaml) task t ")
    assert answers[1].created


@pytest.mark.parametrize(("jobs", "details"), [
    ([], "jobs: empty; send at least one job"),
    ([pb.SubmitJobsItem(spec_wire=b"x")] * (limits.MAX_BATCH_JOBS + 1),
     f"jobs: {limits.MAX_BATCH_JOBS + 1} jobs, over MAX_BATCH_JOBS={limits.MAX_BATCH_JOBS}"),
    ([pb.SubmitJobsItem(spec_wire=b"x", label="L" * (limits.MAX_BATCH_LABEL_CHARS + 1))],
     f"jobs[0].label: longer than MAX_BATCH_LABEL_CHARS={limits.MAX_BATCH_LABEL_CHARS} "
     "characters"),
], ids=["empty", "too-many", "long-label"])
def test_a_call_past_its_bounds_is_refused_before_anything_is_parsed(
        replica: Replica, jobs: list[pb.SubmitJobsItem], details: str) -> None:
    before = list(replica.node.proposed)
    abort, _ = refused(replica.scheduler.SubmitJobs, pb.SubmitJobsRequest(jobs=jobs))
    assert (abort.code, abort.details) == (grpc.StatusCode.INVALID_ARGUMENT, details)
    assert replica.node.proposed == before


def test_a_submit_writes_no_log_line_at_info(replica: Replica,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """No JSON line per request at info (issue 24): a submit, single or batch, logs at debug."""
    caplog.set_level(logging.INFO, logger="raftsched")
    replica.scheduler.SubmitJob(pb.SubmitJobRequest(spec_wire=item("k1").spec_wire),
                                FakeContext())
    replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=[item("k2")]), FakeContext())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
