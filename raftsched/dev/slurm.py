"""A private, real single-node Slurm (the Debian packages slurm-wlm and munge, Slurm 22.05):
for the integration tests, `scripts/bench slurm` and `raftsched dev up --slurm`.

`LocalSlurm(directory)`, inside `directory`, creates a munge key, starts its own munged on its
own socket, writes a slurm.conf (ports picked free together, every state, spool, pid and log
file under `directory`, cgroup-free plugins, job completions logged with jobcomp/filetxt; the
node's cpus, memory and features as asked), starts slurmctld and slurmd in the foreground
through the process supervisor (`raftsched.dev.supervisor.Child`, or the `spawn` the caller
passes, e.g. one that also records each daemon's identity) and waits, with a wall-clock
deadline, until the node is idle. Each start is a fresh cluster: the controller's state and the
completion log of an earlier run in the same directory are removed first.

`stop()` (also on leaving a `with` block) and `stop_daemons` (for a later program that knows the
daemons only by their recorded identities, `raftsched dev down`) cancel the jobs left in the
cluster through its own controller, wait (bounded) for their processes to end, and stop the
three daemons by pid, slurmd first: SIGTERM, a bounded wait, then SIGKILL. Nothing else is ever
signalled.

Client commands need `SLURM_CONF` (without it they look the controller up in DNS and fail):
use `LocalSlurm.run(...)`, pass `LocalSlurm.env` to subprocess, or `client_env(conf, env)`.
Needs root (SlurmUser=root) and the packages: `slurm_available()` says why not, in one line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from raftsched import procfs
from raftsched.dev.ports import pick_free_ports
from raftsched.dev.supervisor import Child, Stoppable, StopResult, stop_all

START_TIMEOUT_S = 60.0
"""Wall clock from the first daemon started to an idle node (about 1 s on an idle machine)."""
MUNGE_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 10.0
CANCEL_TIMEOUT_S = 10.0
POLL_S = 0.1
LOG_TAIL_LINES = 25
SOCKET_PATH_MAX = 107
"""sockaddr_un holds 108 bytes with the terminating NUL."""
PARTITION = "debug"
NODE_CPUS = 8
NODE_MEMORY_MB = 8000
DEF_MEM_PER_CPU_MB = 100
DAEMONS = ("munged", "slurmctld", "slurmd")
"""In the order they start; they stop in the reverse order."""
CLIENTS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo", "mungekey")
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
CONF_FILE_NAME = "slurm.conf"
JOBCOMP_FILE_NAME = "jobcomp.txt"
LOG_DIR_NAME = "log"
FOREIGN_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SCANCEL_")
"""Settings of another Slurm (or of a job of one) that our client commands must not see."""
INSTALL_HINT = ("install the Debian packages slurm-wlm and munge as root (apt-get install "
                "--no-install-recommends slurm-wlm munge; scripts/test and scripts/demo --slurm "
                "do it through scripts/lib/system.sh's ensure_slurm)")

DaemonSpawn = Callable[[str, list[str], Path, dict[str, str], Path], Child]
"""(name, argv, log file, environment, working directory) -> the daemon, started."""


class Stopped(NamedTuple):
    """What stopping a private Slurm did."""

    results: list[StopResult]
    """One per daemon, slurmd first."""
    job_processes: list[int]
    """Pids of job processes still there after the daemons stopped (looked at, never
    signalled)."""


class SlurmError(RuntimeError):
    """The private Slurm could not be started. `message` says why in one line, `log` is the
    daemon log that shows it (if any); str() adds the tails of all the daemons' logs."""

    def __init__(self, message: str, *, log: Path | None = None, logs: str = "") -> None:
        super().__init__(f"{message}\n{logs}" if logs else message)
        self.message = message
        self.log = log


def binary(name: str) -> str | None:
    """`name` on PATH, or in the sbin directories (where Debian puts the daemons and mungekey,
    often not on a user's PATH)."""
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN])
    return shutil.which(name, path=search)


