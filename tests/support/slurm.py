"""A private, real single-node Slurm for integration tests (the Debian packages slurm-wlm and
munge, Slurm 22.05, which scripts/test installs as root through `ensure_slurm`).

`LocalSlurm(directory)` is a context manager that, inside `directory`, creates a munge key,
starts its own munged on its own socket, writes a slurm.conf (ports picked free together, every
state, spool, pid and log file under `directory`, cgroup-free plugins, job completions logged
with jobcomp/filetxt), starts slurmctld and slurmd in the foreground as its child processes and
waits, with a wall-clock deadline, until the node is idle. On exit it cancels the jobs left in
its cluster (through its own controller), waits (bounded) for their processes to end, and stops
the three daemons by the pids it holds: SIGTERM, a bounded wait, then SIGKILL. It never signals
a process it did not start.

Client commands need `SLURM_CONF` (without it they look the controller up in DNS and fail):
use `LocalSlurm.run(...)` or pass `LocalSlurm.env` to subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from raftsched.dev.cluster import pick_free_ports

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
CLIENTS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo", "mungekey")
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


class SlurmError(RuntimeError):
    """The private Slurm could not be started (the message carries the daemons' log tails)."""


def binary(name: str) -> str | None:
    """`name` on PATH, or in the sbin directories (where Debian puts the daemons and mungekey,
    often not on a user's PATH)."""
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN])
    return shutil.which(name, path=search)


