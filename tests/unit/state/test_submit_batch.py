"""JOB_SUBMIT_BATCH (issue 24): many jobs in one entry, each applied exactly as its own
JOB_SUBMIT with its own answer (one refusal refuses no other, and leaves nothing behind); a
malformed batch is one deterministic rejection; the leader's split of a batch into entries."""

from __future__ import annotations

import msgpack
import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.replica import batch
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, invariants, snapshot
from raftsched.state.outcome import Rejected
from raftsched.state.results import JobRefused, JobsSubmitted, JobSubmitted
from tests.support.fsmkit import Harness, job_doc, task_doc


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    return harness


def test_a_batch_answers_each_job_and_one_refusal_refuses_no_other(h: Harness) -> None:
    good = doc_to_wire(job_doc([task_doc("a"), task_doc("b", ["a"])], idempotency_key="k1"))
    same = doc_to_wire(job_doc([task_doc("a"), task_doc("b", ["a"])], idempotency_key="k1"))
    other_spec_same_key = doc_to_wire(job_doc([task_doc("x")], idempotency_key="k1"))
    cyclic = doc_to_wire(job_doc([task_doc("a"), task_doc("b", ["a"])]))
    cyclic[7][0][9] = ["b"]  # a's depends_on: a cycle only apply's validation sees here
    huge = doc_to_wire(job_doc([task_doc("big", resources={"cpu": 64})],
                               allow_unschedulable=False))
    plain = doc_to_wire(job_doc([task_doc("solo")]))
    result = h.expect(c.JobSubmitBatch(
        (("j1", good), ("j2", same), ("j3", other_spec_same_key), ("j4", cyclic), ("j5", huge),
         ("j6", plain)), h.now_ms), JobsSubmitted)
    answers = result.answers
    assert answers[0] == JobSubmitted("j1", created=True)
    assert answers[1] == JobSubmitted("j1", created=False)  # the same key and spec: that job
    assert isinstance(answers[2], JobRefused) and answers[2].code == Code.ALREADY_EXISTS
    assert isinstance(answers[3], JobRefused) and answers[3].code == Code.INVALID_ARGUMENT
    assert "cycle" in answers[3].reason
    assert isinstance(answers[4], JobRefused) and answers[4].code == Code.FAILED_PRECONDITION
    assert answers[5] == JobSubmitted("j6", created=True)
    assert sorted(h.state.jobs) == ["j1", "j6"]
    invariants.check_invariants(h.state)


def test_a_batch_is_the_same_state_as_its_jobs_one_by_one() -> None:
    wires = [doc_to_wire(job_doc([task_doc("a"), task_doc("b", ["a"])],
                                 idempotency_key=f"k{i % 3}", priority=i % 2))
             for i in range(6)] + [doc_to_wire(job_doc([task_doc("a")]))]
    wires[-1][7][0][9] = ["a"]  # depends on itself
    one_by_one, batched = Harness(), Harness()
    for harness in (one_by_one, batched):
        harness.register("east")
    singles = [one_by_one.run(c.JobSubmit(f"j{i}", w, one_by_one.now_ms))
               for i, w in enumerate(wires)]
    result = batched.expect(c.JobSubmitBatch(
        tuple((f"j{i}", w) for i, w in enumerate(wires)), batched.now_ms), JobsSubmitted)
    for single, answer in zip(singles, result.answers, strict=True):
        if isinstance(single, Rejected):
            assert answer == JobRefused(single.code, single.reason, single.retry_after_ms)
        else:
            assert answer == single.result
    assert snapshot.dump(batched.state) == snapshot.dump(one_by_one.state)


def test_a_batch_round_trips_through_the_log_encoding() -> None:
    command = c.JobSubmitBatch((("j1", doc_to_wire(job_doc([task_doc("a")]))),), 1_000)
    assert c.decode(c.encode(command)) == command


@pytest.mark.parametrize(("payload", "fragment"), [
    ([1_000], "JOB_SUBMIT_BATCH: expected a list of 2 fields"),
    ([1_000, "no"], "JOB_SUBMIT_BATCH.items: expected a list"),
    ([1_000, [["j1"]]], "JOB_SUBMIT_BATCH.items[0]: expected a list of 2 fields"),
    ([1_000, [["j1", "spec"]]], "JOB_SUBMIT_BATCH.items[0].spec: expected a list"),
    ([1_000, [[7, []]]], "items[0].job_id: expected a string"),
    ([-1, []], "now_ms: -1 is outside"),
    ([1_000, [["j", []]] * (limits.MAX_BATCH_JOBS + 1)], "over the bound"),
])
def test_a_malformed_batch_is_rejected_and_changes_nothing(h: Harness, payload: object,
                                                           fragment: str) -> None:
    entry = bytes((c.Tag.JOB_SUBMIT_BATCH,)) + msgpack.packb(payload)
    before = snapshot.dump(h.state)
    outcome = fsm.apply(h.state, entry)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT, outcome
    assert fragment in outcome.reason
    assert snapshot.dump(h.state) == before


def _admitted(count: int, pad: int) -> list[batch.Admitted]:
    return [batch.Admitted(i, f"j{i}", doc_to_wire(job_doc([task_doc("a", command=["x" * pad])])))
            for i in range(count)]


def test_the_leader_splits_a_batch_into_entries_under_the_budget() -> None:
    jobs = _admitted(10, 500)
    item = len(msgpack.packb([jobs[0].job_id, jobs[0].wire], use_bin_type=True))
    runs = list(batch.entries(jobs, budget=3 * item + item // 2))
    assert [len(run) for run in runs] == [3, 3, 3, 1]
    assert [a.index for run in runs for a in run] == list(range(10))
    assert [len(run) for run in batch.entries(jobs, budget=10**9, max_jobs=4)] == [4, 4, 2]
    assert [len(run) for run in batch.entries(jobs)] == [10]  # all fit one entry by default
    many = jobs * (limits.MAX_JOBS_PER_BATCH_ENTRY // 10 + 1)
    assert [len(run) for run in batch.entries(many)] == [limits.MAX_JOBS_PER_BATCH_ENTRY, 10]
    # A job alone over the budget gets a run of its own (its encoding then names the size).
    assert [len(run) for run in batch.entries(jobs[:2], budget=1)] == [1, 1]
