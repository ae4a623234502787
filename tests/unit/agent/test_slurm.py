"""The Slurm executor's own logic (agent.executors.slurm) against a scripted stand-in for the Slurm
client commands: what it asks sbatch for, how it reads scontrol and sinfo, how a job's end maps
to a completion, the durable job id and the adoption of a job after an agent restart. (Against a
real Slurm: tests/integration/test_slurm_executor.py.)"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.agent import attempts_root
from agent.executors import ExecutorError
from agent.executors.slurm import (
    JOB_FILE,
    SlurmExecutor,
    completion_of,
    fence_of,
    parse_job_line,
    partition_capacity,
    run_seconds,
)
from agent.model import AttemptRecord, AttemptState, Completion, ReportKind
from raftsched.protocol import Assignment, Resources
from tests.support.agent import FakeSession, config, running_agent
from tests.support.agent import assignment as agent_assignment
from tests.support.waiting import wait_until


class FakeSlurm:
    """Answers each command from a script (first word -> answers, in order)."""

    def __init__(self, **answers: list[tuple[int, str]]) -> None:
        self.answers = {name: list(values) for name, values in answers.items()}
        self.calls: list[tuple[list[str], dict[str, str] | None]] = []

    def __call__(self, argv: Sequence[str],
                 env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), env))
        if argv[0] == "sinfo" and not self.answers.get("sinfo"):
            return subprocess.CompletedProcess(list(argv), 1, "", "not scripted")  # no view
        code, out = self.answers[argv[0]].pop(0)
        return subprocess.CompletedProcess(list(argv), code, out if code == 0 else "",
                                           "" if code == 0 else out)


def assignment(fence: int = 7, **fields: object) -> Assignment:
    values: dict[str, object] = dict(
        job_id="j", task_id="t", fence=fence, attempt=1, command=("sh", "-c", "echo 'a b'"),
        env={"X": "1"}, resources=Resources(1500, 256, 1), timeout_ms=90_000,
        idempotency_key="k")
    values.update(fields)
    return Assignment(**values)  # type: ignore[arg-type]


def test_start_submits_one_job_with_the_tasks_resources_and_records_its_id(
        tmp_path: Path) -> None:
    slurm = FakeSlurm(sbatch=[(0, "4242\n")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, env={"SLURM_CONF": "/c"})
    launch = executor.start(assignment())
    argv, env = slurm.calls[0]
    directory = Path(executor.attempt_dir(7))
    assert launch.attempt_dir == str(directory)
    assert "--partition=debug" in argv and "--job-name=rs-7" in argv
    assert "--cpus-per-task=2" in argv and "--mem=256M" in argv and "--gres=gpu:1" in argv
    assert "--time=2" in argv  # 90 s, rounded up to whole minutes
    assert f"--output={directory / 'stdout'}" in argv and f"--error={directory / 'stderr'}" in argv
    assert argv[-1] == "--wrap=sh -c 'echo '\"'\"'a b'\"'\"''"
    assert env is not None and env["SLURM_CONF"] == "/c" and env["RAFTSCHED_FENCE"] == "7"
    assert env["X"] == "1"
    assert json.loads((directory / JOB_FILE).read_text()) == {"job_id": "4242", "fence": 7,
                                                              "timeout_ms": 90_000}
    assert executor.running() == [7]


def test_a_refusal_by_sbatch_is_an_executor_error_naming_it(tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path, "debug",
                             run=FakeSlurm(sbatch=[(1, "Requested node configuration is "
                                                       "not available")]))
    with pytest.raises(ExecutorError, match="sbatch refused fence 7: Requested node"):
        executor.start(assignment())
    assert executor.running() == []


@pytest.mark.parametrize(("state", "exit_code", "killed", "expected"), [
    ("COMPLETED", "0:0", False, Completion(7, 0)),
    ("FAILED", "3:0", False, Completion(7, 3, reason="exit code 3")),
    ("FAILED", "0:9", False, Completion(7, 137, reason="terminated by signal 9")),
    ("TIMEOUT", "0:15", False, Completion(7, None, timed_out=True, reason="Slurm time limit")),
    ("CANCELLED", "0:15", True, Completion(7, None, killed=True, reason="cancelled (scancel)")),
    ("CANCELLED", "0:15", False,  # by an administrator: not the task's failure
     Completion(7, None, killed=True, reason="Slurm ended the job CANCELLED")),
    ("NODE_FAIL", "0:0", False,
     Completion(7, None, killed=True, reason="Slurm ended the job NODE_FAIL")),
    ("OUT_OF_MEMORY", "0:125", False,
     Completion(7, None, reason="Slurm ended the job OUT_OF_MEMORY")),
])
def test_how_a_job_ends_maps_to_a_completion(state: str, exit_code: str, killed: bool,
                                             expected: Completion) -> None:
    assert completion_of(7, state, exit_code, "None", killed) == expected


def listed(*rows: tuple[str, str, str, str, str]) -> tuple[int, str]:
    """An answer of `squeue -h -t all -p P -o %i|%T|%M|%j|%k`."""
    return 0, "".join("|".join(row) + "\n" for row in rows)


def test_poll_lists_the_partition_once_and_asks_scontrol_only_about_ended_jobs(
        tmp_path: Path) -> None:
    failed = "JobId=4242 JobName=rs-7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0"
    slurm = FakeSlurm(sbatch=[(0, "4242")], scontrol=[(0, failed)],
                      squeue=[listed(("4242", "PENDING", "0:00", "rs-7", "raftsched j/t fence 7")),
                              listed(("4242", "RUNNING", "0:03", "rs-7", "raftsched j/t fence 7")),
                              listed(("4242", "FAILED", "0:04", "rs-7", "raftsched j/t fence 7")),
                              listed()])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    executor.start(assignment())
    assert executor.poll() == [] and executor.poll() == []
    assert executor.poll() == [Completion(7, 3, reason="exit code 3")]
    assert [argv[0] for argv, _ in slurm.calls] == ["sbatch", "sinfo", "squeue", "squeue",
                                                    "squeue", "scontrol"]
    assert slurm.calls[2][0] == ["squeue", "-h", "-t", "all", "-p", "debug",
                                 "-o", "%i|%T|%M|%j|%k"]
    assert executor.running() == [] and executor.poll() == []


def test_poll_lists_no_more_often_than_its_interval(tmp_path: Path) -> None:
    slurm = FakeSlurm(sbatch=[(0, "4242")], squeue=[listed()],
                      scontrol=[(0, "JobId=4242 JobState=PENDING")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=3600)
    executor.start(assignment())
    assert executor.poll() == [] and executor.poll() == [] and executor.poll() == []
    assert [argv[0] for argv, _ in slurm.calls].count("squeue") == 1


def test_a_job_submitted_after_the_listing_is_asked_about_not_ended(tmp_path: Path) -> None:
    slurm = FakeSlurm(sbatch=[(0, "4242")], squeue=[listed()],
                      scontrol=[(0, "JobId=4242 JobState=PENDING Reason=None")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    executor.start(assignment())
    assert executor.poll() == [] and executor.running() == [7]


def test_the_timeout_is_enforced_to_the_second_and_reported_timed_out(tmp_path: Path) -> None:
    """Slurm's --time counts whole minutes: the agent cancels a job that ran its timeout_s."""
    row = ("4242", "RUNNING", "0:01", "rs-7", "raftsched j/t fence 7")
    slurm = FakeSlurm(sbatch=[(0, "4242")], scancel=[(0, "")],
                      squeue=[listed(row), listed((*row[:2], "0:02", *row[3:])),
                              listed((*row[:2], "0:03", *row[3:])),
                              listed(("4242", "CANCELLED", *row[2:]))],
                      scontrol=[(0, "JobId=4242 JobState=CANCELLED Reason=None ExitCode=0:15")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    executor.start(assignment(timeout_ms=2_000))
    assert executor.poll() == []
    assert executor.poll() == [] and ["scancel", "4242"] in [argv for argv, _ in slurm.calls]
    assert executor.poll() == []  # still listed running: one scancel only
    assert [argv[0] for argv, _ in slurm.calls].count("scancel") == 1
    assert executor.poll() == [Completion(7, None, timed_out=True,
                                          reason="timed out after 2000 ms (scancel)")]


def test_a_restarted_agent_keeps_enforcing_the_timeout(tmp_path: Path) -> None:
    SlurmExecutor(tmp_path, "debug", run=FakeSlurm(sbatch=[(0, "4242")])).start(
        assignment(timeout_ms=60_000))
    slurm = FakeSlurm(scancel=[(0, "")],
                      squeue=[listed(("4242", "RUNNING", "1:00", "rs-7", "raftsched j/t"))])
    again = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    assert again.adopt(record(tmp_path)) and again.poll() == []
    assert slurm.calls[-1][0] == ["scancel", "4242"]


def test_stale_jobs_of_this_cluster_are_cancelled_and_no_other(tmp_path: Path) -> None:
    """A queued or running `rs-FENCE` job tagged with this cluster whose fence the agent does not
    watch is cancelled, once; finished ones, other clusters' and foreign jobs are left alone."""
    rows = [("10", "RUNNING", "0:05", "rs-7", "raftsched hpc j/t fence 7"),  # watched
            ("11", "RUNNING", "0:05", "rs-5", "raftsched hpc j/u fence 5"),  # stale
            ("12", "PENDING", "0:00", "rs-6", "raftsched hpc j/v fence 6"),  # stale
            ("13", "RUNNING", "0:05", "rs-4", "raftsched west j/w fence 4"),  # other cluster
            ("14", "COMPLETED", "0:05", "rs-3", "raftsched hpc j/x fence 3"),  # ended
            ("15", "RUNNING", "0:05", "rs-2x", "raftsched hpc j/y fence 2"),  # not our name
            ("16", "RUNNING", "0:05", "my|job", "raftsched hpc j/z fence 1")]  # foreign
    slurm = FakeSlurm(sbatch=[(0, "10")], scancel=[(0, ""), (0, "")],
                      squeue=[listed(*rows), listed(*rows)])
    executor = SlurmExecutor(tmp_path, "debug", cluster_id="hpc", run=slurm, list_every_s=0)
    executor.start(assignment())
    assert "--comment=raftsched hpc j/t fence 7" in slurm.calls[0][0]
    executor.poll()
    executor.poll()  # still listed (cancelling): not cancelled again
    assert [argv for argv, _ in slurm.calls if argv[0] == "scancel"] == [["scancel", "11"],
                                                                        ["scancel", "12"]]


def test_a_job_whose_sbatch_is_under_way_is_not_stale(tmp_path: Path) -> None:
    """A listing taken while sbatch runs shows the new job before start() returns."""
    executor: SlurmExecutor

    def sbatch_then_poll(argv: Sequence[str],
                         env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sbatch":
            executor.poll()  # the reporter thread lists the partition meanwhile
            return subprocess.CompletedProcess(list(argv), 0, "10\n", "")
        return inner(argv, env)

    inner = FakeSlurm(squeue=[listed(("10", "PENDING", "0:00", "rs-7",
                                      "raftsched hpc j/t fence 7"))])
    executor = SlurmExecutor(tmp_path, "debug", cluster_id="hpc", run=sbatch_then_poll,
                             list_every_s=0)
    executor.start(assignment())
    assert [argv[0] for argv, _ in inner.calls] == ["sinfo", "squeue"]  # and no scancel


def test_without_a_cluster_id_nothing_is_cancelled_as_stale(tmp_path: Path) -> None:
    slurm = FakeSlurm(squeue=[listed(("11", "RUNNING", "0:05", "rs-5", "raftsched j/u fence 5"))])
    SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0).poll()
    assert "scancel" not in [argv[0] for argv, _ in slurm.calls]


@pytest.mark.parametrize(("text", "seconds"), [
    ("0:00", 0), ("0:07", 7), ("12:34", 754), ("1:02:03", 3723), ("2-01:00:00", 176_400),
    ("INVALID", None), ("", None), ("1:x", None), ("1-2", None)])
def test_run_seconds_reads_squeues_time_used(text: str, seconds: int | None) -> None:
    assert run_seconds(text) == seconds


@pytest.mark.parametrize(("name", "fence"), [
    ("rs-7", 7), ("rs-123456", 123456), ("rs-", None), ("rs-07", None), ("rs-7x", None),
    ("job", None), ("xrs-7", None)])
def test_fence_of_reads_only_our_job_names(name: str, fence: int | None) -> None:
    assert fence_of(name) == fence


def test_a_job_slurm_forgot_ends_without_an_exit_code(tmp_path: Path) -> None:
    slurm = FakeSlurm(sbatch=[(0, "4242")], squeue=[listed()],
                      scontrol=[(1, "slurm_load_jobs error: Invalid job id specified"),
                                (0, "JobCompType             = jobcomp/none\n")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    executor.start(assignment())
    (completion,) = executor.poll()
    assert completion.exit_code is None and "forgotten by Slurm" in completion.reason
    assert completion.killed  # an infrastructure failure: retried on that budget


def test_kill_is_scancel_and_the_end_says_killed(tmp_path: Path) -> None:
    cancelled = "JobId=4242 JobState=CANCELLED Reason=None ExitCode=0:15"
    slurm = FakeSlurm(sbatch=[(0, "4242")], scancel=[(0, "")], scontrol=[(0, cancelled)],
                      squeue=[listed(("4242", "CANCELLED", "0:01", "rs-7", "raftsched j/t"))])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm, list_every_s=0)
    executor.start(assignment())
    assert executor.kill(7) and not executor.kill(8)
    assert slurm.calls[1][0] == ["scancel", "4242"]
    assert executor.poll() == [Completion(7, None, killed=True, reason="cancelled (scancel)")]


def record(tmp_path: Path, fence: int = 7) -> AttemptRecord:
    return AttemptRecord(fence, "j", "t", 1, AttemptState.RUNNING, Resources(1000, 0, 0),
                         str(tmp_path / f"{fence:020d}"), 0)


def test_a_restarted_agent_adopts_the_job_from_its_record_or_by_name(tmp_path: Path) -> None:
    first = SlurmExecutor(tmp_path, "debug", run=FakeSlurm(sbatch=[(0, "4242")]))
    first.start(assignment())
    again = SlurmExecutor(tmp_path, "debug", run=FakeSlurm())
    assert again.adopt(record(tmp_path)) and again.running() == [7]
    # Died between sbatch and writing slurm.json: found by its job name.
    (tmp_path / f"{8:020d}").mkdir()
    slurm = FakeSlurm(squeue=[(0, "5151\n")])
    third = SlurmExecutor(tmp_path, "debug", run=slurm)
    assert third.adopt(record(tmp_path, 8))
    assert slurm.calls[0][0][:3] == ["squeue", "-h", "--name=rs-8"]
    assert (tmp_path / f"{8:020d}" / JOB_FILE).exists()
    # Nowhere: it never started.
    (tmp_path / f"{9:020d}").mkdir()
    assert not SlurmExecutor(tmp_path, "debug", run=FakeSlurm(squeue=[(0, "")])).adopt(
        record(tmp_path, 9))


def test_partition_capacity_sums_the_nodes_and_reads_features_and_gpus() -> None:
    sinfo = ("n1 8 16000 gpu:2 linux,fast\nn2 4 8000 gpu:a100:4(S:0-1) linux\n"
             "n2 4 8000 gpu:a100:4(S:0-1) linux\n")
    found = partition_capacity("debug", run=FakeSlurm(sinfo=[(0, sinfo)]))
    assert (found.cpu_milli, found.memory_mb, found.gpu) == (12_000, 24_000, 6)
    assert found.capabilities == ("linux", "fast")
    with pytest.raises(ExecutorError, match="has no node"):
        partition_capacity("empty", run=FakeSlurm(sinfo=[(0, "")]))


def test_parse_job_line_keeps_the_first_value_of_each_key() -> None:
    fields = parse_job_line("JobId=1 JobState=FAILED ExitCode=3:0 Command=/bin/sh -c x=1")
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "3:0"


def test_a_job_slurm_purged_is_read_from_its_completion_log(tmp_path: Path) -> None:
    """Finished while the agent was down and purged after MinJobAge: jobcomp/filetxt has it."""
    jobcomp = tmp_path / "jobcomp.txt"
    jobcomp.write_text("JobId=4241 UserId=root(0) JobState=COMPLETED ExitCode=0:0\n"
                       "JobId=4242 UserId=root(0) Name=rs-7 JobState=FAILED Partition=debug "
                       "ExitCode=3:0 NodeList=vm\n")
    config = f"JobCompLoc              = {jobcomp}\nJobCompType             = jobcomp/filetxt\n"
    slurm = FakeSlurm(sbatch=[(0, "4242")], squeue=[listed()],
                      scontrol=[(1, "slurm_load_jobs error: Invalid job id specified"),
                                (0, config)])
    executor = SlurmExecutor(tmp_path / "attempts", "debug", run=slurm, list_every_s=0)
    executor.start(assignment())
    assert executor.poll() == [Completion(7, 3, reason="exit code 3")]


def test_poll_observes_the_partitions_idle_cpus(tmp_path: Path) -> None:
    """Other users' jobs take the partition's cpus too: the agent admits no more than Slurm
    says are idle (nodes that take no job left out)."""
    sinfo = "vm 4/12/0/16 mix\nn2 0/8/0/8 drain*\nn3 2/6/0/8 alloc\n"
    executor = SlurmExecutor(tmp_path, "debug", run=FakeSlurm(sinfo=[(0, sinfo)],
                                                             squeue=[listed()]))
    assert executor.observed_free() is None  # nothing asked yet
    assert executor.poll() == []
    seen = executor.observed_free()
    assert seen is not None and seen.cpu_milli == 18_000


class FakePartition:
    """The Slurm client commands over an in-memory partition that keeps its jobs (what an
    agent loop needs: sbatch, squeue, scontrol show job, scancel, sinfo)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()

    def __call__(self, argv: Sequence[str],
                 env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        with self.lock:
            return subprocess.CompletedProcess(list(argv), 0, self._answer(list(argv)), "")

    def _answer(self, argv: list[str]) -> str:
        if argv[0] == "sbatch":
            job_id = str(len(self.jobs) + 100)
            options = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
            self.jobs[job_id] = {"name": options["job-name"], "comment": options["comment"],
                                 "state": "RUNNING"}
            return job_id + "\n"
        if argv[0] == "squeue":
            return "".join(f"{i}|{j['state']}|0:01|{j['name']}|{j['comment']}\n"
                           for i, j in self.jobs.items())
        if argv[0] == "scancel":
            self.jobs[argv[1]]["state"] = "CANCELLED"
            return ""
        if argv[0] == "scontrol":
            return f"JobId={argv[-1]} JobState={self.jobs[argv[-1]]['state']} ExitCode=0:15"
        return "vm 0/8/0/8 idle\n"  # sinfo

    def names(self) -> list[str]:
        with self.lock:
            return [job["name"] for job in self.jobs.values()]


def test_an_agent_never_submits_a_stale_fence_to_slurm(tmp_path: Path) -> None:
    partition = FakePartition()
    executor = SlurmExecutor(attempts_root(tmp_path), "debug", cluster_id="east", run=partition,
                             list_every_s=0)
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor):
        session.assign(agent_assignment(10, command=("sleep", "600")))
        wait_until(lambda: ReportKind.STARTED in session.kinds(10), "fence 10 to start")
        session.assign(agent_assignment(5))  # the same task, a lower fence
        wait_until(lambda: ReportKind.REJECTED in session.kinds(5), "fence 5 to be rejected")
    rejected = session.report_of(5, ReportKind.REJECTED)
    assert rejected is not None and "stale fence 5" in rejected.reason
    assert partition.names() == ["rs-10"]  # never submitted
