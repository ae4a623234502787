"""The checker and task data (issue 26): a fan-out job (ls -> map[i] -> reduce) driven through the
real state machine and written as a results folder passes every check, its instances included
(ledger DAG order, early timeouts) and outputs_from_succeeded_fence counts what it judged.
Planted: kept outputs naming another fence, outputs on a FAILED attempt, a reduce whose answer
disagrees with the items, a reduce started before an instance ended — each caught."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from raftsched.outputs import canonical
from raftsched.protocol import ReportVerdict
from raftsched.state import commands as c
from raftsched.state.model import AttemptState
from tests.jepsen.test_checker import Run
from tests.support import paths
from tests.support.fsmkit import task_doc

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen import checker
from jepsen.checks_history import _Findings
from jepsen.checks_outputs import CHECK, OutputsAudit

ITEMS = [5, 11, 2]
RETRY = {"max_attempts": 2, "backoff_s": 0}
FANOUT = [task_doc("ls", retry=RETRY),
          task_doc("map", ["ls"], for_each="{{ tasks.ls.outputs.items }}", retry=RETRY,
                   env={"ITEM": "{{ item }}", "INDEX": "{{ index }}"}),
          task_doc("reduce", ["map"], retry=RETRY)]


def _attempt(run: Run, task_id: str, outputs: dict[str, object] | None, exit_code: int = 0,
             *, end: bool = True) -> int:
    """One attempt of job f1's `task_id` on east: ledger lines, agent lines and its reports;
    `outputs` gets the attempt's own fence as "fence" (as the workload's tasks write it)."""
    fence = run.run_attempt("east", "f1", task_id, end=False)
    if end:
        _end(run, task_id, fence, outputs, exit_code)
    return fence


def _end(run: Run, task_id: str, fence: int, outputs: dict[str, object] | None,
         exit_code: int = 0) -> None:
    run.end("f1", task_id, fence, exit_code, "east")
    text = canonical({"fence": fence, **outputs}) if outputs is not None and exit_code == 0 \
        else ""
    report = c.Report(c.ReportKind.FINISHED, "f1", task_id, fence, exit_code, outputs=text)
    assert run.h.report("east", report) == [ReportVerdict.ACCEPTED]
    run.sync()


def fanout_run(reduce_answer: tuple[int, int] = (len(ITEMS), sum(ITEMS))) -> Run:
    """A fan-out job: ls outputs ITEMS, map[1] fails its first attempt and is retried, reduce
    outputs (count, sum) = `reduce_answer`."""
    run = Run()
    run.h.register("east")
    run.submit(0, "f1", "k1", "alpha", FANOUT,
               described_extra={"run_s": 0, "timeout_s": 30, "max_attempts": 2})
    run.records[-2]["value"]["fanout"] = {"items": ITEMS}  # as make_fanout_job describes it
    _attempt(run, "ls", {"items": ITEMS})
    assert run.h.task("f1", "map").instances is not None
    for index, item in enumerate(ITEMS):
        outputs = {"index": index, "item": str(item), "value": item}
        if index == 1:
            _attempt(run, "map[1]", None, exit_code=1)
            run.h.tick(1_000)
        _attempt(run, f"map[{index}]", outputs)
    count, total = reduce_answer
    _attempt(run, "reduce", {"count": count, "sum": total})
    run.mark("r2")
    run.read(0, "f1")
    run.final()
    run.record("harness", "event", "liveness",
               {"bound_s": 60, "waited_s": 0.5, "met": True, "pending": []})
    return run


def _report(run: Run, tmp_path: Path) -> checker.Report:
    return checker.check(run.write(tmp_path))


def test_a_fan_out_job_passes_every_check_and_its_outputs_are_counted(tmp_path: Path) -> None:
    run = fanout_run()
    assert run.h.job("f1").state.name == "SUCCEEDED"
    report = _report(run, tmp_path)
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    checked = report.invariants_checked
    # 5 kept outputs judged on the replay, then ls, the expansion, 3 instances and reduce
    assert checked[CHECK] == 5 + 1 + 1 + 3 + 1, checked
    assert checked["ledger_dag_order"] == 6  # ls, map[0], map[1] twice, map[2], reduce
    assert checked["early_timeout"] == 6  # ls, map, map[0..2] (described as map), reduce


def test_a_reduce_answer_that_disagrees_with_the_items_is_caught(tmp_path: Path) -> None:
    report = _report(fanout_run(reduce_answer=(2, sum(ITEMS))), tmp_path)
    assert [v.check for v in report.violations] == [CHECK]
    assert "reduce kept count 2 and sum 18, not 3 and 18" in report.violations[0].message


def test_a_reduce_started_before_an_instance_succeeded_is_caught(tmp_path: Path) -> None:
    run = fanout_run()
    start = next(i for i, line in enumerate(run.ledger) if line.startswith("start f1/reduce"))
    end = next(i for i, line in enumerate(run.ledger) if line.startswith("end f1/map[2]"))
    run.ledger.insert(end, run.ledger.pop(start))  # reduce starts before map[2] ended
    report = _report(run, tmp_path)
    assert {v.check for v in report.violations} == {"ledger_dag_order"}, report.violations
    assert "upstream map had" in report.violations[0].message


def _planted(tmp_path: Path, plant: str) -> list[str]:
    """The fan-out run's final state with one planted fault, judged by the replay's part."""
    run = fanout_run()
    if plant == "fence":
        attempt = run.h.current("f1", "map[0]")
        attempt.outputs = canonical({"fence": attempt.fence - 1, "value": 5})
    else:
        attempt = run.h.task("f1", "map[1]").attempts[0]
        assert attempt.state == AttemptState.FAILED
        attempt.outputs = canonical({"fence": attempt.fence})
    found = _Findings(tmp_path)
    OutputsAudit().finish(99, run.h.state, found)
    assert found.report.invariants_checked[CHECK] == (5 if plant == "fence" else 6)
    return [v.message for v in found.report.violations if v.check == CHECK]


def test_kept_outputs_naming_another_fence_are_caught(tmp_path: Path) -> None:
    [message] = _planted(tmp_path, "fence")
    assert "f1/map[0]" in message and "written by fence" in message, message


def test_outputs_kept_on_a_failed_attempt_are_caught(tmp_path: Path) -> None:
    [message] = _planted(tmp_path, "failed")
    assert "f1/map[1] attempt 1" in message and "FAILED" in message, message


def test_the_workload_describes_a_fan_out_job_the_checker_reads() -> None:
    import random

    from jepsen.workload import make_fanout_job

    text, value = make_fanout_job(random.Random(7), "k", Path("/tmp/ledger"))
    spec = json.loads(text)
    assert [t["id"] for t in spec["tasks"]] == ["ls", "map", "reduce"]
    items = value["fanout"]["items"]
    assert 2 <= len(items) <= 5 and ", ".join(map(str, items)) == spec["tasks"][0]["env"]["ITEMS"]
    assert set(value["tasks"]) == {"ls", "map", "reduce"}
