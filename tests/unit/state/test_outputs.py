"""Task outputs in the state machine (issue 26, item 1): kept only from the current attempt's
fence on success, judged again at apply (an agent is not trusted to have judged them), bounded
per job, refused and recorded from a late or stale attempt, kept across snapshots, and handed
to dependents as their inputs."""

from __future__ import annotations

import json

import pytest

from raftsched import limits
from raftsched.protocol import ReportVerdict
from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.model import AttemptState, TaskState
from raftsched.state.resolve import task_inputs
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    harness.register("west")
    return harness


def _finish(h: Harness, cluster: str, job: str, task: str, fence: int, outputs: str = "",
            refused: bool = False, reason: str = "", exit_code: int = 0) -> ReportVerdict:
    report = c.Report(c.ReportKind.FINISHED, job, task, fence, exit_code, False, reason,
                      outputs, refused)
    return h.report(cluster, report)[0]


def _start(h: Harness, job: str, task: str, cluster: str = "east") -> int:
    fence = h.assign_one(job, task, cluster)
    assert h.started(cluster, job, task, fence) == ReportVerdict.ACCEPTED
    return fence


def test_a_success_keeps_its_outputs_and_its_dependents_get_them_as_inputs(h: Harness) -> None:
    h.submit("j", job_doc([task_doc("extract"), task_doc("plain"),
                           task_doc("load", ["extract", "plain"])]))
    fence = _start(h, "j", "extract")
    assert _finish(h, "east", "j", "extract", fence, '{"count":3,"files":["a","b"]}') == "accepted"
    h.run_task("west", "j", "plain")
    attempt = h.current("j", "extract")
    assert attempt.state == AttemptState.SUCCEEDED
    assert attempt.outputs == '{"count":3,"files":["a","b"]}'
    assert h.current("j", "plain").outputs is None
    job = h.job("j")
    load = h.task("j", "load")
    assert load.state == TaskState.RUNNABLE
    assert json.loads(task_inputs(job, load)) == {
        "extract": {"count": 3, "files": ["a", "b"]}, "plain": {}}
    assert task_inputs(job, h.task("j", "extract")) == ""  # no upstream tasks
    assert job.outputs_bytes == len(attempt.outputs)


def test_a_zombie_attempts_outputs_after_its_replacement_succeeded_are_refused_and_noted(
        h: Harness) -> None:
    h.submit("j", job_doc([task_doc("t", on_lost="replace")]))
    zombie = _start(h, "j", "t")
    h.status("east", c.ClusterStatus.LOST)  # the attempt is replaced elsewhere
    fresh = _start(h, "j", "t", "west")
    assert fresh != zombie
    assert _finish(h, "west", "j", "t", fresh, '{"answer":"right"}') == "accepted"
    # the old attempt's process was alive all along and finishes late with other outputs
    assert _finish(h, "east", "j", "t", zombie, '{"answer":"wrong"}') == ReportVerdict.LATE
    task = h.task("j", "t")
    assert task.state == TaskState.SUCCEEDED and task.current is not None
    assert task.current.fence == fresh and task.current.outputs == '{"answer":"right"}'
    assert [a.outputs for a in task.attempts] == [None, '{"answer":"right"}']
    [note] = task.notes
    assert note.kind == "late" and note.fence == zombie
    assert "outputs (18 characters) refused" in note.detail
    # a duplicate of the current attempt's report changes nothing either
    assert _finish(h, "west", "j", "t", fresh, '{"answer":"again"}') == ReportVerdict.DUPLICATE
    assert task.current.outputs == '{"answer":"right"}'


def test_outputs_the_agent_refused_fail_the_attempt_with_its_reason_and_retry(
        h: Harness) -> None:
    h.submit("j", job_doc([task_doc("t", retry={"max_attempts": 2})]))
    fence = _start(h, "j", "t")
    reason = "$RAFTSCHED_OUTPUT holds a JSON array, not an object"
    assert _finish(h, "east", "j", "t", fence, refused=True, reason=reason) == "accepted"
    attempt = h.task("j", "t").attempts[0]
    assert attempt.state == AttemptState.FAILED and attempt.reason == reason
    assert attempt.exit_code == 0 and attempt.outputs is None
    assert h.task("j", "t").state == TaskState.RETRY_WAIT


