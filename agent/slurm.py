"""The Slurm executor: a compute cluster that is a Slurm partition (`--executor slurm`).

Each admitted assignment becomes one Slurm job, submitted with `sbatch` through the standard
client commands (found on PATH; the cluster through `SLURM_CONF`): its cpus, memory, gpus
(`--gres=gpu:N`), time limit (from `timeout_s`), working directory, the task's environment with
the RAFTSCHED_* fence variables (the sbatch process's own environment, exported), and its
stdout and stderr into the attempt dir — so `task logs` reads them as it reads a local task's.
The job is named `rs-FENCE` and its comment says `raftsched job/task fence F`.

Durability: the Slurm job id is written (fsync'd) to the attempt dir's `slurm.json` before
`start` returns, so before the agent reports the attempt STARTED. A restarted agent `adopt`s
the attempt from that file; if the agent died between `sbatch` and that write, it finds the job
by its name in `squeue`; a fence whose job is nowhere never started (the agent rejects it).

Following: `poll` asks `scontrol show job -o ID` for each job it watches (Slurm keeps a
finished job for `MinJobAge`); the end state maps to a completion: COMPLETED → exit 0, FAILED
→ its exit code (128 + the signal for a signal), TIMEOUT → timed out, CANCELLED after our
`scancel` → killed. Slurm's own failures (NODE_FAIL, BOOT_FAIL, PREEMPTED, REVOKED, CANCELLED
by someone else) and a job Slurm forgot before its end was seen (and that its jobcomp/filetxt
log, when it keeps one, does not record either) → killed too, with Slurm's
reason: the scheduler retries those on its infrastructure budget. OUT_OF_MEMORY, DEADLINE and
other ends are the task's own: no exit code, an application failure. `kill` is `scancel`.

Capacity: `partition_capacity` reads the partition's cpus, memory, GRES gpus and node
features (capabilities) with `sinfo`; every OBSERVE_EVERY_S the executor also asks how many
of them are idle (other users' jobs take them too), and the agent admits no more than that
and reports it to the leader as its observed free capacity.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.executor import ATTEMPT_DIR_DIGITS, ExecutorError, Launch, task_env
from agent.files import read_json, write_json_atomic
from agent.model import Assignment, AttemptRecord, Completion, Resources
from raftsched.eventlog import EventLogger

log = EventLogger("agent.slurm")

COMMAND_TIMEOUT_S = 30.0
"""A Slurm client command (sbatch, scontrol, squeue, scancel, sinfo) that takes longer failed."""
JOB_FILE = "slurm.json"
JOB_NAME_PREFIX = "rs-"
WORK_DIR = "work"
SIGNAL_EXIT_BASE = 128
OBSERVE_EVERY_S = 5.0
"""How often the executor asks Slurm how many of the partition's cpus are idle."""
UNAVAILABLE_NODE_STATES = frozenset({"down", "drain", "drng", "fail", "failg", "maint",
                                     "boot", "futr", "futur", "unk", "npc", "pow_dn"})
"""sinfo's short node states (%t) whose cpus take no new job."""
UNBOUNDED = 2**62
"""An observation that bounds nothing (memory, gpus: the agent's own accounting decides)."""
INFRASTRUCTURE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "CANCELLED",
                                   "REVOKED"})
"""Slurm end states that are no failure of the task's: an infrastructure failure for retries."""
_PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                             "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})

Runner = Callable[[Sequence[str], dict[str, str] | None], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str],
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one Slurm client command (ExecutorError when it cannot be run at all)."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, env=env,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ExecutorError(f"{argv[0]}: {error}") from error


@dataclass(slots=True)
class _Job:
    fence: int
    job_id: str
    kill_requested: bool = False


