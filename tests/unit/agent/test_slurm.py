"""The Slurm executor's own logic (agent.slurm) against a scripted stand-in for the Slurm client
commands: what it asks sbatch for, how it reads scontrol and sinfo, how a job's end maps to a
completion, the durable job id and the adoption of a job after an agent restart. (Against a
real Slurm: tests/integration/test_slurm_executor.py.)"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.executor import ExecutorError
from agent.model import AttemptRecord, AttemptState, Completion
from agent.slurm import (
    JOB_FILE,
    SlurmExecutor,
    completion_of,
    parse_job_line,
    partition_capacity,
)
from raftsched.protocol import Assignment, Resources


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
    assert json.loads((directory / JOB_FILE).read_text()) == {"job_id": "4242", "fence": 7}
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
    ("FAILED", "3:0", False, Completion(7, 3)),
    ("FAILED", "0:9", False, Completion(7, 137)),
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


def test_poll_reads_scontrol_until_the_job_ends(tmp_path: Path) -> None:
    running = "JobId=4242 JobName=rs-7 JobState=RUNNING Reason=None ExitCode=0:0 Comment=x y"
    failed = "JobId=4242 JobName=rs-7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0"
    slurm = FakeSlurm(sbatch=[(0, "4242")], scontrol=[(0, running), (0, failed)])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm)
    executor.start(assignment())
    assert executor.poll() == []
    assert executor.poll() == [Completion(7, 3)]
    assert executor.running() == [] and executor.poll() == []


def test_a_job_slurm_forgot_ends_without_an_exit_code(tmp_path: Path) -> None:
    slurm = FakeSlurm(sbatch=[(0, "4242")],
                      scontrol=[(1, "slurm_load_jobs error: Invalid job id specified"),
                                (0, "JobCompType             = jobcomp/none\n")])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm)
    executor.start(assignment())
    (completion,) = executor.poll()
    assert completion.exit_code is None and "forgotten by Slurm" in completion.reason
    assert completion.killed  # an infrastructure failure: retried on that budget


def test_kill_is_scancel_and_the_end_says_killed(tmp_path: Path) -> None:
    cancelled = "JobId=4242 JobState=CANCELLED Reason=None ExitCode=0:15"
    slurm = FakeSlurm(sbatch=[(0, "4242")], scancel=[(0, "")], scontrol=[(0, cancelled)])
    executor = SlurmExecutor(tmp_path, "debug", run=slurm)
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
    slurm = FakeSlurm(sbatch=[(0, "4242")],
                      scontrol=[(1, "slurm_load_jobs error: Invalid job id specified"),
                                (0, config)])
    executor = SlurmExecutor(tmp_path / "attempts", "debug", run=slurm)
    executor.start(assignment())
    assert executor.poll() == [Completion(7, 3)]


def test_poll_observes_the_partitions_idle_cpus(tmp_path: Path) -> None:
    """Other users' jobs take the partition's cpus too: the agent admits no more than Slurm
    says are idle (nodes that take no job left out)."""
    sinfo = "vm 4/12/0/16 mix\nn2 0/8/0/8 drain*\nn3 2/6/0/8 alloc\n"
    executor = SlurmExecutor(tmp_path, "debug", run=FakeSlurm(sinfo=[(0, sinfo)]))
    assert executor.observed_free() is None  # nothing asked yet
    assert executor.poll() == []
    seen = executor.observed_free()
    assert seen is not None and seen.cpu_milli == 18_000