def slurm_available() -> str | None:
    """None when a private Slurm can be started here, else why not, in one line (for a loud
    pytest.skip or a command's error)."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if binary(name) is None]
    if missing:
        return f"Slurm not installed (missing {', '.join(missing)}): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return ("a private Slurm needs root (SlurmUser=root, slurmd runs jobs as the submitting "
                "user): run it as root")
    return None


def short_hostname() -> str:
    """The host's name as `hostname -s` prints it: slurmctld only runs on the SlurmctldHost it
    recognises as itself, and slurmd's node name defaults to it."""
    try:
        result = subprocess.run(["hostname", "-s"], capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S, check=True)
        name = result.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        name = ""
    return name or socket.gethostname().split(".")[0]


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"({error.strerror})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def client_env(conf: Path, base: Mapping[str, str]) -> dict[str, str]:
    """`base` without another Slurm's settings, with SLURM_CONF naming `conf`: the environment
    of a client command (sbatch, squeue, ...) or an agent in front of this cluster."""
    env = {key: value for key, value in base.items()
           if not key.startswith(FOREIGN_ENV_PREFIXES)}
    env["SLURM_CONF"] = str(conf)
    return env


def run_client(env: Mapping[str, str], *argv: str, timeout_s: float = COMMAND_TIMEOUT_S,
               check: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command (sbatch, scontrol, ...) with `env` (see `client_env`)."""
    command = [binary(argv[0]) or argv[0], *argv[1:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                          env=dict(env), check=check, cwd=cwd)


def start_daemon(name: str, argv: list[str], log: Path, env: dict[str, str], cwd: Path) -> Child:
    """The default `DaemonSpawn`: a supervisor child in its own session."""
    child = Child(name, argv, log, env=env, cwd=cwd)
    child.start(note="private Slurm")
    return child


class LocalSlurm:
    """A private single-node Slurm cluster under `directory` (see the module docstring)."""

    def __init__(self, directory: Path, *, start_timeout_s: float = START_TIMEOUT_S,
                 cpus: int = NODE_CPUS, memory_mb: int = NODE_MEMORY_MB,
                 features: Sequence[str] = (), spawn: DaemonSpawn = start_daemon) -> None:
        self.directory = Path(directory).resolve()
        self.start_timeout_s = start_timeout_s
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.features = tuple(features)
        """The node's features: an agent in front of the partition offers them as
        capabilities."""
        self.node = short_hostname()
        self.partition = PARTITION
        self.cluster_name = f"rs{os.getpid()}x{time.monotonic_ns() % 10**6}"
        self.conf = self.directory / CONF_FILE_NAME
        self.jobcomp = self.directory / JOBCOMP_FILE_NAME
        self.state_dir = self.directory / "state"
        self.spool_dir = self.directory / "spool"
        self.log_dir = self.directory / LOG_DIR_NAME
        self.munge_dir = self.directory / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self.socket_dir: Path | None = None
        """A short directory of ours holding munge's socket when `directory` is too deep."""
        self.munge_socket = self.munge_dir / "munge.socket"
        self.ctld_port = 0
        self.slurmd_port = 0
        self.env: dict[str, str] = {}
        self.startup_s: float | None = None
        """Wall clock from the first daemon started to an idle node."""
        self._spawn_child = spawn
        self._children: dict[str, Child] = {}

    # --- context manager --------------------------------------------------------------------

    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        left = self.stop().job_processes
        if left:
            warnings.warn(f"LocalSlurm {self.directory}: job processes {left} outlived the "
                          "daemons (left alone: only our own daemons are signalled)",
                          stacklevel=2)

    # --- client commands --------------------------------------------------------------------

    def run(self, *argv: str, timeout_s: float = COMMAND_TIMEOUT_S,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (sbatch, scontrol, ...) against this cluster."""
        assert self.env, "LocalSlurm not started"
        return run_client(self.env, *argv, timeout_s=timeout_s, check=check,
                          cwd=self.directory)

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict ({} once the controller forgot the job)."""
        from agent.executors.slurm import parse_job_line  # the agent reads scontrol the same way

        result = self.run("scontrol", "show", "job", "-o", job_id)
        return parse_job_line(result.stdout) if result.returncode == 0 else {}

    # --- start ------------------------------------------------------------------------------

    def start(self) -> None:
        reason = slurm_available()
        if reason is not None:
            raise SlurmError(reason)
        self._start_afresh()
        self._place_munge_socket()
        self._create_munge_key()
        self.ctld_port, self.slurmd_port = pick_free_ports(2)
        self.conf.write_text(self.slurm_conf())
        self.env = client_env(self.conf, os.environ)
        started = time.monotonic()
        deadline = started + self.start_timeout_s
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={self.munge_socket}",
                               f"--key-file={self.munge_key}",
                               f"--pid-file={self.munge_dir / 'munged.pid'}",
                               # In the foreground munged logs to stderr (munged.out) instead.
                               f"--log-file={self.log_dir / 'munged.log'}",
                               f"--seed-file={self.munge_dir / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.is_socket(), min(deadline, started + MUNGE_TIMEOUT_S),
                   "munged's socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self._node_idle, deadline, f"node {self.node} idle in partition "
                   f"{self.partition}")
        self.startup_s = time.monotonic() - started

    def _start_afresh(self) -> None:
        """An earlier run's controller state (its ClusterName, its jobs) and completion log
        would be taken for this run's: remove them."""
        for path in (self.state_dir, self.spool_dir):
            shutil.rmtree(path, ignore_errors=True)
        self.jobcomp.unlink(missing_ok=True)
        for path in (self.state_dir, self.spool_dir, self.log_dir, self.munge_dir):
            path.mkdir(parents=True, exist_ok=True)

    def _place_munge_socket(self) -> None:
        # Client processes (the daemons, sbatch, job steps) must reach the socket: 755.
        self.munge_dir.chmod(0o755)
        if len(os.fsencode(self.munge_socket)) > SOCKET_PATH_MAX:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="rs-munge-"))
            self.socket_dir.chmod(0o755)
            self.munge_socket = self.socket_dir / "munge.socket"
        # slurmd's step sockets: SPOOL/NODE_JOBID.STEPID, each id up to 10 digits.
        step_socket = self.spool_dir / f"{self.node}_{'9' * 10}.{'9' * 10}"
        if len(os.fsencode(step_socket)) > SOCKET_PATH_MAX:
            raise SlurmError(f"{self.spool_dir} is too long for slurmd's step sockets")

    def _create_munge_key(self) -> None:
        if self.munge_key.exists():
            return
        if mungekey := binary("mungekey"):
            try:
                subprocess.run([mungekey, "--create", f"--keyfile={self.munge_key}"],
                               capture_output=True, timeout=COMMAND_TIMEOUT_S, check=True)
            except subprocess.CalledProcessError as error:
                raise SlurmError(f"mungekey --create: exit {error.returncode}: "
                                 f"{error.stderr.decode(errors='replace').strip()}") from None
        else:
            fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as key:
                key.write(os.urandom(1024))
        self.munge_key.chmod(0o600)

    def slurm_conf(self) -> str:
        """The slurm.conf of this cluster (Slurm 22.05: CredType, not the older CryptoType)."""
        d, log = self.directory, self.log_dir
        features = f" Features={','.join(self.features)}" if self.features else ""
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmdSpoolDir={self.spool_dir}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={log / 'slurmctld.log'}",
            f"SlurmdLogFile={log / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "MinJobAge=300",
            "KillWait=2",
            "MailProg=/bin/true",  # the default /bin/mail is absent: an error at every start
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={self.memory_mb}{features} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE "
            "State=UP",
        ]
        return "\n".join(lines) + "\n"

    def _spawn(self, name: str, argv: list[str]) -> None:
        command = [binary(argv[0]) or argv[0], *argv[1:]]
        self._children[name] = self._spawn_child(name, command, self.log_dir / f"{name}.out",
                                                 dict(self.env), self.directory)

    def _node_idle(self) -> bool:
        try:
            result = self.run("sinfo", "-h", "-p", self.partition, "-o", "%t",
                              timeout_s=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0 and result.stdout.split() == ["idle"]

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            exited = [(name, child) for name, child in self._children.items()
                      if child.poll() is not None]
            if exited:
                raise SlurmError(f"waiting for {what}: " + "; ".join(
                    f"{name} (pid {child.pid}) exited with {child.poll()}"
                    for name, child in exited), log=self.daemon_log(exited[0][0]),
                    logs=self.logs())
            if ready():
                return
            if time.monotonic() >= deadline:
                raise SlurmError(f"no {what} within {self.start_timeout_s:g} s",
                                 log=self.daemon_log("slurmd"), logs=self.logs())
            time.sleep(POLL_S)

    def daemon_log(self, name: str) -> Path:
        """The daemon's own log file, or its stdout and stderr when that one is empty."""
        own = self.log_dir / f"{name}.log"
        try:
            return own if own.stat().st_size else self.log_dir / f"{name}.out"
        except OSError:
            return self.log_dir / f"{name}.out"

    def logs(self) -> str:
        """The tails of the daemons' log files and of their stdout/stderr."""
        parts = []
        for name in DAEMONS:
            for path in (self.log_dir / f"{name}.log", self.log_dir / f"{name}.out"):
                if path.exists():
                    parts.append(f"--- {path}\n{tail(path)}")
        return "\n".join(parts)

    # --- stop -------------------------------------------------------------------------------

    def stop(self) -> Stopped:
        """Cancel what still runs in this cluster, let its job processes end, then stop our
        daemons by pid (idempotent)."""
        children, self._children = self._children, {}
        try:
            return stop_daemons(children, self.conf) if children else Stopped([], [])
        finally:
            if self.socket_dir is not None:
                shutil.rmtree(self.socket_dir, ignore_errors=True)
                self.socket_dir = None


# --- stopping, also from a later program ---------------------------------------------------


def stop_daemons(daemons: Mapping[str, Stoppable], conf: Path) -> Stopped:
    """Stop the private Slurm configured by `conf` whose daemons are `daemons` (by name, a
    `Child` or a `Recorded` identity): while its controller and slurmd run, cancel its jobs and
    wait (bounded) for their processes to end; then stop the daemons one by one, slurmd first
    (SIGTERM, a bounded wait, SIGKILL)."""
    try:
        if all(name in daemons and daemons[name].alive() for name in ("slurmctld", "slurmd")):
            cancel_jobs(client_env(conf, os.environ), conf.parent)
            wait_job_processes(conf, STOP_TIMEOUT_S, {d.pid for d in daemons.values()})
    finally:
        results = [stop_all([daemons[name]], term_timeout_s=STOP_TIMEOUT_S)[0]
                   for name in reversed(DAEMONS) if name in daemons]
    return Stopped(results, wait_job_processes(conf, STOP_TIMEOUT_S, set()))


def cancel_jobs(env: Mapping[str, str], cwd: Path) -> None:
    """Jobs still running would outlive slurmd in their slurmstepd: end them through the
    controller `env` names (it only knows its own cluster's jobs). Best effort, bounded."""
    deadline = time.monotonic() + CANCEL_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            result = run_client(env, "squeue", "-h", "-o", "%i", timeout_s=CANCEL_TIMEOUT_S,
                                cwd=cwd)
            jobs = result.stdout.split()
            if result.returncode != 0 or not jobs:
                return
            run_client(env, "scancel", *jobs, timeout_s=CANCEL_TIMEOUT_S, cwd=cwd)
            time.sleep(POLL_S * 5)
    except (OSError, subprocess.SubprocessError):
        return


def job_processes(conf: Path, daemons: set[int]) -> list[int]:
    """Pids of the slurmstepd and job processes of the cluster `conf` configures (only looked
    at): they carry its SLURM_CONF in their environment (from the daemons, or from the sbatch
    that submitted the job), and a job's also SLURM_JOB_ID. The daemons and their helpers
    (slurmctld's slurmscriptd: `daemons` and their children) are left out, as is a shell or an
    agent that merely has the same SLURM_CONF."""
    marker = b"SLURM_CONF=" + os.fsencode(conf)
    found = []
    for pid in procfs.pids():
        if pid in daemons:
            continue
        environ = procfs.read_environ(pid)
        stat = procfs.process_stat(pid) if environ is not None else None
        if environ is None or stat is None:  # gone, or not ours to read
            continue
        # A zombie (slurmstepd waits a second or two here for pid 1 to reap it) is done.
        if stat.state in procfs.GONE_STATES or stat.ppid in daemons or marker not in environ:
            continue
        if stat.comm == "slurmstepd" or any(v.startswith(b"SLURM_JOB_ID=") for v in environ):
            found.append(pid)
    return sorted(found)


def wait_job_processes(conf: Path, timeout_s: float, daemons: set[int]) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := job_processes(conf, daemons)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return left