def slurm_available() -> str | None:
    """None when a private Slurm can be started here, else why not (for a loud pytest.skip)."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if binary(name) is None]
    if missing:
        return (f"Slurm not installed (missing {', '.join(missing)}): scripts/test installs the "
                "Debian packages slurm-wlm and munge when run as root "
                "(apt-get install --no-install-recommends slurm-wlm munge)")
    if os.geteuid() != 0:
        return ("a private Slurm needs root (SlurmUser=root, slurmd runs jobs as the submitting "
                "user); run the Slurm tests as root")
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


class LocalSlurm:
    """A private single-node Slurm cluster under `directory` (see the module docstring)."""

    def __init__(self, directory: Path, *, start_timeout_s: float = START_TIMEOUT_S,
                 cpus: int = NODE_CPUS, memory_mb: int = NODE_MEMORY_MB) -> None:
        self.directory = Path(directory).resolve()
        self.start_timeout_s = start_timeout_s
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.node = short_hostname()
        self.partition = PARTITION
        self.cluster_name = f"rs{os.getpid()}x{time.monotonic_ns() % 10**6}"
        self.conf = self.directory / "slurm.conf"
        self.jobcomp = self.directory / "jobcomp.txt"
        self.state_dir = self.directory / "state"
        self.spool_dir = self.directory / "spool"
        self.log_dir = self.directory / "log"
        self.munge_dir = self.directory / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self._socket_dir: Path | None = None  # a short one of ours when `directory` is too deep
        self.munge_socket = self.munge_dir / "munge.socket"
        self.ctld_port = 0
        self.slurmd_port = 0
        self.env: dict[str, str] = {}
        self.startup_s: float | None = None
        """Wall clock from the first daemon started to an idle node."""
        self._children: dict[str, subprocess.Popen[bytes]] = {}

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
        self.stop()

    # --- client commands --------------------------------------------------------------------

    def run(self, *argv: str, timeout_s: float = COMMAND_TIMEOUT_S,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (sbatch, scontrol, ...) against this cluster."""
        assert self.env, "LocalSlurm not started"
        command = [binary(argv[0]) or argv[0], *argv[1:]]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=self.env, check=check, cwd=self.directory)

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict ({} once the controller forgot the job)."""
        result = self.run("scontrol", "show", "job", "-o", job_id)
        if result.returncode != 0:
            return {}
        fields: dict[str, str] = {}
        for word in result.stdout.split():
            key, sep, value = word.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    # --- start ------------------------------------------------------------------------------

    def start(self) -> None:
        reason = slurm_available()
        if reason is not None:
            raise SlurmError(reason)
        for path in (self.state_dir, self.spool_dir, self.log_dir, self.munge_dir):
            path.mkdir(parents=True, exist_ok=True)
        self._place_munge_socket()
        self._create_munge_key()
        self.ctld_port, self.slurmd_port = pick_free_ports(2)
        self.conf.write_text(self.slurm_conf())
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SCANCEL_"))}
        self.env["SLURM_CONF"] = str(self.conf)
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

    def _place_munge_socket(self) -> None:
        # Client processes (the daemons, sbatch, job steps) must reach the socket: 755.
        self.munge_dir.chmod(0o755)
        if len(os.fsencode(self.munge_socket)) > SOCKET_PATH_MAX:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="rs-munge-"))
            self._socket_dir.chmod(0o755)
            self.munge_socket = self._socket_dir / "munge.socket"
        # slurmd's step sockets: SPOOL/NODE_JOBID.STEPID, each id up to 10 digits.
        step_socket = self.spool_dir / f"{self.node}_{'9' * 10}.{'9' * 10}"
        if len(os.fsencode(step_socket)) > SOCKET_PATH_MAX:
            raise SlurmError(f"{self.spool_dir} is too long for slurmd's step sockets")

    def _create_munge_key(self) -> None:
        if self.munge_key.exists():
            return
        if mungekey := binary("mungekey"):
            subprocess.run([mungekey, "--create", f"--keyfile={self.munge_key}"],
                           capture_output=True, timeout=COMMAND_TIMEOUT_S, check=True)
        else:
            fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as key:
                key.write(os.urandom(1024))
        self.munge_key.chmod(0o600)

    def slurm_conf(self) -> str:
        """The slurm.conf of this cluster (Slurm 22.05: CredType, not the older CryptoType)."""
        d, log = self.directory, self.log_dir
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
            f"RealMemory={self.memory_mb} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE "
            "State=UP",
        ]
        return "\n".join(lines) + "\n"

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.log_dir / f"{name}.out").open("ab") as out:
            self._children[name] = subprocess.Popen(
                [binary(argv[0]) or argv[0], *argv[1:]], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=self.env, cwd=self.directory,
                start_new_session=True)

    def _node_idle(self) -> bool:
        try:
            result = self.run("sinfo", "-h", "-p", self.partition, "-o", "%t",
                              timeout_s=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0 and result.stdout.split() == ["idle"]

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            exited = [f"{name} (pid {child.pid}) exited with {child.returncode}"
                      for name, child in self._children.items() if child.poll() is not None]
            if exited:
                raise SlurmError(f"waiting for {what}: {'; '.join(exited)}\n{self.logs()}")
            if ready():
                return
            if time.monotonic() >= deadline:
                raise SlurmError(f"no {what} within the deadline\n{self.logs()}")
            time.sleep(POLL_S)

    def logs(self) -> str:
        """The tails of the daemons' log files and of their stdout/stderr."""
        parts = []
        for name in DAEMONS:
            for path in (self.log_dir / f"{name}.log", self.log_dir / f"{name}.out"):
                if path.exists():
                    parts.append(f"--- {path}\n{tail(path)}")
        return "\n".join(parts)

    # --- stop -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel what still runs in this cluster, let its job processes end, then stop our
        daemons by pid (idempotent)."""
        children, self._children = self._children, {}
        try:
            if all(name in children and children[name].poll() is None
                   for name in ("slurmctld", "slurmd")):
                self._cancel_all_jobs()
                self._wait_job_processes(STOP_TIMEOUT_S, {c.pid for c in children.values()})
        finally:
            for name in reversed(DAEMONS):
                child = children.get(name)
                if child is not None:
                    terminate(child)
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
                self._socket_dir = None
        if children and (left := self._wait_job_processes(STOP_TIMEOUT_S, set())):
            warnings.warn(f"LocalSlurm {self.directory}: job processes {left} outlived the "
                          "daemons (left alone: this fixture only signals its own daemons)",
                          stacklevel=2)

    def _cancel_all_jobs(self) -> None:
        """Jobs still running would outlive slurmd in their slurmstepd: end them through the
        controller (it only knows this cluster's jobs). Best effort, bounded."""
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                result = self.run("squeue", "-h", "-o", "%i", timeout_s=CANCEL_TIMEOUT_S)
                jobs = result.stdout.split()
                if result.returncode != 0 or not jobs:
                    return
                self.run("scancel", *jobs, timeout_s=CANCEL_TIMEOUT_S)
                time.sleep(POLL_S * 5)
        except subprocess.SubprocessError:
            return

    def _job_processes(self, daemons: set[int]) -> list[int]:
        """Pids of this cluster's slurmstepd and job processes (only looked at): they carry
        our SLURM_CONF in their environment, as do the daemons and their helpers (slurmctld's
        slurmscriptd), left out by `daemons` and their children."""
        marker = b"SLURM_CONF=" + os.fsencode(self.conf)
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in daemons:
                continue
            try:
                environ = (entry / "environ").read_bytes()
                state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            except (OSError, ValueError):  # gone, or not ours to read
                continue
            # A zombie (slurmstepd waits a second or two here for pid 1 to reap it) is done.
            if state != "Z" and int(ppid) not in daemons and marker in environ.split(b"\0"):
                pids.append(int(entry.name))
        return sorted(pids)

    def _wait_job_processes(self, timeout_s: float, daemons: set[int]) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while (left := self._job_processes(daemons)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return left


def terminate(child: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, a bounded wait, then SIGKILL: only the process `child` started (its pid is
    ours until we reap it, so it cannot have been reused)."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=timeout_s)


@contextmanager
def local_slurm(directory: Path, *, start_timeout_s: float = START_TIMEOUT_S,
                cpus: int = NODE_CPUS, memory_mb: int = NODE_MEMORY_MB) -> Iterator[LocalSlurm]:
    """For a pytest fixture: skips (loudly, with the reason) when Slurm cannot run here."""
    import pytest

    reason = slurm_available()
    if reason is not None:
        pytest.skip(reason)
    with LocalSlurm(directory, start_timeout_s=start_timeout_s, cpus=cpus,
                    memory_mb=memory_mb) as slurm:
        yield slurm