class SlurmExecutor:
    def __init__(self, root: Path, partition: str, *, run: Runner = run_command,
                 env: dict[str, str] | None = None) -> None:
        """`root`: the attempt dirs (stdout, stderr, slurm.json); `env`: the environment the
        client commands see (SLURM_CONF), default this process's."""
        self._root = root
        self._partition = partition
        self._run = run
        self._env = dict(os.environ if env is None else env)
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._jobcomp: str | None = None
        """Slurm's job completion log ("" when it keeps none); None until looked up."""
        self._observed: Resources | None = None
        self._observed_at = float("-inf")
        root.mkdir(parents=True, exist_ok=True)

    def attempt_dir(self, fence: int) -> str:
        return str(self._root / f"{fence:0{ATTEMPT_DIR_DIGITS}d}")

    def start(self, assignment: Assignment) -> Launch:
        directory = Path(self.attempt_dir(assignment.fence))
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / WORK_DIR).mkdir(exist_ok=True)
        except OSError as error:
            raise ExecutorError(f"cannot make the attempt dir {directory}: {error}") from error
        argv = self.sbatch_argv(assignment, directory)
        env = {**self._env, **task_env(assignment, self._env)}
        done = self._run(argv, env)
        if done.returncode != 0:
            raise ExecutorError(f"sbatch refused fence {assignment.fence}: "
                                f"{(done.stderr or done.stdout).strip()[:500]}")
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise ExecutorError(f"sbatch answered {done.stdout.strip()[:100]!r}, not a job id")
        write_json_atomic(directory / JOB_FILE, {"job_id": job_id, "fence": assignment.fence})
        with self._lock:
            self._jobs[assignment.fence] = _Job(assignment.fence, job_id)
        log.info("slurm_job_submitted", fence=assignment.fence, slurm_job=job_id)
        return Launch(str(directory))

    def sbatch_argv(self, assignment: Assignment, directory: Path) -> list[str]:
        resources = assignment.resources
        argv = ["sbatch", "--parsable", f"--partition={self._partition}",
                f"--job-name={JOB_NAME_PREFIX}{assignment.fence}",
                f"--comment=raftsched {assignment.job_id}/{assignment.task_id} fence "
                f"{assignment.fence}",
                f"--cpus-per-task={max(1, math.ceil(resources.cpu_milli / 1000))}",
                f"--output={directory / 'stdout'}", f"--error={directory / 'stderr'}",
                f"--chdir={assignment.cwd or directory / WORK_DIR}", "--export=ALL",
                "--kill-on-invalid-dep=yes"]
        if resources.memory_mb:
            argv.append(f"--mem={resources.memory_mb}M")
        if resources.gpu:
            argv.append(f"--gres=gpu:{resources.gpu}")
        if assignment.timeout_ms > 0:
            argv.append(f"--time={max(1, math.ceil(assignment.timeout_ms / 60_000))}")
        argv.append(f"--wrap={shlex.join(assignment.command)}")
        return argv

    def adopt(self, record: AttemptRecord) -> bool:
        directory = Path(record.attempt_dir)
        job_id = _read_job_id(directory / JOB_FILE)
        if job_id is None:
            job_id = self._find_by_name(record.fence)  # died between sbatch and the write
            if job_id is None:
                return False
            write_json_atomic(directory / JOB_FILE, {"job_id": job_id, "fence": record.fence})
        with self._lock:
            self._jobs.setdefault(record.fence, _Job(record.fence, job_id))
        log.info("slurm_job_adopted", fence=record.fence, slurm_job=job_id)
        return True

    def _find_by_name(self, fence: int) -> str | None:
        done = self._run(["squeue", "-h", f"--name={JOB_NAME_PREFIX}{fence}", "-o", "%i"],
                         self._env)
        found = [line.strip() for line in done.stdout.splitlines() if line.strip().isdigit()]
        return found[0] if done.returncode == 0 and found else None

    def kill(self, fence: int) -> bool:
        with self._lock:
            job = self._jobs.get(fence)
        if job is None:
            return False
        job.kill_requested = True
        done = self._run(["scancel", job.job_id], self._env)
        if done.returncode != 0:
            log.warning("scancel_failed", fence=fence, slurm_job=job.job_id,
                        error=(done.stderr or done.stdout).strip()[:300])
        return True

    def observed_free(self) -> Resources | None:
        return self._observed

    def _observe(self) -> None:
        """Every OBSERVE_EVERY_S (from poll, not under the agent's lock): the partition's idle
        cpus, which other users' jobs take too. Memory and gpus stay the agent's accounting."""
        now = time.monotonic()
        if now - self._observed_at < OBSERVE_EVERY_S:
            return
        self._observed_at = now
        done = self._run(["sinfo", "-h", "-N", "-p", self._partition, "-o", "%n %C %t"],
                         self._env)
        if done.returncode != 0:
            return  # keep the last observation; the controller may be back soon
        idle: dict[str, int] = {}
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) < 3 or parts[2].rstrip("*~#!%$@^-") in UNAVAILABLE_NODE_STATES:
                continue
            counts = parts[1].split("/")  # allocated/idle/other/total
            if len(counts) == 4 and counts[1].isdigit():
                idle[parts[0]] = int(counts[1])
        self._observed = Resources(sum(idle.values()) * 1000, UNBOUNDED, UNBOUNDED)

    def poll(self) -> list[Completion]:
        self._observe()
        with self._lock:
            jobs = list(self._jobs.values())
        completions = [c for c in (self._check(job) for job in jobs) if c is not None]
        with self._lock:
            for completion in completions:
                self._jobs.pop(completion.fence, None)
        return completions

    def _check(self, job: _Job) -> Completion | None:
        done = self._run(["scontrol", "show", "job", "-o", job.job_id], self._env)
        if done.returncode != 0:
            if "Invalid job id" in (done.stderr + done.stdout):
                recorded = self._from_jobcomp(job.job_id)
                if recorded is not None:  # purged after MinJobAge: its completion record
                    return completion_of(job.fence, recorded.get("JobState", ""),
                                         recorded.get("ExitCode", ""), "",
                                         job.kill_requested)
                return Completion(job.fence, None, killed=True,
                                  reason=f"Slurm job {job.job_id} was forgotten by Slurm "
                                  "before its end was seen")
            return None  # the controller is unreachable now: ask again later
        fields = parse_job_line(done.stdout)
        state = fields.get("JobState", "")
        if not state or state in _PENDING_STATES:
            return None
        return completion_of(job.fence, state, fields.get("ExitCode", ""),
                             fields.get("Reason", ""), job.kill_requested)

    def _from_jobcomp(self, job_id: str) -> dict[str, str] | None:
        """The job's line in the jobcomp/filetxt log, when Slurm keeps one (JobCompType,
        JobCompLoc from `scontrol show config`, looked up once), else None."""
        if self._jobcomp is None:
            done = self._run(["scontrol", "show", "config"], self._env)
            config = {key.strip(): value.strip() for key, _, value in
                      (line.partition("=") for line in done.stdout.splitlines())}
            location = config.get("JobCompLoc", "")
            self._jobcomp = location if config.get("JobCompType") == "jobcomp/filetxt" \
                and location.startswith("/") else ""
        if not self._jobcomp:
            return None
        try:
            with open(self._jobcomp, encoding="utf-8", errors="replace") as records:
                for line in records:
                    if line.startswith(f"JobId={job_id} "):
                        return parse_job_line(line)
        except OSError:
            return None
        return None

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._jobs)

    def subscribe(self, listener: Callable[[], None]) -> None:
        return  # Slurm tells nobody: the agent polls on its timer

    def close(self) -> None:
        with self._lock:
            self._jobs.clear()