@pytest.mark.parametrize(("outputs", "words"), [
    ("[1, 2]", "holds a JSON array, not an object"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ('{"a":' * 40 + "1" + "}" * 40, "nests 40 deep"),
    ("{'a': 1}", "is not JSON"),
])
def test_a_hostile_agents_outputs_are_judged_again_at_apply(h: Harness, outputs: str,
                                                            words: str) -> None:
    h.submit("j", job_doc([task_doc("t"), task_doc("after", ["t"])]))
    fence = _start(h, "j", "t")
    assert _finish(h, "east", "j", "t", fence, outputs) == "accepted"
    attempt = h.task("j", "t").attempts[0]
    assert attempt.state == AttemptState.FAILED and words in attempt.reason
    assert attempt.outputs is None and h.job("j").outputs_bytes == 0
    assert h.task("j", "after").state == TaskState.SKIPPED


def test_outputs_past_the_jobs_bound_fail_the_attempt_saying_so(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_JOB_OUTPUTS_BYTES", 40)
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    first, second = _start(h, "j", "a"), _start(h, "j", "b", "west")
    assert _finish(h, "east", "j", "a", first, '{"v":"' + "x" * 20 + '"}') == "accepted"
    assert _finish(h, "west", "j", "b", second, '{"v":"' + "y" * 20 + '"}') == "accepted"
    assert h.current("j", "a").state == AttemptState.SUCCEEDED
    refused = h.current("j", "b")
    assert refused.state == AttemptState.FAILED and refused.outputs is None
    assert "MAX_JOB_OUTPUTS_BYTES" in refused.reason
    assert h.job("j").outputs_bytes == 28


def test_outputs_survive_a_snapshot_and_count_again_toward_the_bound(h: Harness) -> None:
    h.submit("j", job_doc([task_doc("a"), task_doc("b", ["a"])]))
    fence = _start(h, "j", "a")
    _finish(h, "east", "j", "a", fence, '{"k":"é"}')
    restored = snapshot.load(snapshot.dump(h.state))
    assert_same_state(h.state, restored)
    assert restored.jobs["j"].tasks[0].current is not None
    assert restored.jobs["j"].tasks[0].current.outputs == '{"k":"é"}'
    assert restored.jobs["j"].outputs_bytes == h.job("j").outputs_bytes == len('{"k":"é"}') + 1
    assert snapshot.digest(restored) == snapshot.digest(h.state)
    assert snapshot.jobs_digest(restored) == snapshot.jobs_digest(h.state)


def test_report_items_with_outputs_round_trip_and_old_items_still_decode() -> None:
    with_outputs = c.ReportBatch("east", 5, 6, (
        c.Report(c.ReportKind.FINISHED, "j", "t", 3, 0, False, "", '{"a":1}', False),
        c.Report(c.ReportKind.FINISHED, "j", "u", 4, 0, False, "bad", "", True),
        c.Report(c.ReportKind.STARTED, "j", "v", 5)))
    assert c.decode(c.encode(with_outputs)) == with_outputs
    payload = c.decode(c.encode(c.ReportBatch("east", 5, 6, (
        c.Report(c.ReportKind.FINISHED, "j", "t", 3, 0),))))
    assert isinstance(payload, c.ReportBatch) and payload.items[0].outputs == ""


def test_a_report_item_with_outputs_over_the_bound_is_a_malformed_entry() -> None:
    big = '{"a":"' + "x" * limits.MAX_TASK_RESULT_OUTPUTS_BYTES + '"}'
    entry = c.encode(c.ReportBatch("east", 5, 6, (
        c.Report(c.ReportKind.FINISHED, "j", "t", 3, 0, False, "", big, False),)))
    with pytest.raises(c.CommandError, match="outputs: more than"):
        c.decode(entry)


def test_outputs_past_the_states_bound_fail_until_retention_frees_some(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_OUTPUTS_BYTES_IN_STATE", 30)
    h.submit("a", job_doc([task_doc("t")]))
    h.submit("b", job_doc([task_doc("t")]))
    first, second = _start(h, "a", "t"), _start(h, "b", "t", "west")
    assert _finish(h, "east", "a", "t", first, '{"v":"' + "x" * 20 + '"}') == "accepted"
    assert _finish(h, "west", "b", "t", second, '{"v":"y"}') == "accepted"
    refused = h.current("b", "t")
    assert refused.state == AttemptState.FAILED and "MAX_OUTPUTS_BYTES_IN_STATE" in refused.reason
    assert h.state.outputs_bytes == 28
    h.tick(limits.JOB_RETENTION_MS + 1)  # job a is forgotten, its outputs with it
    assert "a" not in h.state.jobs and h.state.outputs_bytes == 0
