"""The Slurm executor: a compute cluster that is a Slurm partition (`--executor slurm`).

Each admitted assignment becomes one Slurm job, submitted with `sbatch` through the standard
client commands (found on PATH; the cluster through `SLURM_CONF`): its cpus, memory, gpus
(`--gres=gpu:N`), time limit (from `timeout_s`), working directory, the task's environment with
the RAFTSCHED_* fence variables (the sbatch process's own environment, exported), and its
stdout and stderr into the attempt dir — so `task logs` reads them as it reads a local task's.
The job is named `rs-FENCE` and its comment says `raftsched CLUSTER job/task fence F`.

Durability: the Slurm job id is written (fsync'd) to the attempt dir's `slurm.json` before
`start` returns, so before the agent reports the attempt STARTED. A restarted agent `adopt`s
the attempt from that file; if the agent died between `sbatch` and that write, it finds the job
by its name in `squeue`; a fence whose job is nowhere never started (the agent rejects it).

Following: every LIST_EVERY_S `poll` lists the partition's jobs with one `squeue` (Slurm keeps
a finished job for `MinJobAge`) and asks `scontrol show job -o ID` only about a watched job that
is no longer queued or running there; the end state maps to a completion: COMPLETED → exit 0,
FAILED → its exit code (128 + the signal for a signal), TIMEOUT → timed out, CANCELLED after our
`scancel` → killed. The task's `timeout_s` is the agent's to enforce to the second (Slurm's own
`--time` counts whole minutes and is only the backstop): a job running longer is `scancel`ed
and reported timed out. Slurm's own failures (NODE_FAIL, BOOT_FAIL, PREEMPTED, REVOKED, CANCELLED
by someone else) and a job Slurm forgot before its end was seen (and that its jobcomp/filetxt
log, when it keeps one, does not record either) → killed too, with Slurm's
reason: the scheduler retries those on its infrastructure budget. OUT_OF_MEMORY, DEADLINE and
other ends are the task's own: no exit code, an application failure. `kill` is `scancel`.

Stale jobs: a queued or running job of this agent's cluster (its name `rs-FENCE`, its comment
`raftsched CLUSTER ...`) whose fence the agent is not watching — left by an attempt the agent
gave up (it was never recorded, or the data dir was lost) — is `scancel`ed by the same listing,
first right after a restart's adoption. Jobs of other clusters and users are left alone.

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

from agent.executors.base import ATTEMPT_DIR_DIGITS, ExecutorError, Launch, task_env
from agent.files import read_json, write_json_atomic
from agent.model import Assignment, AttemptRecord, Completion, Resources
from agent.outputs import make_io_dir, with_outputs
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
LIST_EVERY_S = 0.5
"""How often the executor lists the partition's jobs (one squeue for all it watches): how soon
an end, an overrun time limit or a stale job is seen, and at most this many calls a second to
the controller, whatever the number of jobs."""
SECONDS_PER_DAY = 86_400
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
    timeout_ms: int = 0
    kill_requested: bool = False
    timed_out: bool = False
    """scancel'ed by the agent for running longer than timeout_ms."""


@dataclass(frozen=True, slots=True)
class _Listed:
    """One job of the partition as `squeue` lists it."""

    state: str
    run_s: int | None
    name: str
    comment: str