def completion_of(fence: int, state: str, exit_code: str, reason: str,
                  kill_requested: bool) -> Completion:
    """A finished Slurm job's JobState and ExitCode ("code:signal") as a completion."""
    code, _, signal = exit_code.partition(":")
    status = int(code) if code.isdigit() else None
    signal_number = int(signal) if signal.isdigit() else 0
    if state == "COMPLETED":
        return Completion(fence, 0)
    if state == "FAILED":
        if signal_number:
            return Completion(fence, SIGNAL_EXIT_BASE + signal_number)
        return Completion(fence, status if status is not None else 1)
    if state == "TIMEOUT":
        return Completion(fence, None, timed_out=True, reason="Slurm time limit")
    if state == "CANCELLED" and kill_requested:
        return Completion(fence, None, killed=True, reason="cancelled (scancel)")
    why = f"Slurm ended the job {state}" + (f" ({reason})" if reason and reason != "None"
                                             else "")
    # Not the task's doing (a node failed, an administrator or Slurm's preemption cancelled
    # it): reported KILLED, which the scheduler retries on the infrastructure budget, sparing
    # the task's own max_attempts. OUT_OF_MEMORY, DEADLINE and the like are the task's own.
    return Completion(fence, None, killed=state in INFRASTRUCTURE_STATES, reason=why)


def parse_job_line(text: str) -> dict[str, str]:
    """`scontrol show job -o` output (KEY=VALUE pairs) as a dict. Values with spaces (the
    command, the comment) come last or are not needed: split on spaces, keep the first `=`."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, equals, value = token.partition("=")
        if equals and key not in fields:
            fields[key] = value
    return fields


def _read_job_id(path: Path) -> str | None:
    try:
        document = read_json(path)
    except (OSError, ValueError):
        return None
    job_id = document.get("job_id") if document is not None else None
    return job_id if isinstance(job_id, str) and job_id.isdigit() else None


@dataclass(frozen=True, slots=True)
class PartitionCapacity:
    cpu_milli: int
    memory_mb: int
    gpu: int
    capabilities: tuple[str, ...]


def partition_capacity(partition: str, env: dict[str, str] | None = None,
                       run: Runner = run_command) -> PartitionCapacity:
    """The partition's total cpus, memory (MB), GRES gpus and node features, from `sinfo`
    (one line per node: %n %c %m %G %f). ExecutorError when Slurm does not answer or the
    partition has no node."""
    done = run(["sinfo", "-h", "-N", "-p", partition, "-o", "%n %c %m %G %f"], env)
    if done.returncode != 0:
        raise ExecutorError(f"sinfo -p {partition}: {(done.stderr or done.stdout).strip()}")
    cpu = memory = gpu = 0
    features: dict[str, None] = {}
    nodes: set[str] = set()
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[0] in nodes:
            continue
        nodes.add(parts[0])
        cpu += int(parts[1]) if parts[1].isdigit() else 0
        memory += int(parts[2]) if parts[2].isdigit() else 0
        gpu += _gres_gpus(parts[3])
        for feature in parts[4].split(","):
            if feature and feature != "(null)":
                features[feature] = None
    if not nodes:
        raise ExecutorError(f"Slurm partition {partition!r} has no node")
    return PartitionCapacity(cpu * 1000, memory, gpu, tuple(features))


def _gres_gpus(gres: str) -> int:
    """gpus in a GRES string such as `gpu:2`, `gpu:a100:4(S:0-1)`; 0 for `(null)`."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total
