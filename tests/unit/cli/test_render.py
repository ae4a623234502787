"""raftsched.cli.render: API messages -> JSON documents -> aligned human text (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.cli import render

# 2026-11-30 12:00:01 UTC
NOON_MS = 1_796_040_001_000


def job_message(**overrides: Any) -> Any:
    fields: dict[str, Any] = dict(
        job_id="demo-1", name="demo", tenant="ml", priority=70, state="RUNNING",
        tasks={"RUNNABLE": 2, "SUCCEEDED": 3, "RUNNING": 2}, total_tasks=7,
        failure_policy="skip_downstream", submitted_ms=NOON_MS, started_ms=NOON_MS + 1000,
    )
    fields.update(overrides)
    return pb.Job(**fields)


# --- documents ----------------------------------------------------------------------------------


def test_job_doc_orders_counts_and_keeps_the_contract_keys() -> None:
    document = render.job_doc(job_message(tasks={"PENDING": 1, "ZOMBIE": 1, "FAILED": 2}))
    assert list(document["tasks"].items()) == [("FAILED", 2), ("PENDING", 1), ("ZOMBIE", 1)]
    assert {"job_id", "state", "tasks"} <= document.keys()
    assert document["job_id"] == "demo-1" and document["state"] == "RUNNING"


def test_task_doc_tells_exit_code_zero_from_none() -> None:
    ran = render.task_doc(pb.TaskSummary(task_id="a", state="SUCCEEDED", attempts=1,
                                         cluster="east", fence=4, exit_code=0))
    waiting = render.task_doc(pb.TaskSummary(task_id="b", state="PENDING"))
    assert ran == {"task_id": "a", "state": "SUCCEEDED", "attempts": 1, "cluster": "east",
                   "fence": 4, "exit_code": 0, "reason": "", "instance_of": None,
                   "instances": None}
    assert waiting["exit_code"] is None and waiting["fence"] == 0


def test_history_doc_has_every_attempt_field() -> None:
    history = pb.TaskHistory(
        job_id="j", task_id="t", state="SUCCEEDED", app_failures=1,
        attempts=[pb.AttemptRecord(fence=4, number=1, cluster="east", state="FAILED",
                                   assigned_ms=1, started_ms=2, finished_ms=3, exit_code=1,
                                   reason="exit code 1"),
                  pb.AttemptRecord(fence=5, number=2, cluster="west", state="SUCCEEDED",
                                   exit_code=0, outputs='{"n":3}')],
        notes=[pb.ReportNote(kind="late", fence=4, report="FINISHED", at_ms=9, detail="old")],
        outputs='{"n":3}')
    document = render.history_doc(history)
    assert document["attempts"][0] == {
        "number": 1, "fence": 4, "cluster": "east", "state": "FAILED", "exit_code": 1,
        "assigned_ms": 1, "started_ms": 2, "finished_ms": 3, "reason": "exit code 1",
        "outputs": None}
    assert document["attempts"][1]["outputs"] == {"n": 3} and document["outputs"] == {"n": 3}
    assert "outputs: {\"n\": 3}" in render.history_text(document, now_ms=10)
    assert document["notes"] == [{"kind": "late", "fence": 4, "report": "FINISHED", "at_ms": 9,
                                  "detail": "old"}]
    assert (document["app_failures"], document["infra_failures"]) == (1, 0)


def test_cluster_status_doc() -> None:
    status = pb.ClusterStatusResponse(
        leader="127.0.0.1:5001", term=3, commit_index=10, applied_index=9,
        responder="127.0.0.1:5002",
        replicas=[pb.ReplicaInfo(raft_address="127.0.0.1:6001", grpc_address="127.0.0.1:5001",
                                 leader=True)],
        clusters=[pb.ComputeCluster(cluster_id="gpu-west", status="READY",
                                    capabilities=["linux", "gpu"],
                                    capacity=pb.Resources(cpu_milli=4000, memory_mb=8192, gpu=2),
                                    reserved=pb.Resources(cpu_milli=500, memory_mb=256, gpu=1),
                                    live_attempts=1, heartbeat_age_ms=-1)])
    document = render.cluster_status_doc(status)
    assert document["replicas"] == [{"raft_address": "127.0.0.1:6001",
                                     "grpc_address": "127.0.0.1:5001", "leader": True}]
    assert document["clusters"][0]["cluster"] == "gpu-west"
    assert document["clusters"][0]["capacity"] == {"cpu_milli": 4000, "memory_mb": 8192,
                                                   "gpu": 2}
    text = render.cluster_status_text(document)
    assert text.splitlines()[0].startswith("leader 127.0.0.1:5001  term 3  commit index 10")
    assert "0.5/4" in text and "256/8192" in text and "1/2" in text


# --- text ---------------------------------------------------------------------------------------


def test_table_aligns_columns_and_right_aligns_numbers() -> None:
    text = render.table(["TASK", "N", "NOTE"], [["a", 1, None], ["longer", 100, "x"]],
                        right=[1])
    assert text.splitlines() == [
        "TASK      N  NOTE",
        "a         1  -",
        "longer  100  x",
    ]


def test_table_prints_booleans_as_words_and_needs_a_cell_per_header() -> None:
    assert render.table(["OK"], [[True], [False]]).splitlines()[1:] == ["yes", "no"]
    with pytest.raises(AssertionError):
        render.table(["A", "B"], [["only one"]])


def test_progress_line() -> None:
    document = render.job_doc(job_message())
    line = render.progress_line(document, datetime(2026, 11, 30, 12, 0, 1))
    assert line == "[12:00:01] RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 2, RUNNABLE 2)"


def test_done_counts_every_terminal_task_state() -> None:
    counts = {"SUCCEEDED": 1, "FAILED": 1, "SKIPPED": 1, "CANCELLED": 1, "RUNNING": 1}
    assert render.done_and_total({"tasks": counts, "total_tasks": 0}) == (4, 5)
    assert render.done_and_total({"tasks": counts, "total_tasks": 9}) == (4, 9)


@pytest.mark.parametrize(("ms", "now_ms", "expected"), [
    (0, None, "-"),
    (NOON_MS, None, "12:00:01"),
    (NOON_MS, NOON_MS + 3600_000, "12:00:01"),
    (NOON_MS, NOON_MS + 86_400_000, "2026-11-30 12:00:01"),
])
def test_format_time_ms(ms: int, now_ms: int | None, expected: str) -> None:
    assert render.format_time_ms(ms, UTC, now_ms=now_ms) == expected


@pytest.mark.parametrize(("ms", "expected"), [
    (1234, "1.2s"), (0, "0.0s"), (184_000, "3m04s"), (7_500_000, "2h05m"), (-1, "-"),
])
def test_format_duration_ms(ms: int, expected: str) -> None:
    assert render.format_duration_ms(ms) == expected


def test_job_text() -> None:
    document = render.job_doc(job_message(reason="because"))
    text = render.job_text(document, UTC, now_ms=NOON_MS + 5000)
    assert text.splitlines() == [
        "job        demo-1 (demo)",
        "state      RUNNING  3/7 tasks done",
        "tasks      SUCCEEDED 3, RUNNING 2, RUNNABLE 2",
        "tenant     ml  priority 70  failure policy skip_downstream",
        "submitted  12:00:01",
        "started    12:00:02",
        "elapsed    4.0s",
        "reason     because",
    ]


def test_jobs_table_and_empty_listing() -> None:
    jobs = [render.job_doc(job_message()),
            render.job_doc(job_message(job_id="demo-22", state="SUCCEEDED",
                                       tasks={"SUCCEEDED": 7}))]
    assert render.jobs_table(jobs, UTC).splitlines() == [
        "JOB      NAME  TENANT  STATE      DONE  SUBMITTED",
        "demo-1   demo  ml      RUNNING     3/7  12:00:01",
        "demo-22  demo  ml      SUCCEEDED   7/7  12:00:01",
    ]
    assert render.jobs_table([]) == "no jobs"


def test_tasks_table_shows_reasons_only_when_there_are_some() -> None:
    tasks = [render.task_doc(pb.TaskSummary(task_id="fetch", state="SUCCEEDED", attempts=1,
                                            cluster="cpu-east", fence=1, exit_code=0)),
             render.task_doc(pb.TaskSummary(task_id="train", state="PENDING"))]
    assert render.tasks_table(tasks).splitlines() == [
        "TASK   STATE      ATTEMPTS  CLUSTER   FENCE  EXIT",
        "fetch  SUCCEEDED         1  cpu-east      1     0",
        "train  PENDING           0  -             -     -",
    ]
    tasks[1]["reason"] = "upstream failed"
    assert render.tasks_table(tasks).splitlines()[0].endswith("EXIT  REASON")
    assert render.tasks_table(tasks).splitlines()[2].endswith("upstream failed")
    assert render.tasks_table([]) == "no tasks"


def test_history_text() -> None:
    document = {
        "job_id": "j", "task_id": "flaky", "state": "SUCCEEDED", "reason": "",
        "app_failures": 1, "infra_failures": 0, "notes_dropped": 2,
        "attempts": [
            {"number": 1, "fence": 4, "cluster": "gpu-west", "state": "FAILED", "exit_code": 1,
             "assigned_ms": NOON_MS, "started_ms": NOON_MS, "finished_ms": NOON_MS + 400,
             "reason": "exit code 1"},
            {"number": 2, "fence": 5, "cluster": "cpu-east", "state": "RUNNING",
             "exit_code": None, "assigned_ms": NOON_MS + 1000, "started_ms": NOON_MS + 1000,
             "finished_ms": 0, "reason": ""},
        ],
        "notes": [{"kind": "late", "fence": 4, "report": "FINISHED", "at_ms": NOON_MS + 2000,
                   "detail": "attempt 4 is not current"}],
    }
    text = render.history_text(document, UTC, now_ms=NOON_MS + 3000)
    assert text.splitlines() == [
        "task j/flaky  SUCCEEDED  (1 application / 0 infrastructure failure(s))",
        "",
        "#  FENCE  CLUSTER   STATE    EXIT  ASSIGNED  STARTED   FINISHED  TOOK  REASON",
        "1      4  gpu-west  FAILED      1  12:00:01  12:00:01  12:00:01  0.4s  exit code 1",
        "2      5  cpu-east  RUNNING     -  12:00:02  12:00:02  -         2.0s  -",
        "",
        "reports that changed nothing:",
        "  late FINISHED report for fence 4 at 12:00:03: attempt 4 is not current",
        "  ... and 2 more not kept",
    ]


def test_history_text_without_attempts() -> None:
    document = {"job_id": "j", "task_id": "t", "state": "PENDING", "reason": "",
                "app_failures": 0, "infra_failures": 0, "attempts": [], "notes": []}
    assert "no attempts yet" in render.history_text(document)


def test_explain_text() -> None:
    document = render.explain_doc(
        pb.ExplainTaskResponse(state="RUNNABLE", summary="no cluster fits", clusters=[
            pb.ClusterVerdict(cluster="cpu-east", eligible=False, reason="lacks gpu"),
            pb.ClusterVerdict(cluster="gpu-west", eligible=True)]), "j", "train")
    assert document["clusters"] == [
        {"cluster": "cpu-east", "eligible": False, "reason": "lacks gpu"},
        {"cluster": "gpu-west", "eligible": True, "reason": ""}]
    assert render.explain_text(document).splitlines() == [
        "RUNNABLE: no cluster fits",
        "",
        "CLUSTER   ELIGIBLE  WHY NOT",
        "cpu-east  no        lacks gpu",
        "gpu-west  yes       -",
    ]
    same = render.explain_doc(pb.ExplainTaskResponse(state="SUCCEEDED", summary="SUCCEEDED"),
                              "j", "t")
    assert render.explain_text(same) == "SUCCEEDED"


def test_dev_cluster_text() -> None:
    document = {
        "dir": "/d", "servers": ["127.0.0.1:1", "127.0.0.1:2"],
        "replicas": [
            {"id": "replica-1", "pid": 10, "alive": True, "address": "127.0.0.1:1",
             "raft_address": "127.0.0.1:11", "leader": True},
            {"id": "replica-2", "pid": 200, "alive": False, "address": "127.0.0.1:2",
             "raft_address": "127.0.0.1:12", "leader": False}],
        "agents": [{"cluster": "gpu-west", "pid": 30, "alive": True,
                    "capabilities": ["linux", "gpu"], "status": "READY",
                    "executor": "subprocess", "resources": {}, "slurm_partition": ""}],
    }
    assert render.dev_cluster_text(document).splitlines() == [
        "REPLICA    PID  PROCESS  GRPC         RAFT          ROLE",
        "replica-1   10  alive    127.0.0.1:1  127.0.0.1:11  leader",
        "replica-2  200  DEAD     127.0.0.1:2  127.0.0.1:12  -",
        "",
        "AGENT     PID  PROCESS  EXECUTOR    CAPABILITIES  STATUS",
        "gpu-west   30  alive    subprocess  linux,gpu     READY",
        "",
        "dir:     /d  (logs in /d/logs)",
        "servers: 127.0.0.1:1,127.0.0.1:2",
    ]


def test_dev_cluster_text_with_a_private_slurm_and_custom_resources() -> None:
    document = {
        "dir": "/d", "servers": ["127.0.0.1:1"],
        "replicas": [{"id": "replica-1", "pid": 10, "alive": True, "address": "127.0.0.1:1",
                      "raft_address": "127.0.0.1:11", "leader": True}],
        "agents": [{"cluster": "cpu-east", "pid": 30, "alive": True, "capabilities": ["linux"],
                    "status": "READY", "executor": "slurm", "slurm_partition": "debug",
                    "resources": {"fpga": 1, "lic": 2}}],
        "slurm": {"dir": "/d/slurm", "conf": "/d/slurm/slurm.conf", "partition": "debug",
                  "jobcomp": "/d/slurm/jobcomp.txt",
                  "daemons": [{"name": "slurmd", "pid": 42, "alive": False,
                               "log": "/d/slurm/log/slurmd.log"}]},
    }
    assert render.dev_cluster_text(document).splitlines() == [
        "REPLICA    PID  PROCESS  GRPC         RAFT          ROLE",
        "replica-1   10  alive    127.0.0.1:1  127.0.0.1:11  leader",
        "",
        "AGENT     PID  PROCESS  EXECUTOR     CAPABILITIES  RESOURCES     STATUS",
        "cpu-east   30  alive    slurm:debug  linux         fpga=1,lic=2  READY",
        "",
        "SLURM DAEMON  PID  PROCESS  LOG",
        "slurmd         42  DEAD     /d/slurm/log/slurmd.log",
        "",
        "dir:     /d  (logs in /d/logs)",
        "servers: 127.0.0.1:1",
        "slurm:   partition debug; client commands need SLURM_CONF=/d/slurm/slurm.conf",
    ]
    agent = {**document["agents"][0], "cpu": 4, "memory_mb": 8192, "gpu": 0,
             "log": "/d/logs/cpu-east.log", "data_dir": "/d/data/cpu-east", "metrics_port": 9}
    assert render.dev_agent_text(agent).splitlines()[3:5] == [
        "executor:  slurm:debug", "resources: fpga=1,lic=2"]


@pytest.mark.parametrize(("counts", "bar"), [
    ({"RUNNABLE": 4}, "-" * 24),
    ({"SUCCEEDED": 1, "RUNNING": 3}, "#" * 6 + "-" * 18),
    ({"SUCCEEDED": 3, "FAILED": 1}, "#" * 24),
])
def test_status_line_draws_the_done_share_as_a_bar(counts: dict[str, int], bar: str) -> None:
    job = {"state": "RUNNING", "tasks": counts, "total_tasks": 4}
    line = render.status_line(job, 12_000, 200)
    assert line.startswith(f"[{bar}] ") and line.endswith("  12.0s")
    assert f"  RUNNING  {render.state_counts_text(counts)}" in line


def test_status_line_never_wraps_and_pads_done_to_the_width_of_total() -> None:
    job = {"state": "RUNNING", "tasks": {"SUCCEEDED": 7, "RUNNABLE": 993}, "total_tasks": 1000}
    assert "]    7/1000  RUNNING" in render.status_line(job, 0, 200)
    assert len(render.status_line(job, 0, 40)) == 39
    assert render.status_line({"state": "PENDING", "tasks": {}, "total_tasks": 0}, 0, 80) \
        .startswith("[" + "-" * 24 + "] 0/0  PENDING  no tasks")


def test_job_doc_and_text_show_the_params() -> None:
    document = render.job_doc(job_message(params={"region": "eu", "date": "2026-12-05"}))
    assert document["params"] == {"date": "2026-12-05", "region": "eu"}
    assert list(document["params"]) == ["date", "region"]
    lines = render.job_text(document, UTC, now_ms=NOON_MS).splitlines()
    assert lines[-2:] == ["param date    2026-12-05", "param region  eu"]
    assert render.job_doc(job_message())["params"] == {}
    assert not any(line.startswith("param") for line in
                   render.job_text(render.job_doc(job_message()), UTC).splitlines())