class SlurmExecutor:
    def __init__(self, root: Path, partition: str, *, cluster_id: str = "",
                 run: Runner = run_command, env: dict[str, str] | None = None,
                 list_every_s: float = LIST_EVERY_S) -> None:
        """`root`: the attempt dirs (stdout, stderr, slurm.json); `cluster_id`: the cluster
        this agent speaks for, in each job's comment (without it no stale job is cancelled);
        `env`: the environment the client commands see (SLURM_CONF), default this
        process's."""
        self._root = root
        self._partition = partition
        self._cluster = cluster_id
        self._run = run
        self._env = dict(os.environ if env is None else env)
        self._list_every_s = list_every_s
        self._listed_at = float("-inf")
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._starting: set[int] = set()
        """Fences between the start of their sbatch and their entry in _jobs: not stale."""
        self._cancelled_stale: set[str] = set()
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
            io_env = make_io_dir(directory, assignment.inputs, None)
        except OSError as error:
            raise ExecutorError(f"cannot make the attempt dir {directory}: {error}") from error
        argv = self.sbatch_argv(assignment, directory)
        env = {**self._env, **task_env(assignment, self._env), **io_env}
        fence = assignment.fence
        with self._lock:
            self._starting.add(fence)
        try:
            done = self._run(argv, env)
            if done.returncode != 0:
                raise ExecutorError(f"sbatch refused fence {fence}: "
                                    f"{(done.stderr or done.stdout).strip()[:500]}")
            job_id = done.stdout.strip().split(";")[0]
            if not job_id.isdigit():
                raise ExecutorError(f"sbatch answered {done.stdout.strip()[:100]!r}, "
                                    "not a job id")
            write_json_atomic(directory / JOB_FILE, {"job_id": job_id, "fence": fence,
                                                     "timeout_ms": assignment.timeout_ms})
            with self._lock:
                self._jobs[fence] = _Job(fence, job_id, assignment.timeout_ms)
        finally:
            with self._lock:
                self._starting.discard(fence)
        log.info("slurm_job_submitted", fence=fence, slurm_job=job_id)
        return Launch(str(directory))

    def sbatch_argv(self, assignment: Assignment, directory: Path) -> list[str]:
        resources = assignment.resources
        argv = ["sbatch", "--parsable", f"--partition={self._partition}",
                f"--job-name={JOB_NAME_PREFIX}{assignment.fence}",
                f"--comment={self._tag()}{assignment.job_id}/{assignment.task_id} fence "
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

    def _tag(self) -> str:
        """How this agent's jobs' comments begin."""
        return f"raftsched {self._cluster} " if self._cluster else "raftsched "

    def adopt(self, record: AttemptRecord) -> bool:
        directory = Path(record.attempt_dir)
        job_id, timeout_ms = _read_job(directory / JOB_FILE)
        if job_id is None:
            job_id = self._find_by_name(record.fence)  # died between sbatch and the write
            if job_id is None:
                return False
            write_json_atomic(directory / JOB_FILE, {"job_id": job_id, "fence": record.fence})
        with self._lock:
            self._jobs.setdefault(record.fence, _Job(record.fence, job_id, timeout_ms))
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
        self._scancel(fence, job.job_id)
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
        now = time.monotonic()
        if now - self._listed_at < self._list_every_s:
            return []
        self._listed_at = now
        listing = self._list()
        if listing is None:
            return []  # the controller is unreachable now: ask again later
        with self._lock:
            jobs = list(self._jobs.values())
            # Read after the listing: a job it shows was submitted before, so its fence is
            # in _jobs or still in _starting, never wrongly stale.
            known = set(self._jobs) | self._starting
        completions: list[Completion] = []
        for job in jobs:
            seen = listing.get(job.job_id)
            if seen is not None and seen.state in _PENDING_STATES:
                self._enforce_time_limit(job, seen)
                continue
            completion = self._check(job)  # ended, or submitted after the listing was taken
            if completion is not None:
                completions.append(completion)
        self._cancel_stale(listing, known)
        with self._lock:
            for completion in completions:
                self._jobs.pop(completion.fence, None)
        return completions

    def _list(self) -> dict[str, _Listed] | None:
        """The partition's jobs Slurm remembers, any state, by job id (None: no answer)."""
        done = self._run(["squeue", "-h", "-t", "all", "-p", self._partition,
                          "-o", "%i|%T|%M|%j|%k"], self._env)
        if done.returncode != 0:
            log.warning("squeue_failed", error=(done.stderr or done.stdout).strip()[:300])
            return None
        listing: dict[str, _Listed] = {}
        for line in done.stdout.splitlines():
            parts = line.split("|", 4)
            if len(parts) == 5 and parts[0].isdigit():
                listing[parts[0]] = _Listed(parts[1], run_seconds(parts[2]), parts[3],
                                            parts[4])
        return listing

    def _enforce_time_limit(self, job: _Job, seen: _Listed) -> None:
        """The task's timeout_s, to the second: Slurm's --time counts whole minutes."""
        if job.timeout_ms <= 0 or job.timed_out or job.kill_requested or seen.run_s is None \
                or seen.run_s * 1000 < job.timeout_ms:
            return
        job.timed_out = True
        log.info("slurm_job_timed_out", fence=job.fence, slurm_job=job.job_id,
                 timeout_ms=job.timeout_ms, run_s=seen.run_s)
        self._scancel(job.fence, job.job_id)

    def _cancel_stale(self, listing: dict[str, _Listed], known: set[int]) -> None:
        """scancel for this cluster's queued or running jobs whose fence nobody watches."""
        if not self._cluster:
            return
        tag = self._tag()
        self._cancelled_stale &= set(listing)
        for job_id, seen in listing.items():
            fence = fence_of(seen.name)
            if fence is None or fence in known or seen.state not in _PENDING_STATES \
                    or not seen.comment.startswith(tag) or job_id in self._cancelled_stale:
                continue
            self._cancelled_stale.add(job_id)
            log.warning("stale_slurm_job_cancelled", fence=fence, slurm_job=job_id,
                        state=seen.state)
            self._scancel(fence, job_id)

    def _scancel(self, fence: int, job_id: str) -> None:
        done = self._run(["scancel", job_id], self._env)
        if done.returncode != 0:
            log.warning("scancel_failed", fence=fence, slurm_job=job_id,
                        error=(done.stderr or done.stdout).strip()[:300])

    def _check(self, job: _Job) -> Completion | None:
        done = self._run(["scontrol", "show", "job", "-o", job.job_id], self._env)
        if done.returncode != 0:
            if "Invalid job id" in (done.stderr + done.stdout):
                recorded = self._from_jobcomp(job.job_id)
                if recorded is not None:  # purged after MinJobAge: its completion record
                    return self._completion(job, recorded.get("JobState", ""),
                                            recorded.get("ExitCode", ""), "")
                return Completion(job.fence, None, killed=True,
                                  reason=f"Slurm job {job.job_id} was forgotten by Slurm "
                                  "before its end was seen")
            return None  # the controller is unreachable now: ask again later
        fields = parse_job_line(done.stdout)
        state = fields.get("JobState", "")
        if not state or state in _PENDING_STATES:
            return None
        return self._completion(job, state, fields.get("ExitCode", ""),
                                fields.get("Reason", ""))

    def _completion(self, job: _Job, state: str, exit_code: str, reason: str) -> Completion:
        if state == "CANCELLED" and job.timed_out and not job.kill_requested:
            return Completion(job.fence, None, timed_out=True,
                              reason=f"timed out after {job.timeout_ms} ms (scancel)")
        return with_outputs(completion_of(job.fence, state, exit_code, reason,
                                          job.kill_requested),
                            Path(self.attempt_dir(job.fence)))

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
    if state == "FAILED":  # the same reasons the subprocess executor's wrapper gives
        if signal_number:
            return Completion(fence, SIGNAL_EXIT_BASE + signal_number,
                              reason=f"terminated by signal {signal_number}")
        code_or_one = status if status is not None else 1
        return Completion(fence, code_or_one, reason=f"exit code {code_or_one}")
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


def _read_job(path: Path) -> tuple[str | None, int]:
    """The Slurm job id (None when unknown) and the task's timeout_ms in a slurm.json."""
    try:
        document = read_json(path)
    except (OSError, ValueError):
        return None, 0
    if document is None:
        return None, 0
    job_id, timeout_ms = document.get("job_id"), document.get("timeout_ms")
    return (job_id if isinstance(job_id, str) and job_id.isdigit() else None,
            timeout_ms if isinstance(timeout_ms, int) and timeout_ms > 0 else 0)


def run_seconds(text: str) -> int | None:
    """squeue's %M (time used: M:SS, H:MM:SS or D-HH:MM:SS) in seconds; None if unreadable."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not (days == "" or days.isdigit()) or not 2 <= len(parts) <= 3 \
            or not all(part.isdigit() for part in parts):
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds + (int(days) * SECONDS_PER_DAY if days else 0)


def fence_of(job_name: str) -> int | None:
    """The fence in a job name `rs-FENCE`; None for any other name."""
    digits = job_name.removeprefix(JOB_NAME_PREFIX)
    if digits == job_name or not digits.isdigit() or digits.startswith("0"):
        return None
    return int(digits)


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
